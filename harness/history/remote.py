"""A history on a database server: open it by URL, set it up, copy records to and from a folder.

What only a server needs: :func:`open_url_store` turns a
``postgresql+psycopg://USER@HOST/DB`` URL into a
:class:`~harness.history.postgres.PostgresStore` (refusing one that is not set up, or at
another schema), :func:`init_database` sets one up, :func:`push` and :func:`pull` copy
records between a folder and a server, and the index's server-side check and rebuild
(streamed SQL). Every server failure becomes a :class:`~harness.errors.HistoryError`
naming the server (password hidden) and the step.

The commands never call this module for what a folder does too: they use the
:class:`~harness.history.backend.HistoryBackend` contract, which
:class:`~harness.history.server_history.ServerHistory` implements on top of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import HistoryError, ReportValidationError, UsageError
from harness.history.index_db import RecordRow, SummaryRow, TrialRow, insert_entry
from harness.history.layout import HistoryLayout, record_relpath, sha256_of_record_name
from harness.history.migrate import (
    EVIDENCE_HEAD_REVISION,
    EVIDENCE_REVISIONS,
    EVIDENCE_VERSION_TABLE,
    INDEX_HEAD_REVISION,
    VERSION_TABLE,
    evidence_revision,
    index_revision,
)
from harness.history.postgres import (
    SCHEMA_LOCK,
    PostgresStore,
    calibrations_table,
    index_entry_of,
    install_schema,
    journal_table,
    records_table,
    server_step,
)
from harness.history.records import sha256_bytes
from harness.report import parse_report

#: The role :func:`init_database` creates: SELECT and INSERT on the evidence, nothing more.
WRITER_ROLE = "harness_writer"

_SCHEMES = ("postgresql+psycopg", "postgresql")


def server_name(url) -> str:
    """The URL as shown to users: password hidden."""
    return url.render_as_string(hide_password=True)


def _engine_for(url_text: str):
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(url_text)
    except ArgumentError as exc:
        raise UsageError(f"--history-url {url_text!r} is not a database URL: {exc}") from None
    if url.drivername not in _SCHEMES:
        raise UsageError(
            f"--history-url {server_name(url)}: only PostgreSQL is supported "
            "(postgresql+psycopg://USER@HOST/DB)"
        )
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    try:
        return create_engine(url, pool_pre_ping=True)
    except ImportError as exc:
        raise HistoryError(
            f"{server_name(url)}: {exc} (install psycopg 3: pip install 'psycopg[binary]')"
        ) from None


def open_url_store(url_text: str) -> PostgresStore:
    """The evidence store at ``url_text``; HistoryError when unreachable or not set up."""
    from sqlalchemy import inspect

    engine = _engine_for(url_text)
    with server_step(engine, "connecting"), engine.connect() as connection:
        tables = set(inspect(connection).get_table_names())
        revision = index_revision(connection)
        evidence = evidence_revision(connection)
    missing = {records_table.name, journal_table.name} - tables
    if missing:
        engine.dispose()
        raise HistoryError(
            f"{server_name(engine.url)}: not an evidence store (no table "
            f"{', '.join(sorted(missing))}); run `harness history init-db URL` as its owner"
        )
    if evidence != EVIDENCE_HEAD_REVISION:
        engine.dispose()
        raise HistoryError(_evidence_revision_refusal(server_name(engine.url), evidence))
    if revision != INDEX_HEAD_REVISION:
        engine.dispose()
        raise HistoryError(
            f"{server_name(engine.url)}: its index is at schema revision {revision or 'none'}, "
            f"this harness needs {INDEX_HEAD_REVISION}; run `harness history init-db URL` "
            "as its owner (it migrates the index and indexes every record)"
        )
    return PostgresStore(engine)


def _evidence_revision_refusal(where: str, revision: str | None) -> str:
    """Why a client refuses a server whose evidence schema is not at this harness's head."""
    if revision is not None and revision not in EVIDENCE_REVISIONS:
        return (
            f"{where}: its evidence schema is at revision {revision}, which this harness does "
            f"not know (it needs {EVIDENCE_HEAD_REVISION}; set up by a newer harness?); "
            "upgrade quantem-harness (`harness history init-db URL` does not change a newer "
            "schema)"
        )
    state = revision or "none (set up before the evidence migrations)"
    return (
        f"{where}: its evidence schema is at revision {state}, this harness needs "
        f"{EVIDENCE_HEAD_REVISION}; run `harness history init-db URL` as its owner (it "
        "migrates the schema, or recognises and stamps it; no record is changed)"
    )


def init_database(url_text: str, *, grant_to: list[str] = ()) -> list[str]:
    """Create or migrate the evidence schema and the index (each by its Alembic chain),
    create the writer role and set its privileges (idempotent); what was done, as lines.

    The role is created here, not by a migration: roles belong to the server (the
    cluster), shared by every database on it and outliving any one of them, so they are
    no part of one database's schema. Its privileges on the tables are set on every run
    (REVOKE ALL, then GRANT SELECT, INSERT), so one given by hand is taken back.
    """
    from sqlalchemy import text

    engine = _engine_for(url_text)
    done = []
    try:
        with server_step(engine, "creating or migrating the tables and triggers"):
            done += install_schema(engine)
        done.append(
            f"evidence schema at {EVIDENCE_HEAD_REVISION} (evidence_records, evidence_journal, "
            "evidence_calibrations: insert-only, keys checked by the server); "
            f"index tables at {INDEX_HEAD_REVISION}"
        )
        with server_step(engine, "indexing the records the index lacks"):
            indexed, skipped = index_unindexed(engine)
        if indexed:
            done.append(f"indexed {indexed} records the index lacked")
        done += [
            f"warning: {line} (`harness history verify --history-url URL` names it)"
            for line in skipped
        ]
        with server_step(engine, f"creating role {WRITER_ROLE}"), engine.begin() as connection:
            # two init-db runs at once: concurrent GRANTs on one table can fail in PostgreSQL
            connection.execute(text(f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK})"))
            exists = connection.execute(
                text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": WRITER_ROLE}
            ).first()
            if exists is None:
                connection.execute(text(f"CREATE ROLE {WRITER_ROLE} NOLOGIN"))
            for table in (records_table.name, journal_table.name, calibrations_table.name):
                connection.execute(text(f"REVOKE ALL ON {table} FROM {WRITER_ROLE}"))
                connection.execute(text(f"GRANT SELECT, INSERT ON {table} TO {WRITER_ROLE}"))
            connection.execute(
                text(f"GRANT USAGE ON SEQUENCE {journal_table.name}_seq_seq TO {WRITER_ROLE}")
            )
            # the index is derived: the writer adds rows, never changes them; reads the rest
            for table in (RecordRow, TrialRow, SummaryRow):
                name = table.__tablename__
                connection.execute(text(f"REVOKE ALL ON {name} FROM {WRITER_ROLE}"))
                connection.execute(text(f"GRANT SELECT, INSERT ON {name} TO {WRITER_ROLE}"))
                key = "seq" if table is RecordRow else "id"
                connection.execute(
                    text(f"GRANT USAGE ON SEQUENCE {name}_{key}_seq TO {WRITER_ROLE}")
                )
            for name in ("index_meta", VERSION_TABLE, EVIDENCE_VERSION_TABLE):
                connection.execute(text(f"REVOKE ALL ON {name} FROM {WRITER_ROLE}"))
                connection.execute(text(f"GRANT SELECT ON {name} TO {WRITER_ROLE}"))
            for user in grant_to:
                quoted = connection.dialect.identifier_preparer.quote(user)
                connection.execute(text(f"GRANT {WRITER_ROLE} TO {quoted}"))
        done.append(f"role {WRITER_ROLE}: SELECT and INSERT only (index: the same)")
        done += [f"granted {WRITER_ROLE} to {user}" for user in grant_to]
    finally:
        engine.dispose()
    return done


@dataclass(frozen=True)
class CopyResult:
    copied: int
    present: int
    head_from: str
    head_to: str
    calibrations_copied: int = 0
    calibrations_present: int = 0


def _checked(sha256: str, data: bytes, where: str, what: str = "record") -> bytes:
    if sha256_bytes(data) != sha256:
        raise HistoryError(f"{where}: {what} {sha256} no longer matches its bytes; nothing copied")
    return data


def _folder_calibrations(calibrations_dir: Path | None) -> list[tuple[str, bytes]]:
    """(sha256, bytes) of every calibration file of a folder, hash-checked, in SHA-256
    order; HistoryError naming the file at the first one that is not sound."""
    if calibrations_dir is None:
        return []
    layout = HistoryLayout.at(calibrations_dir)
    found = []
    for path in layout.iter_record_files():
        claimed = sha256_of_record_name(path)
        if claimed is None or path.is_symlink() or not path.is_file():
            raise HistoryError(f"{path}: not a calibration record; nothing copied")
        found.append((claimed, _checked(claimed, path.read_bytes(), str(path), "calibration")))
    return sorted(found)


def _server_calibrations(store: PostgresStore) -> list[tuple[str, bytes]]:
    """(sha256, bytes) of every calibration on the server, hash-checked, in SHA-256 order
    (none on a database set up before them); HistoryError at the first tampered one."""

    where = server_name(store.engine.url)
    return [
        (sha, _checked(sha, data, where, "calibration")) for sha, data in calibration_rows(store)
    ]


def calibration_rows(store: PostgresStore) -> list[tuple[str, bytes]]:
    """(key, bytes) of every calibration row as stored, unchecked, in SHA-256 order; none on
    a database without the table (set up before calibrations were kept on servers)."""
    from sqlalchemy import inspect, select

    with (
        server_step(store.engine, "reading the calibrations"),
        store.engine.connect() as connection,
    ):
        if not inspect(connection).has_table(calibrations_table.name):
            return []
        rows = connection.execute(
            select(calibrations_table.c.sha256, calibrations_table.c.data).order_by(
                calibrations_table.c.sha256
            )
        ).all()
    return [(sha, bytes(data)) for sha, data in rows]


def push(
    folder: str | Path, store: PostgresStore, *, calibrations_dir: Path | None = None
) -> CopyResult:
    """Copy the folder's records to the server in journal order (source, time kept), then
    the calibrations under ``calibrations_dir`` (the command passes the folder's), in one
    transaction. Every record and calibration is hash-checked before anything is copied."""
    from sqlalchemy.dialects.postgresql import insert as pg_insert

    from harness.history.evidence_store import FolderStore
    from harness.history.journal import read_journal
    from harness.history.lock import locked_history, require_history

    source = FolderStore(folder)
    with locked_history(folder) as layout:
        require_history(layout)
        journal = read_journal(layout)
        if journal.torn_lines or journal.breaks:
            raise HistoryError(f"{layout.journal}: the journal is damaged; run history verify")
        entries = list(journal.entries)
        head_from = journal.head
        calibrations = _folder_calibrations(calibrations_dir)
    if calibrations:
        check_calibrations_table(store)  # before the first record is copied
    seen = set()
    copied = present = 0
    for entry in entries:
        sha = entry["sha256"]
        if sha in seen:
            continue
        seen.add(sha)
        data = _checked(sha, source.read(sha), str(folder))
        result = store.register(
            data, source=entry.get("source", sha), registered_utc=entry["registered_utc"]
        )
        copied += result.created
        present += not result.created
    stored = 0
    if calibrations:
        with (
            server_step(store.engine, "copying the calibrations"),
            store.engine.begin() as connection,
        ):
            for sha, data in calibrations:
                stored += (
                    connection.execute(
                        pg_insert(calibrations_table)
                        .values(sha256=sha, data=data)
                        .on_conflict_do_nothing(index_elements=["sha256"])
                        .returning(calibrations_table.c.sha256)
                    ).first()
                    is not None
                )
    return CopyResult(copied, present, head_from, store.head(), stored, len(calibrations) - stored)


def pull(
    store: PostgresStore,
    folder: str | Path,
    *,
    render=None,
    store_calibration: Callable[[bytes], bool] | None = None,
) -> CopyResult:
    """Copy the server's records into the folder in journal order, validated and indexed
    (``render``: the registration renderer the command passes, as for ``register``), then
    its calibrations through ``store_calibration`` (the command passes the folder's
    validating write; it says whether the calibration was new). Every record and
    calibration is hash-checked before anything is copied."""
    import json

    from harness.history.store import register_reports

    lines = store.journal_lines()
    shas, labels = [], []
    for line in lines:
        entry = json.loads(line)
        if entry["sha256"] not in shas:
            shas.append(entry["sha256"])
            labels.append(entry.get("source", entry["sha256"]))
    where = server_name(store.engine.url)
    data = [_checked(sha, store.read(sha), where) for sha in shas]
    calibrations = _server_calibrations(store) if store_calibration is not None else []
    results = register_reports(folder, data, names=labels, render=render) if data else []
    copied = sum(r.created for r in results)
    head_to = results[-1].journal_head if results else ""
    stored = sum(bool(store_calibration(blob)) for _, blob in calibrations)
    return CopyResult(
        copied, len(results) - copied, store.head(), head_to, stored, len(calibrations) - stored
    )


def _indexed(sha256):
    """``EXISTS`` an index row for the record ``sha256``: an anti-join when negated
    (``NOT IN`` a subquery is not: past ``work_mem`` PostgreSQL rescans the subquery for
    every record, which took minutes at 100,000 records)."""
    from sqlalchemy import exists

    return exists().where(RecordRow.sha256 == sha256)


def unindexed_records(store: PostgresStore) -> list[str]:
    """The records the server holds that its index lacks (not a valid report, or an
    index that lags), in SHA-256 order: what a render of the server leaves out."""
    from sqlalchemy import select

    with (
        server_step(store.engine, "looking for records the index lacks"),
        store.engine.connect() as connection,
    ):
        return list(
            connection.execute(
                select(records_table.c.sha256)
                .where(~_indexed(records_table.c.sha256))
                .order_by(records_table.c.sha256)
            ).scalars()
        )


def index_unindexed(engine) -> tuple[int, list[str]]:
    """Index every stored record the index lacks, in journal order (a database set up
    before the index was on the server, or a record stored by hand): how many, and the
    records left out because their bytes are not a valid report (let in by an older
    server or an owner's edit: ``verify`` names them; they never stop the others)."""
    from sqlalchemy import func, select

    from harness.history.postgres import _JOURNAL_LOCK
    from harness.history.store import prepare_report

    count = 0
    skipped: list[str] = []
    with engine.begin() as connection:
        connection.execute(select(func.pg_advisory_xact_lock(_JOURNAL_LOCK)))
        order = (
            select(journal_table.c.sha256, func.min(journal_table.c.seq).label("first"))
            .group_by(journal_table.c.sha256)
            .subquery()
        )
        rows = connection.execute(
            select(records_table.c.sha256, records_table.c.data)
            .join(order, order.c.sha256 == records_table.c.sha256, isouter=True)
            .where(~_indexed(records_table.c.sha256))
            .order_by(order.c.first, records_table.c.sha256)
        ).all()
        for sha256, data in rows:
            try:
                entry = index_entry_of(prepare_report(bytes(data), name=sha256))
            except ReportValidationError as exc:
                skipped.append(f"record {sha256}: not a valid report, not indexed ({exc})")
                continue
            insert_entry(connection, entry)
            count += 1
    return count, skipped


@dataclass(frozen=True)
class ServerRebuild:
    indexed: int
    errors: list[str]  # records that are not sound: tampered
    unregistered: list[str]  # records the journal lacks (stored by hand)
    #: intact records whose bytes are no valid report (an older server let them in, or
    #: an owner's edit): left unindexed; verify names them, they never stop a rebuild
    invalid: list[str] = field(default_factory=list)


def rebuild_server_index(store: PostgresStore) -> ServerRebuild:
    """Rebuild the server's index from its records, in one transaction (``history rebuild
    --history-url``): the folder rebuild's rules. Only journalled records are indexed, in
    (created_utc, sha256) order; a record whose bytes no longer match its key, or one the
    journal lacks, is reported and left unindexed. Registrations wait meanwhile (the
    journal's advisory lock), other readers see the old index until the commit, and a
    failure leaves the old index. Deleting index rows needs the owner: the writer role
    may only add them."""
    from sqlalchemy import delete, func, select

    from harness.history.postgres import _JOURNAL_LOCK
    from harness.history.store import prepare_report

    where = server_name(store.engine.url)
    errors: list[str] = []
    unregistered: list[str] = []
    invalid: list[str] = []
    entries = []
    with (
        server_step(store.engine, "rebuilding the index (run it as the database's owner)"),
        store.engine.begin() as connection,
    ):
        connection.execute(select(func.pg_advisory_xact_lock(_JOURNAL_LOCK)))
        journalled = set(connection.execute(select(journal_table.c.sha256)).scalars())
        # streamed (the statement's option: the connection's would stream the DELETEs too)
        rows = connection.execute(
            select(records_table.c.sha256, records_table.c.data)
            .order_by(records_table.c.sha256)
            .execution_options(yield_per=500)
        )
        for sha256, data in rows:
            data = bytes(data)
            label = f"{where}/{record_relpath(sha256)}"
            if sha256_bytes(data) != sha256:
                errors.append(f"{label}: bytes no longer match the key (tampered); not indexed")
            elif sha256 not in journalled:
                unregistered.append(f"{label}: not in the journal (unregistered); not indexed")
            else:
                try:
                    entries.append(index_entry_of(prepare_report(data, name=label)))
                except ReportValidationError as exc:
                    invalid.append(f"{label}: not a valid report ({exc}); not indexed")
        for model in (SummaryRow, TrialRow, RecordRow):
            connection.execute(delete(model))
        entries.sort(key=lambda e: (e.record["created_utc"], e.record["sha256"]))
        for entry in entries:
            insert_entry(connection, entry)
    return ServerRebuild(len(entries), errors, unregistered, invalid)


def _require_calibrations(store: PostgresStore, connection) -> None:
    from sqlalchemy import inspect

    if not inspect(connection).has_table(calibrations_table.name):
        raise HistoryError(
            f"{server_name(store.engine.url)}: no table {calibrations_table.name} (set up "
            "before calibrations were kept on servers); run `harness history init-db URL` "
            "as its owner"
        )


def check_calibrations_table(store: PostgresStore) -> None:
    """HistoryError naming ``init-db`` when the server cannot hold calibrations."""
    with server_step(store.engine, "looking for the calibrations"), store.engine.connect() as c:
        _require_calibrations(store, c)


def store_calibration(store: PostgresStore, data: bytes) -> tuple[str, bool]:
    """Store a calibration's bytes (the caller has validated them) on the server:
    (its SHA-256, whether it was new); identical bytes are a no-op."""
    from sqlalchemy.dialects.postgresql import insert as pg_insert

    sha256 = sha256_bytes(data)
    with (
        server_step(store.engine, f"storing calibration {sha256}"),
        store.engine.begin() as connection,
    ):
        _require_calibrations(store, connection)
        inserted = connection.execute(
            pg_insert(calibrations_table)
            .values(sha256=sha256, data=data)
            .on_conflict_do_nothing(index_elements=["sha256"])
            .returning(calibrations_table.c.sha256)
        ).first()
    return sha256, inserted is not None


def server_record_label(store: PostgresStore, sha256: str) -> str:
    """Where a server's record is, as ``show`` and comparisons print it."""
    return f"{server_name(store.engine.url)}/{record_relpath(sha256)}"


#: Rows fetched per round trip by the streamed index check's server-side cursors:
#: trials and summaries rows, and records rows (each with its record's bytes).
_CHECK_BATCH = 5_000
_CHECK_RECORD_BATCH = 500


def _iter_groups(cursor) -> Iterator[tuple[int, list[tuple]]]:
    """(record_seq, [value tuples]) from a cursor of (record_seq, values...) rows in
    (record_seq, id) order: one record's rows at a time."""
    seq, group = None, []
    for row in cursor:
        if row[0] != seq:
            if seq is not None:
                yield seq, group
            seq, group = row[0], []
        group.append(row[1:])
    if seq is not None:
        yield seq, group


class _Grouped:
    """One per-record table (trials or summaries) read in record_seq order beside the
    records: :meth:`take` gives a record's rows and notes the seqs skipped on the way
    (rows of no records row)."""

    def __init__(self, cursor) -> None:
        self._groups = _iter_groups(cursor)
        self._next = next(self._groups, None)
        self.orphans: list[int] = []

    def take(self, seq: int) -> list[tuple]:
        while self._next is not None and self._next[0] < seq:
            self.orphans.append(self._next[0])
            self._next = next(self._groups, None)
        if self._next is not None and self._next[0] == seq:
            rows = self._next[1]
            self._next = next(self._groups, None)
            return rows
        return []

    def finish(self) -> list[int]:
        while self._next is not None:
            self.orphans.append(self._next[0])
            self._next = next(self._groups, None)
        return self.orphans


_DONE = object()


def _prefetched(items: Iterator, *, batch: int = 100, depth: int = 16) -> Iterator:
    """The items of ``items``, produced by a background thread in batches: reading the
    server (whose own work runs on another core meanwhile) overlaps the caller's work on
    the items. An exception of the producer is raised here; when the caller stops
    early, the producer stops at its next batch."""
    import queue
    import threading

    handoff: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(value) -> bool:
        while not stop.is_set():
            try:
                handoff.put(value, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        chunk = []
        try:
            for item in items:
                chunk.append(item)
                if len(chunk) >= batch:
                    if not put(chunk):
                        return
                    chunk = []
            if chunk and not put(chunk):
                return
            put(_DONE)
        except BaseException as exc:  # handed to the caller, raised there
            put(exc)

    thread = threading.Thread(target=produce, name="harness-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            chunk = handoff.get()
            if chunk is _DONE:
                return
            if isinstance(chunk, BaseException):
                raise chunk
            yield from chunk
    finally:
        stop.set()
        thread.join()


def check_server_index(store: PostgresStore) -> list[str]:
    """The server's index against its records, in one consistent snapshot (a REPEATABLE
    READ transaction; registrations meanwhile are not half-seen), read-only: every
    stored record indexed once, no row for a record the server does not hold (the
    folder verify's set checks), and each sound record's records, trials and summaries
    rows equal to what its bytes give (the folder verify's content check, with its
    derivation: :func:`harness.history.verify.entry_of_record`).

    Streamed, so memory stays flat at any size: the records rows (each joined with its
    record's bytes), the trials and the summaries are read through three server-side
    cursors in record seq order and merged, one record at a time, by a background
    thread while this one derives and compares the rows; only the problems found are
    kept.
    """
    from psycopg.rows import namedtuple_row
    from sqlalchemy import func, select

    from harness.history.entries import SUMMARY_FIELDS, TRIAL_FIELDS
    from harness.history.verify import entry_of_record, index_row_differences

    problems: list[str] = []
    mismatched: dict[str, list[str]] = {}
    unparsed: list[str] = []
    missing: list[str] = []
    with (
        server_step(store.engine, "checking the index"),
        store.engine.connect().execution_options(isolation_level="REPEATABLE READ") as connection,
        connection.begin(),
    ):
        duplicates = connection.execute(
            select(RecordRow.sha256, func.count())
            .group_by(RecordRow.sha256)
            .having(func.count() > 1)
            .order_by(RecordRow.sha256)
        ).all()
        problems += [f"index row {sha}: {count} rows for one record" for sha, count in duplicates]
        unindexed = list(
            connection.execute(
                select(records_table.c.sha256)
                .where(~_indexed(records_table.c.sha256))
                .order_by(records_table.c.sha256)
            ).scalars()
        )
        # psycopg's named (server-side) cursors, all three open in this transaction
        driver = connection.connection.driver_connection
        cursors = []
        try:
            grouped = []
            for name, table, fields in (
                ("check_trials", TrialRow.__tablename__, TRIAL_FIELDS),
                ("check_summaries", SummaryRow.__tablename__, SUMMARY_FIELDS),
            ):
                cursor = driver.cursor(name=name)
                cursor.itersize = _CHECK_BATCH
                columns = ", ".join(f'"{field}"' for field in fields)
                cursor.execute(f"SELECT record_seq, {columns} FROM {table} ORDER BY record_seq, id")
                cursors.append(cursor)
                grouped.append(_Grouped(cursor))
            trials, summaries = grouped
            rows = driver.cursor(name="check_records", row_factory=namedtuple_row)
            rows.itersize = _CHECK_RECORD_BATCH
            cursors.append(rows)
            rows.execute(
                f"SELECT r.*, e.data AS record_data FROM {RecordRow.__tablename__} r "
                f"LEFT JOIN {records_table.name} e ON e.sha256 = r.sha256 ORDER BY r.seq"
            )
            orphans = []

            def merged() -> Iterator[tuple]:
                for row in rows:
                    yield row, trials.take(row.seq), summaries.take(row.seq)
                orphans.extend((("trial", trials.finish()), ("summary", summaries.finish())))

            # the server's reading in a thread, the rows' derivation here, on two cores
            for row, row_trials, row_summaries in _prefetched(merged()):
                sha256 = row.sha256
                if row.record_data is None:
                    missing.append(sha256)
                    continue
                data = bytes(row.record_data)
                if sha256_bytes(data) != sha256:
                    continue  # tampered: the store's check reports it
                try:
                    entry = entry_of_record(data, sha256=sha256, path=record_relpath(sha256))
                except (ReportValidationError, KeyError, TypeError, ValueError) as exc:
                    unparsed.append(f"record {sha256}: hash matches but it does not parse: {exc}")
                    continue
                differing = index_row_differences(entry, row, row_trials, row_summaries)
                if differing:
                    mismatched.setdefault(sha256, differing)
        finally:
            for cursor in cursors:
                cursor.close()
    for what, seqs in orphans:
        problems += [
            f"index {what} rows of seq {seq}: no records row (added by hand?)"
            for seq in sorted(seqs)
        ]
    problems += unparsed
    problems += [
        f"index row {sha}: differs from its record in {', '.join(differing)} (run "
        "`harness history rebuild --history-url URL` as its owner)"
        for sha, differing in sorted(mismatched.items())
    ]
    problems += [
        f"index row {sha}: no such record on the server (added to the index by hand?)"
        for sha in sorted(set(missing))
    ]
    problems += [_unindexed_problem(store, sha) for sha in unindexed]
    return problems


def _unindexed_problem(store: PostgresStore, sha256: str) -> str:
    """Why a stored record has no index row: no valid report (named, with the reason),
    or an index that lags (init-db indexes it)."""
    data = store.read(sha256)
    if sha256_bytes(data) == sha256:
        try:
            parse_report(data, name=server_record_label(store, sha256))
        except ReportValidationError as exc:
            return (
                f"record {sha256}: stored, but not a valid report ({exc}): let in by an "
                "older server or an owner's edit; list, compare and render skip it"
            )
    return f"record {sha256}: not in the index (run `harness history init-db URL` as its owner)"
