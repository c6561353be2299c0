"""The index of a history on a PostgreSQL server: what it lacks, its streamed check, its rebuild.

The folder keeps its index in SQLite beside the records (``verify.py``, ``rebuild.py``);
a server keeps the same tables beside its evidence, and checks and rebuilds them with
SQL run on the server, streamed so memory stays flat at any size.
:class:`~harness.history.server_history.ServerHistory` answers the contract's
``unindexed``, ``verify`` and ``rebuild`` with these; ``init-db`` indexes what the index
lacks (:func:`index_unindexed`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from harness.errors import ReportValidationError
from harness.history.index_db import RecordRow, SummaryRow, TrialRow, insert_entry
from harness.history.layout import record_relpath
from harness.history.postgres import (
    PostgresStore,
    index_entry_of,
    journal_table,
    records_table,
    server_name,
    server_step,
)
from harness.history.records import sha256_bytes
from harness.report import parse_report


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
            parse_report(data, name=f"{server_name(store.engine.url)}/{record_relpath(sha256)}")
        except ReportValidationError as exc:
            return (
                f"record {sha256}: stored, but not a valid report ({exc}): let in by an "
                "older server or an owner's edit; list, compare and render skip it"
            )
    return f"record {sha256}: not in the index (run `harness history init-db URL` as its owner)"
