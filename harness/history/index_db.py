"""The derived SQLite index of a history, through SQLAlchemy 2.x ORM models.

One :class:`RecordRow` per record (provenance, conditions, statuses, comparison
key, baseline), one :class:`TrialRow` per measured trial and one
:class:`SummaryRow` per cell, for queries and rendering. The same models hold the
index of a history on a PostgreSQL server (:mod:`harness.history.postgres`); nothing
here is SQLite-only except the file handling (WAL, integrity checks).

The schema is migrated by Alembic (``harness/history/migrations``, run by
:mod:`harness.history.migrate`) on both dialects; the index also keeps its schema
version in :class:`IndexMetaRow`, so that an older harness refuses a newer index. An
index older than the first migration is rebuilt from the records, which is always
possible because the index is derived data. SQLite runs
in WAL mode with ``synchronous=NORMAL``: a crash can lose the last index
transaction but never corrupts the file, and ``harness history verify`` /
``rebuild`` detect and repair a lagging index.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Connection,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    bindparam,
    create_engine,
    event,
    insert,
    inspect,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DatabaseError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from harness.errors import HistoryError
from harness.fsio import replace_file
from harness.history.entries import markers_of
from harness.history.migrate import (
    INDEX_HEAD_REVISION,
    PRE_ALEMBIC_REVISION,
    VERSION_TABLE,
    index_revision,
    stamp_index,
    upgrade_index,
)

#: Version of the index's tables; on change, bump it, add the Alembic revision
#: ``index_v<N>`` (harness/history/migrations/versions) and INDEX_HEAD_REVISION.
#: 2: the record SHA-256 is a UNIQUE constraint of the table (version 1 had a unique
#: index, which a damaged or edited index could lose; a version-1 index is rebuilt).
#: 3: one index on (comparison_key, seq) replaces the one on comparison_key.
#: 4: records.host_load and summaries.verdict (the dashboard's markers of contended runs
#: and flagged cells), filled from the records by the migration.
INDEX_SCHEMA_VERSION = 4
META_SCHEMA_VERSION = "schema_version"
#: The oldest index schema version that is migrated in place (older ones are rebuilt).
OLDEST_MIGRATED_VERSION = 2

#: Byte counts: 64-bit (files of 4D-STEM data exceed 2**31 bytes). INTEGER on SQLite,
#: whose integers are 64-bit already, so a version-2 SQLite index matches the models.
ByteCount = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    pass


class IndexMetaRow(Base):
    """Key/value facts about the index itself: schema version, render bookkeeping."""

    __tablename__ = "index_meta"
    key: Mapped[str] = mapped_column(String, primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class RecordRow(Base):
    """One registered report; ``seq`` is the index order (registration order, or
    ``created_utc`` order after a rebuild)."""

    __tablename__ = "records"
    #: a group's records in seq order (list --group, the newest record of a key)
    __table_args__ = (Index("ix_records_key_seq", "comparison_key", "seq"),)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    #: UNIQUE in the table itself (an autoindex that cannot be dropped on its own)
    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    path: Mapped[str] = mapped_column(String)
    size_bytes: Mapped[int] = mapped_column(ByteCount)
    schema_version: Mapped[int] = mapped_column(Integer)
    created_utc: Mapped[str] = mapped_column(String)
    git_revision: Mapped[str | None] = mapped_column(String, nullable=True)
    git_dirty: Mapped[bool] = mapped_column(Boolean)
    device_kind: Mapped[str] = mapped_column(String)
    device_name: Mapped[str] = mapped_column(String)
    device_uuid: Mapped[str | None] = mapped_column(String, nullable=True)
    storage_id: Mapped[str] = mapped_column(String)
    backend: Mapped[str] = mapped_column(String)
    representation: Mapped[str] = mapped_column(String)
    timing_boundary: Mapped[str] = mapped_column(String)
    allocator_policy: Mapped[str] = mapped_column(String)
    protocol_version: Mapped[int] = mapped_column(Integer)
    execution: Mapped[str] = mapped_column(String)
    correctness: Mapped[str] = mapped_column(String)
    source_stability: Mapped[str] = mapped_column(String)
    performance: Mapped[str] = mapped_column(String)
    exit_code: Mapped[int] = mapped_column(Integer)
    baseline_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    baseline_path: Mapped[str | None] = mapped_column(String, nullable=True)
    comparison_key: Mapped[str] = mapped_column(String)
    comparison_fields: Mapped[str] = mapped_column(Text)
    #: The record's line in index.json, serialised once at registration.
    index_entry: Mapped[str] = mapped_column(Text)
    #: ``status.host_load`` (quiet, contended); None where the report does not say.
    host_load: Mapped[str | None] = mapped_column(String, nullable=True)


class TrialRow(Base):
    """One measured trial (a cell of timings.csv)."""

    __tablename__ = "trials"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    record_seq: Mapped[int] = mapped_column(ForeignKey("records.seq"), index=True)
    acquisition: Mapped[str] = mapped_column(String)
    format: Mapped[str] = mapped_column(String)
    cache_state: Mapped[str] = mapped_column(String)
    trial_index: Mapped[int] = mapped_column(Integer)
    label: Mapped[str] = mapped_column(String)
    kept: Mapped[bool] = mapped_column(Boolean)
    seconds: Mapped[float] = mapped_column(Float)
    read_bytes: Mapped[int] = mapped_column(ByteCount)
    file_bytes: Mapped[int] = mapped_column(ByteCount)
    residency_before: Mapped[float] = mapped_column(Float)


class SummaryRow(Base):
    """Per-cell statistics of one record, as the report states them."""

    __tablename__ = "summaries"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    record_seq: Mapped[int] = mapped_column(ForeignKey("records.seq"), index=True)
    acquisition: Mapped[str] = mapped_column(String)
    format: Mapped[str] = mapped_column(String)
    cache_state: Mapped[str] = mapped_column(String)
    n: Mapped[int] = mapped_column(Integer)
    n_kept: Mapped[int] = mapped_column(Integer)
    first: Mapped[float | None] = mapped_column(Float, nullable=True)
    median: Mapped[float | None] = mapped_column(Float, nullable=True)
    p95: Mapped[float | None] = mapped_column(Float, nullable=True)
    min: Mapped[float | None] = mapped_column(Float, nullable=True)
    max: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: The cell's verdict against the record's explicit baseline; None without one.
    verdict: Mapped[str | None] = mapped_column(String, nullable=True)


class IndexUnreadable(HistoryError):
    """The index file is damaged (not a SQLite database, or corrupt): rebuild it."""


def index_write_error(path: Path, step: str, exc: DatabaseError) -> HistoryError:
    """A one-line error for a failed index operation (a full disk, a locked file)."""
    if is_damage(exc):
        return IndexUnreadable(f"{path}: {damaged_index_message(str(exc.orig))}")
    return HistoryError(f"{path}: {exc.orig} while {step}")


def damaged_index_message(detail: str) -> str:
    """What verify reports and registration refuses with (after the path) on a damaged index."""
    return f"the index is damaged ({detail}); run `harness history rebuild`"


def is_damage(exc: DatabaseError) -> bool:
    """True when SQLite says the file is corrupt or not a database (not a full disk)."""
    text = str(exc.orig).lower()
    return "malformed" in text or "not a database" in text or "corrupt" in text


def _read_only_uri(path: Path) -> str:
    """SQLite's URI to read ``path`` writing nothing (:func:`open_index_readonly`)."""
    wal = path.with_name(path.name + "-wal")
    return f"{path.absolute().as_uri()}?{'mode=ro' if wal.exists() else 'immutable=1'}"


def check_integrity(path: Path) -> list[str]:
    """SQLite's own ``PRAGMA integrity_check`` of the index file, read-only.

    Returns what it found wrong (nothing when the file is sound); an unopenable file
    is one finding.
    """
    try:
        connection = sqlite3.connect(_read_only_uri(path), uri=True)
    except sqlite3.Error as exc:
        return [str(exc)]
    try:
        rows = [row[0] for row in connection.execute("PRAGMA integrity_check")]
    except sqlite3.DatabaseError as exc:
        return [str(exc)]
    finally:
        connection.close()
    return [] if rows == ["ok"] else rows


#: Suffix of the stamp naming the index state a registration last left (and had checked).
CHECKED_SUFFIX = ".checked"


def _checked_stamp_path(path: Path) -> Path:
    return path.with_name(path.name + CHECKED_SUFFIX)


def index_identity(path: Path) -> str:
    """Inode, size and mtime of the index file and its WAL: any other write changes it."""
    parts = []
    for candidate in (path, Path(f"{path}-wal")):
        try:
            info = candidate.stat()
        except FileNotFoundError:
            parts.append("-")
            continue
        parts.append(f"{info.st_ino}:{info.st_size}:{info.st_mtime_ns}")
    return " ".join(parts)


def mark_index_checked(path: Path) -> None:
    """Record the index state this process leaves (after its own writes, lock held)."""
    replace_file(_checked_stamp_path(path), index_identity(path).encode("ascii"))


def quick_check_records(engine: Engine, path: Path) -> None:
    """Refuse a damaged ``records`` table before registering into it (IndexUnreadable).

    ``PRAGMA quick_check(records)`` covers the records table and its UNIQUE index, on
    which one row per record rests (30-40 ms at 2,000 records on the loaded 2-core
    development VM); the whole file, trials included, is ``verify``'s
    ``integrity_check``. It is skipped when the index is exactly as the last
    registration left it (:func:`mark_index_checked`): nothing else wrote it since.
    """
    stamp = _checked_stamp_path(path)
    try:
        if stamp.read_text(encoding="ascii") == index_identity(path):
            return
    except (OSError, UnicodeDecodeError):
        pass
    try:
        with engine.connect() as connection:
            rows = [row[0] for row in connection.exec_driver_sql("PRAGMA quick_check(records)")]
    except DatabaseError as exc:
        raise IndexUnreadable(f"{path}: {damaged_index_message(str(exc.orig))}") from exc
    if rows != ["ok"]:
        raise IndexUnreadable(f"{path}: {damaged_index_message('; '.join(rows[:3]))}")


def open_index_readonly(path: Path) -> Engine:
    """An engine that cannot write and writes no file: for readers (verify, list, show,
    compare, changes, render elsewhere), which never modify anything, on a history that
    may be read-only.

    No schema is created or migrated; the caller checks what is there. The caller holds
    the history's lock shared (no writer meanwhile), so an index without a ``-wal`` file
    is opened ``immutable``: SQLite then creates no ``-wal`` or ``-shm`` file and takes no
    lock, which a read-only folder or mount could not hold. With a ``-wal`` file (a
    writer's engine still open elsewhere, or one killed) it is opened ``mode=ro``, so the
    log's pages are read too.
    """
    if not path.is_file():
        raise HistoryError(f"{path}: no index; run `harness history rebuild`")
    uri = _read_only_uri(path)
    engine = create_engine(
        "sqlite://", creator=lambda: sqlite3.connect(uri, uri=True, check_same_thread=False)
    )

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA busy_timeout=60000")
        cursor.execute("PRAGMA query_only=ON")
        cursor.close()

    return engine


def open_index_for_reading(path: Path) -> Engine:
    """The index for a reader (list, show, compare, changes, render elsewhere): read-only
    (:func:`open_index_readonly`) when it is at this harness's schema; an older one is
    migrated first (:func:`open_index`) where the folder can be written, and refused with
    what to do where it cannot."""
    engine = open_index_readonly(path)
    try:
        with engine.connect() as connection:
            version = read_meta(connection, META_SCHEMA_VERSION)
    except DatabaseError as exc:
        engine.dispose()
        if is_damage(exc):
            raise IndexUnreadable(f"{path}: {damaged_index_message(str(exc.orig))}") from exc
        raise HistoryError(f"{path}: {exc.orig} while opening the index to read") from exc
    if version == str(INDEX_SCHEMA_VERSION):
        return engine
    engine.dispose()
    if os.access(path.parent, os.W_OK) and not _read_only_mount(path.parent):
        return open_index(path, create=False)
    raise HistoryError(
        f"{path}: index schema version {version} is not this harness's "
        f"({INDEX_SCHEMA_VERSION}) and the history is read-only; run "
        "`harness history rebuild` on a writable copy"
    )


def _read_only_mount(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


def missing_tables(connection: Connection) -> list[str]:
    """Tables of this schema the index lacks (dropped by hand, or lost to damage)."""
    present = {
        row[0]
        for row in connection.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    return sorted(set(Base.metadata.tables) - present)


class IndexNeedsRebuild(HistoryError):
    """The index is older than this harness and has no migration step: rebuild it."""


def make_engine(path: Path) -> Engine:
    """An engine on the index file with WAL, NORMAL sync and a busy timeout."""
    engine = create_engine(f"sqlite:///{path}", future=True)

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=60000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    return engine


#: Engines kept open per process and index file, so registrations reuse connections and
#: compiled statements; keyed by pid so a forked child never uses its parent's pool.
_ENGINES: dict[tuple[int, str], tuple[Engine, tuple[int, int]]] = {}


def _file_identity(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return info.st_dev, info.st_ino


def forget_index(path: Path) -> None:
    """Close this process's cached engine on ``path`` (after the file was replaced)."""
    cached = _ENGINES.pop((os.getpid(), str(path)), None)
    if cached is not None:
        cached[0].dispose()


def open_index(path: Path, *, create: bool = True) -> Engine:
    """Open (and create or migrate) the index at ``path``; the engine is cached per process.

    A cached engine is reused only while the file is the same one (device and inode):
    after a rebuild replaced it, a fresh engine is opened, so no process writes into
    a replaced index.

    Raises
    ------
    HistoryError
        When the index was written by a newer harness, or is absent and ``create`` is False.
    IndexNeedsRebuild
        When it is older and no migration step exists.
    """
    key = (os.getpid(), str(path))
    identity = _file_identity(path)
    cached = _ENGINES.get(key)
    if cached is not None and identity is not None and cached[1] == identity:
        engine = cached[0]
        with engine.connect() as connection:
            version = read_meta(connection, META_SCHEMA_VERSION)
        if version is not None and int(version) == INDEX_SCHEMA_VERSION:
            return engine
    forget_index(path)
    if not create and identity is None:
        raise HistoryError(f"{path}: no index; run `harness history rebuild`")
    engine = make_engine(path)
    try:
        _prepare_schema(engine, path)
    except DatabaseError as exc:
        engine.dispose()
        if is_damage(exc):
            raise IndexUnreadable(f"{path}: {damaged_index_message(str(exc.orig))}") from exc
        raise index_write_error(path, "opening the index", exc) from exc
    except BaseException:
        engine.dispose()
        raise
    _ENGINES[key] = (engine, _file_identity(path))
    return engine


def _prepare_schema(engine: Engine, path: Path) -> None:
    with engine.begin() as connection:
        prepare_index_schema(connection, str(path))


def prepare_index_schema(connection: Connection, where: str) -> None:
    """Create the index tables (empty database) or migrate them to this harness's schema.

    A current index costs one query. An empty database gets the models' tables and is
    stamped with the head revision (as the Alembic documentation advises for a new
    database; ``tests/test_history_migrations.py`` proves the migrations build the same
    schema). An index of version 2 written before Alembic is stamped ``index_v2`` and
    upgraded in place; an older one raises :class:`IndexNeedsRebuild`.
    """
    revision = index_revision(connection)
    if revision == INDEX_HEAD_REVISION:
        version = read_meta(connection, META_SCHEMA_VERSION)
        if version == str(INDEX_SCHEMA_VERSION):
            return
    tables = set(inspect(connection).get_table_names())
    version = read_meta(connection, META_SCHEMA_VERSION) if "index_meta" in tables else None
    if version is not None and int(version) > INDEX_SCHEMA_VERSION:
        raise HistoryError(
            f"{where}: index schema version {version} is newer than this harness "
            f"supports ({INDEX_SCHEMA_VERSION}); upgrade quantem-harness"
        )
    if revision is None and not tables & set(Base.metadata.tables):
        Base.metadata.create_all(connection)
        write_meta(connection, META_SCHEMA_VERSION, str(INDEX_SCHEMA_VERSION))
        _write_version(connection, INDEX_HEAD_REVISION)
        return
    pre_alembic = revision is None and version == str(OLDEST_MIGRATED_VERSION)
    # anything else is older than the first migration, or its two version marks disagree
    # (an edited index): derived data, so rebuilt rather than guessed at
    if not pre_alembic and (revision is None or revision == INDEX_HEAD_REVISION):
        raise IndexNeedsRebuild(
            f"{where}: index schema version {version} (revision {revision or 'none'}) has "
            f"no migration to {INDEX_SCHEMA_VERSION}; it is rebuilt from the records"
        )
    if pre_alembic:
        stamp_index(connection, PRE_ALEMBIC_REVISION)
    upgrade_index(connection)


def _write_version(connection: Connection, revision: str) -> None:
    """What ``alembic stamp`` writes, without loading Alembic (a new index, every history)."""
    table = Table(
        VERSION_TABLE,
        MetaData(),
        Column("version_num", String(32), nullable=False),
        PrimaryKeyConstraint("version_num", name=f"{VERSION_TABLE}_pkc"),
    )
    table.create(connection)
    connection.execute(insert(table).values(version_num=revision))


def read_meta(connection: Connection, key: str) -> str | None:
    return connection.execute(select(IndexMetaRow.value).where(IndexMetaRow.key == key)).scalar()


def write_meta(connection: Connection, key: str, value: str) -> None:
    """Set ``key`` to ``value`` (an upsert, on SQLite and PostgreSQL alike)."""
    upsert = postgresql_insert if connection.dialect.name == "postgresql" else sqlite_insert
    statement = upsert(IndexMetaRow).values(key=key, value=value)
    connection.execute(
        statement.on_conflict_do_update(index_elements=["key"], set_={"value": value})
    )


def read_meta_json(connection: Connection, key: str) -> Any:
    value = read_meta(connection, key)
    return None if value is None else json.loads(value)


def insert_entry(connection: Connection, entry: Any) -> int:
    """Insert one :class:`~harness.history.entries.IndexEntry`; return its ``seq``."""
    seq = connection.execute(
        insert(RecordRow).values(**entry.record).returning(RecordRow.seq)
    ).scalar_one()
    if entry.trials:
        connection.execute(
            insert(TrialRow), [dict(trial, record_seq=seq) for trial in entry.trials]
        )
    if entry.summaries:
        connection.execute(
            insert(SummaryRow), [dict(summary, record_seq=seq) for summary in entry.summaries]
        )
    return seq


def fill_markers(connection: Connection, records: Iterable[tuple[int, str, bytes | None]]) -> int:
    """Set ``records.host_load`` and ``summaries.verdict`` of index rows written before
    index schema 4 from their records' bytes, given as (seq, path, bytes or None: not
    found); how many records gave them. Idempotent (the values registration derives)."""
    host_loads = []
    verdicts = []
    filled = 0
    for seq, path, data in records:  # streamed: only the few values are kept
        markers = None if data is None else markers_of(data, path)
        if markers is None:
            continue
        filled += 1
        host_load, cells = markers
        if host_load is not None:
            host_loads.append({"row_seq": seq, "load": host_load})
        # bound names unlike the columns' (SQLAlchemy keeps those for SET)
        verdicts += [
            {"row_seq": seq, "a": cell[0], "f": cell[1], "c": cell[2], "cell_verdict": verdict}
            for cell, verdict in cells.items()
        ]
    if host_loads:
        connection.execute(
            update(RecordRow)
            .where(RecordRow.seq == bindparam("row_seq"))
            .values(host_load=bindparam("load")),
            host_loads,
        )
    if verdicts:
        connection.execute(
            update(SummaryRow)
            .where(
                SummaryRow.record_seq == bindparam("row_seq"),
                SummaryRow.acquisition == bindparam("a"),
                SummaryRow.format == bindparam("f"),
                SummaryRow.cache_state == bindparam("c"),
            )
            .values(verdict=bindparam("cell_verdict")),
            verdicts,
        )
    return filled


def is_calibration_entry(index_entry: str) -> bool:
    """Whether an index entry (its canonical JSON) is one run of a calibration."""
    return (json.loads(index_entry).get("purpose") or {}).get("kind") == "calibration"


def newest_candidate(connection: Connection) -> str | None:
    """The SHA-256 of the newest record that is not a calibration run (compare's default
    CANDIDATE), from a folder's or a server's index."""
    rows = connection.execute(
        select(RecordRow.sha256, RecordRow.index_entry).order_by(RecordRow.seq.desc())
    )
    for sha256, index_entry in rows:
        if not is_calibration_entry(index_entry):
            return sha256
    return None
