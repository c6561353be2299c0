"""The derived SQLite index of a history, through SQLAlchemy 2.x ORM models.

One :class:`RecordRow` per record (provenance, conditions, statuses, comparison
key, baseline), one :class:`TrialRow` per measured trial and one
:class:`SummaryRow` per cell, for queries and rendering. The index carries its own
schema version in :class:`IndexMetaRow`; an older index is migrated by the steps
in :data:`INDEX_MIGRATIONS`, and when no step exists it is rebuilt from the
records, which is always possible because the index is derived data. SQLite runs
in WAL mode with ``synchronous=NORMAL``: a crash can lose the last index
transaction but never corrupts the file, and ``harness history verify`` /
``rebuild`` detect and repair a lagging index.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Boolean,
    Connection,
    Engine,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    create_engine,
    event,
    select,
)
from sqlalchemy.exc import DatabaseError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from harness.errors import HistoryError

#: Version of the index's tables; bump it and add a step to INDEX_MIGRATIONS on change.
INDEX_SCHEMA_VERSION = 1
META_SCHEMA_VERSION = "schema_version"


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
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    sha256: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    path: Mapped[str] = mapped_column(String)
    size_bytes: Mapped[int] = mapped_column(Integer)
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
    comparison_key: Mapped[str] = mapped_column(String, index=True)
    comparison_fields: Mapped[str] = mapped_column(Text)
    #: The record's line in index.json, serialised once at registration.
    index_entry: Mapped[str] = mapped_column(Text)


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
    read_bytes: Mapped[int] = mapped_column(Integer)
    file_bytes: Mapped[int] = mapped_column(Integer)
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


#: ``INDEX_MIGRATIONS[v](connection)`` upgrades an index from version v to v + 1.
INDEX_MIGRATIONS: dict[int, Callable[[Connection], None]] = {}


class IndexUnreadable(HistoryError):
    """The index file is damaged (not a SQLite database, or corrupt): rebuild it."""


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
        raise IndexUnreadable(
            f"{path}: the index is unreadable ({exc.orig}); run `harness history rebuild`"
        ) from exc
    except BaseException:
        engine.dispose()
        raise
    _ENGINES[key] = (engine, _file_identity(path))
    return engine


def _prepare_schema(engine: Engine, path: Path) -> None:
    with engine.begin() as connection:
        Base.metadata.create_all(connection)
        version = read_meta(connection, META_SCHEMA_VERSION)
        if version is None:
            write_meta(connection, META_SCHEMA_VERSION, str(INDEX_SCHEMA_VERSION))
            return
        current = int(version)
        if current > INDEX_SCHEMA_VERSION:
            raise HistoryError(
                f"{path}: index schema version {current} is newer than this harness "
                f"supports ({INDEX_SCHEMA_VERSION}); upgrade quantem-harness"
            )
        while current < INDEX_SCHEMA_VERSION:
            step = INDEX_MIGRATIONS.get(current)
            if step is None:
                raise IndexNeedsRebuild(
                    f"{path}: index schema version {current} has no migration to "
                    f"{INDEX_SCHEMA_VERSION}; it is rebuilt from the records"
                )
            step(connection)
            current += 1
            write_meta(connection, META_SCHEMA_VERSION, str(current))


def read_meta(connection: Connection, key: str) -> str | None:
    return connection.execute(select(IndexMetaRow.value).where(IndexMetaRow.key == key)).scalar()


def write_meta(connection: Connection, key: str, value: str) -> None:
    from sqlalchemy.dialects.sqlite import insert

    statement = insert(IndexMetaRow).values(key=key, value=value)
    connection.execute(
        statement.on_conflict_do_update(index_elements=["key"], set_={"value": value})
    )


def read_meta_json(connection: Connection, key: str) -> Any:
    value = read_meta(connection, key)
    return None if value is None else json.loads(value)


def insert_entry(connection: Connection, entry: Any) -> int:
    """Insert one :class:`~harness.history.entries.IndexEntry`; return its ``seq``."""
    from sqlalchemy import insert

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
