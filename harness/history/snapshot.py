"""A rendered folder's copy of a server's history (``render index --out DIR --history-url``).

The dashboard of a server is rendered from a local copy of what the renderer reads in
a history folder, and the folder keeps that copy, so that the next render fetches only
what was registered since (``docs/postgres.md``, "Rendering a server's dashboard"):

- the records, as ``DIR/records/sha256/ab/<hex>.json`` (the record pages link them);
- the journal, as ``DIR/journal.jsonl`` (its head is shown on the pages);
- the index, as a SQLite index at ``DIR/.harness-render/index.sqlite`` (the same
  models; the renderer's bookkeeping lives there too), whose ``index_meta`` row
  ``render.source`` (:class:`SnapshotSource`) says which server it was taken from and
  how far: the journal's last held line (seq, head, a digest of every held line) and
  the index's last held row (seq, a digest of every held (seq, sha256), the trials'
  and summaries' counts and largest ids).

:func:`take_snapshot` copies everything (a first render, or a fallback);
:func:`update_snapshot` first checks that the server still extends what the folder
holds (the held journal lines and index rows are the server's, byte for byte by
digest, and the new lines chain on from the held head), then appends only the new
lines, records and index rows. When anything does not match it changes nothing and
says why (:class:`Stale`), and the caller takes a whole snapshot instead: never a
dashboard of a state the server does not have.

Both read the server in one REPEATABLE READ transaction (registrations by other hosts
meanwhile are not half-seen) and hash-check every record they copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Protocol

from sqlalchemy import Connection, func, select, text

from harness.errors import HistoryError, UsageError
from harness.fsio import FileWriteError, ensure_dir, replace_file
from harness.history.backend import RenderSource
from harness.history.index_db import (
    IndexMetaRow,
    RecordRow,
    SummaryRow,
    TrialRow,
    forget_index,
    open_index,
    read_meta_json,
    write_meta,
)
from harness.history.journal import GENESIS_HEAD
from harness.history.layout import (
    FANOUT_DIGITS,
    RECORD_SUFFIX,
    HistoryLayout,
    sha256_of_record_name,
)
from harness.history.postgres import (
    PostgresStore,
    journal_table,
    records_table,
    server_name,
    server_step,
)
from harness.history.records import sha256_bytes
from harness.history.server_index import unindexed_records

#: The folder, inside a rendered folder, that holds its copy of the server's index.
SNAPSHOT_DIR = ".harness-render"
SNAPSHOT_NAME = "index.sqlite"
#: The ``index_meta`` key of the snapshot's :class:`SnapshotSource` (JSON).
META_SOURCE = "render.source"
#: Version of :class:`SnapshotSource`; a snapshot of another version is taken again.
SOURCE_VERSION = 1

#: Rows per batch when copying the server's index into the snapshot.
_SNAPSHOT_BATCH = 20_000
#: Records per batch when copying the server's records (18 KB each at 100,000 records).
_RECORDS_BATCH = 500


def snapshot_path(folder: Path) -> Path:
    return folder / SNAPSHOT_DIR / SNAPSHOT_NAME


@dataclass(frozen=True)
class SnapshotSource:
    """What a snapshot holds of its server: the prefix of the journal and of the index
    that a later update must find unchanged on the server."""

    server: str
    journal_seq: int  # the server's seq of the last held journal line (0: none)
    journal_lines: int
    journal_digest: str  # SHA-256 of the held lines, concatenated (DIR/journal.jsonl)
    journal_head: str
    records_seq: int  # the largest held index seq (0: none)
    records_count: int
    records_digest: str  # SHA-256 of "seq:sha256" of every held index row, joined by ","
    trials_count: int
    trials_max_id: int
    summaries_count: int
    summaries_max_id: int
    meta_digest: str  # SHA-256 of the server's index_meta rows
    #: False from the moment new rows are in the snapshot until the render of them is done
    complete: bool = False
    version: int = SOURCE_VERSION


@dataclass(frozen=True)
class Stale:
    """The snapshot cannot be brought up to date; why (for the user)."""

    reason: str


@dataclass(frozen=True)
class SnapshotUpdate:
    """What an update added: the index seqs and the records new to the folder, and the
    folder's record files that were not the server's bytes and were written again."""

    new_seqs: list[int]
    new_shas: set[str]
    repaired: list[Path]
    head: str


# --- the server's side ------------------------------------------------------------------

_JOURNAL_PREFIX = (
    "SELECT count(*), coalesce(max(seq), 0), encode(sha256(coalesce(string_agg(line, "
    "''::bytea ORDER BY seq), ''::bytea)), 'hex') FROM evidence_journal WHERE seq <= :seq"
)
_RECORDS_PREFIX = (
    "SELECT count(*), coalesce(max(seq), 0), encode(sha256(convert_to(coalesce(string_agg("
    "seq::text || ':' || sha256, ',' ORDER BY seq), ''), 'UTF8')), 'hex') "
    "FROM records WHERE seq <= :seq"
)
_ROWS_PREFIX = "SELECT count(*), coalesce(max(id), 0) FROM {table} WHERE record_seq <= :seq"


def _meta_digest(connection: Connection) -> str:
    rows = connection.execute(
        select(IndexMetaRow.key, IndexMetaRow.value).order_by(IndexMetaRow.key)
    ).all()
    return sha256_bytes(json.dumps([list(row) for row in rows]).encode("utf-8"))


def _prefix(
    connection: Connection, server: str, journal_seq: int, records_seq: int
) -> SnapshotSource:
    """The server's journal up to ``journal_seq`` and index up to ``records_seq``, as a
    :class:`SnapshotSource` (the same queries for a whole snapshot and an update)."""
    lines, last_seq, digest = connection.execute(text(_JOURNAL_PREFIX), {"seq": journal_seq}).one()
    head = (
        connection.execute(
            text("SELECT link FROM evidence_journal WHERE seq = :seq"), {"seq": last_seq}
        ).scalar()
        if lines
        else None
    )
    count, seq, records_digest = connection.execute(
        text(_RECORDS_PREFIX), {"seq": records_seq}
    ).one()
    rows = {
        model: connection.execute(
            text(_ROWS_PREFIX.format(table=model.__tablename__)), {"seq": records_seq}
        ).one()
        for model in (TrialRow, SummaryRow)
    }
    return SnapshotSource(
        server=server,
        journal_seq=last_seq,
        journal_lines=lines,
        journal_digest=digest,
        journal_head=head or GENESIS_HEAD,
        records_seq=seq,
        records_count=count,
        records_digest=records_digest,
        trials_count=rows[TrialRow][0],
        trials_max_id=rows[TrialRow][1],
        summaries_count=rows[SummaryRow][0],
        summaries_max_id=rows[SummaryRow][1],
        meta_digest=_meta_digest(connection),
    )


@contextmanager
def _server_snapshot(store: PostgresStore, step: str) -> Iterator[Connection]:
    """A REPEATABLE READ connection to the server, in a transaction, inside its step."""
    with (
        server_step(store.engine, step),
        store.engine.connect().execution_options(isolation_level="REPEATABLE READ") as connection,
        connection.begin(),
    ):
        yield connection


def _tampered(sha256: str, where: str) -> HistoryError:
    return HistoryError(
        f"{where}: record {sha256} no longer matches its bytes (tampered; run `harness "
        "history verify --history-url URL`); nothing rendered"
    )


def _checked(sha256: str, data: bytes, where: str) -> bytes:
    if sha256_bytes(data) != sha256:
        raise _tampered(sha256, where)
    return data


def _write_record(layout: HistoryLayout, sha256: str, data: bytes) -> None:
    """Write a record file atomically (a temporary file renamed over its name): for a
    file that exists with other bytes, or one that an update adds."""
    path = layout.record_path(sha256)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}")
    temp.write_bytes(data)
    os.replace(temp, path)


#: A record file that a whole snapshot writes straight to its name: created, never opened
#: if it exists already (``O_EXCL``).
_NEW_RECORD_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def _write_new_record(path: str, data: bytes) -> bool:
    """Create the record file ``path`` holding ``data``, straight under its name (no
    temporary file, no rename, no ``stat`` before); False, writing nothing, when a file
    of that name exists. Its folder is created when missing.

    Not atomic, and safe only inside :func:`take_snapshot`: it writes record files
    while the snapshot holds no source (removed before the first record; the source
    is written, not complete, after the last), so a render killed part-way through
    a file leaves a folder that the next render does not trust: it takes a whole
    snapshot, which compares every record file there with the server's bytes and
    replaces one that differs (a truncated one) atomically. At 100,000 records this
    saves the temporary file's create, rename and the failed ``stat`` of each record."""
    step = "writing the records to render"
    try:
        try:
            fd = os.open(path, _NEW_RECORD_FLAGS, 0o666)
        except FileNotFoundError:  # its folder, the first time one of its records comes
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, _NEW_RECORD_FLAGS, 0o666)
    except FileExistsError:
        return False
    except OSError as exc:
        raise FileWriteError(path, step, exc) from exc
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)  # not left half-written where this render can help it
        raise FileWriteError(path, step, exc) from exc
    os.close(fd)
    return True


def _server_rows(
    connection: Connection, query, name: str, *, binary: bool = False, batch: int = _SNAPSHOT_BATCH
) -> Iterator[list]:
    """The rows of ``query`` in batches, through a server-side cursor of the driver's
    own in the connection's transaction: plain tuples, without SQLAlchemy's per-row
    work (copying 4,000,000 trial rows through SQLAlchemy rows took 41 s of CPU at
    100,000 records); with ``binary``, bytea columns come as raw bytes, not hex text
    the server must encode and the client decode."""
    compiled = query.compile(dialect=connection.dialect)
    driver = connection.connection.driver_connection
    with driver.cursor(name=name, binary=binary) as cursor:
        cursor.itersize = batch
        cursor.execute(str(compiled), compiled.params)
        while rows := cursor.fetchmany(batch):
            yield rows


#: Called with a table's name and each batch of its rows as they are copied (the
#: model's columns, in order): what a render derives from the rows as they pass.
RowsCopied = Callable[[str, list], None]


class RecordFiles(Protocol):
    """What a render does while the records are copied into the folder (its record
    pages: :class:`harness.render.record_pages.PagesDuringCopy`)."""

    def begin(self, connection: Connection) -> None:
        """Before the first record, in the snapshot's read transaction on the server."""

    def placed(self, sha256s: Iterable[str]) -> None:
        """These records' files are in place with the server's bytes (hash-checked)."""

    def done(self) -> None:
        """Every record file is in place (and, with ``prune``, no other is left)."""


class _Tee:
    """A snapshot connection for :func:`_copy_rows` that also hands each batch of a
    table's rows to ``rows_copied`` once it is inserted."""

    def __init__(self, target: sqlite3.Connection, table: str, rows_copied: RowsCopied) -> None:
        self._target, self._table, self._rows_copied = target, table, rows_copied

    def executemany(self, statement: str, batch: list) -> None:
        self._target.executemany(statement, batch)
        self._rows_copied(self._table, batch)


def _copy_rows(connection: Connection, target: sqlite3.Connection | _Tee, model, where=None) -> int:
    """Copy a model's rows (``where``: a clause on them) from the server into the
    snapshot in primary-key order, in batches; how many."""
    table = model.__table__
    names = [column.name for column in table.columns]
    statement = (
        f"INSERT INTO {table.name} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"
    )
    query = select(*table.columns).order_by(*table.primary_key.columns)
    if where is not None:
        query = query.where(where)
    copied = 0
    # binary: the server sends floats and integers as they are held, not formatted as
    # text for the client to parse back (the same values: its text is the shortest
    # exact form)
    for batch in _server_rows(connection, query, f"snapshot_{table.name}", binary=True):
        target.executemany(statement, batch)
        copied += len(batch)
    return copied


# --- the folder's side ------------------------------------------------------------------


def read_source(index_path: Path) -> SnapshotSource | None:
    """The snapshot's :class:`SnapshotSource`; None when there is none or it is unreadable."""
    if not index_path.is_file():
        return None
    try:
        connection = sqlite3.connect(f"{index_path.absolute().as_uri()}?mode=ro", uri=True)
        try:
            row = connection.execute(
                "SELECT value FROM index_meta WHERE key = ?", (META_SOURCE,)
            ).fetchone()
        finally:
            connection.close()
        if row is None:
            return None
        fields = json.loads(row[0])
        if fields.get("version") != SOURCE_VERSION:
            return None
        return SnapshotSource(**fields)
    except (sqlite3.Error, ValueError, TypeError):
        return None


def _write_source(target: sqlite3.Connection, source: SnapshotSource) -> None:
    target.execute(
        "INSERT INTO index_meta (key, value) VALUES (?, ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (META_SOURCE, json.dumps(asdict(source), sort_keys=True)),
    )


def mark_complete(index_path: Path) -> None:
    """Record that the render of everything the snapshot holds is done."""
    source = read_source(index_path)
    if source is None:
        raise HistoryError(f"{index_path}: the render snapshot lost its source; render again")
    target = sqlite3.connect(index_path)
    try:
        _write_source(target, replace(source, complete=True))
        target.commit()
    finally:
        target.close()


def _remove_index_files(index_path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{index_path}{suffix}").unlink(missing_ok=True)


def _hash_file(path: Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


def held_records(layout: HistoryLayout) -> tuple[set[str], list[Path]]:
    """The records the folder holds whose bytes match their names, and the files that
    do not (edited, truncated, or not a record's name): every file re-hashed (4.6 s
    for 100,000 records of 18 KB in the page cache on the 2-core VM; threads were
    slower, the files being small)."""
    good, bad = set(), []
    for path in layout.iter_record_files():
        digest = _hash_file(path)
        claimed = sha256_of_record_name(path)
        if claimed is not None and digest == claimed and not path.is_symlink():
            good.add(claimed)
        else:
            bad.append(path)
    return good, bad


def take_snapshot(
    store: PostgresStore,
    folder: Path,
    *,
    prune: bool = False,
    record_files: RecordFiles | None = None,
    rows_copied: RowsCopied | None = None,
) -> SnapshotSource:
    """Copy the server's records, journal and index into ``folder`` (the index into a new
    snapshot at :func:`snapshot_path`), in one consistent read; its source, not yet
    complete. A record file already there with the right bytes is kept; with ``prune``
    (the folder was rendered from a server before) record files the server does not
    hold are removed, so the folder mirrors the server.

    ``record_files`` hears of the record files as each batch is in place (the render
    writes record pages beside the rest of the copy from then on). ``rows_copied`` sees every
    batch of index rows copied (index_meta, records, trials, summaries, in that order,
    each in primary-key order)."""
    layout = HistoryLayout.at(folder)
    where = server_name(store.engine.url)
    index_path = snapshot_path(folder)
    ensure_dir(index_path.parent, step="creating the render snapshot folder")
    forget_index(index_path)
    _remove_index_files(index_path)
    open_index(index_path).dispose()  # the models' tables, stamped at the head revision
    forget_index(index_path)
    with _server_snapshot(store, "reading the history to render") as connection:
        stored = set()
        if record_files is not None:
            record_files.begin(connection)
        query = select(records_table.c.sha256, records_table.c.data)
        # the records' paths as text (a Path per record cost more than its write)
        records = f"{layout.records}{os.sep}"
        for rows in _server_rows(
            connection, query, "snapshot_records", binary=True, batch=_RECORDS_BATCH
        ):
            placed = []
            for sha256, data in rows:
                placed.append(sha256)
                stored.add(sha256)
                data = _checked(sha256, bytes(data), where)
                path = f"{records}{sha256[:FANOUT_DIGITS]}{os.sep}{sha256}{RECORD_SUFFIX}"
                if _write_new_record(path, data):
                    continue
                # there already (rendered before, or left by a render that did not
                # finish): kept when it holds the server's bytes, else replaced whole
                try:
                    with open(path, "rb") as handle:
                        if handle.read() == data:
                            continue
                except OSError:
                    pass  # not a file this can read: replaced
                _write_record(layout, sha256, data)
            if record_files is not None:
                record_files.placed(placed)
        if prune:
            for path in list(layout.iter_record_files()):
                if sha256_of_record_name(path) not in stored:
                    path.unlink()
        if record_files is not None:
            record_files.done()
        lines = connection.execute(
            select(journal_table.c.line).order_by(journal_table.c.seq)
        ).scalars()
        replace_file(
            layout.journal,
            b"".join(bytes(line) for line in lines),
            step="writing the journal to render",
        )
        journal_seq = connection.execute(select(func.coalesce(func.max(journal_table.c.seq), 0)))
        records_seq = connection.execute(select(func.coalesce(func.max(RecordRow.seq), 0)))
        source = _prefix(connection, where, journal_seq.scalar(), records_seq.scalar())
        target = sqlite3.connect(index_path)
        try:
            # No rollback journal for this copy into a new file: its WAL (set by
            # open_index) wrote every page twice, 1.7 s more for 4,000,000 trial rows in
            # a measurement apart. What a journal protects is not needed here: a copy
            # that fails or is killed part-way leaves a file with no source, or one not
            # complete, and such a snapshot is never read again (the next render removes
            # it and takes a whole one). The commit is still synced (synchronous stays
            # FULL), so a snapshot marked complete later (mark_complete, in a journalled
            # transaction of its own) never rests on pages not yet on disk.
            target.execute("PRAGMA journal_mode=OFF")
            target.execute("DELETE FROM index_meta")
            # the large tables' own indexes are built once their rows are in, not row by
            # row (0.45 s less for 2,000,000 trial rows in a measurement apart), by the
            # statements that made them
            indexes = target.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
                "AND tbl_name IN (?, ?) ORDER BY name",
                (TrialRow.__tablename__, SummaryRow.__tablename__),
            ).fetchall()
            for name, _sql in indexes:
                target.execute(f'DROP INDEX "{name}"')

            def into(model) -> sqlite3.Connection | _Tee:
                if rows_copied is None:
                    return target
                return _Tee(target, model.__tablename__, rows_copied)

            for model in (IndexMetaRow, RecordRow, TrialRow, SummaryRow):
                _copy_rows(connection, into(model), model)
            for _name, sql in indexes:
                target.execute(sql)
            _write_source(target, source)
            target.commit()
        finally:
            target.close()
    return source


def update_snapshot(store: PostgresStore, folder: Path) -> SnapshotUpdate | Stale:
    """Bring the folder's snapshot up to date with what the server registered since it
    was taken, or say why it cannot be (:class:`Stale`; nothing changed then).

    Checked first, against the server: every record's bytes match its key (re-hashed
    by the server: HistoryError naming the first that does not, as a whole snapshot
    fails), the held journal lines are the server's first
    lines (count and digest), the held index rows are the server's rows up to the held
    seq (digest of (seq, sha256), counts and largest ids of trials and summaries), the
    index's own metadata is unchanged, every held record is still on the server, and
    the new journal lines chain on from the held head. Against the folder: its journal
    is the held one, and every record file is re-hashed; one that is not the server's
    bytes is fetched and written again (``repaired``).
    """
    layout = HistoryLayout.at(folder)
    where = server_name(store.engine.url)
    index_path = snapshot_path(folder)
    held = read_source(index_path)
    if held is None:
        return Stale(f"{index_path}: no snapshot of a server this harness reads")
    if not held.complete:
        return Stale(f"{index_path}: the last render into {folder} did not finish")
    if held.server != where:
        return Stale(f"{folder} was rendered from {held.server}, not {where}")
    try:
        journal = layout.journal.read_bytes()
    except FileNotFoundError:
        return Stale(f"{layout.journal}: missing")
    if sha256_bytes(journal) != held.journal_digest:
        return Stale(f"{layout.journal}: not the journal {folder} was rendered from")
    good, bad = held_records(layout)

    with _server_snapshot(store, "reading what was registered since") as connection:
        now = _prefix(connection, where, held.journal_seq, held.records_seq)
        compared = ("server", "journal_seq", "journal_lines", "journal_digest", "journal_head")
        if any(getattr(now, f) != getattr(held, f) for f in compared):
            return Stale(
                f"the journal of {where} no longer begins with the {held.journal_lines} lines "
                f"{folder} was rendered from (head {held.journal_head[:16]}...)"
            )
        if asdict(replace(now, complete=held.complete)) != asdict(held):
            return Stale(
                f"the index of {where} is not the one {folder} was rendered from up to its "
                "seq (rebuilt or edited since)"
            )
        new_lines = connection.execute(
            select(journal_table.c.line, journal_table.c.link, journal_table.c.seq)
            .where(journal_table.c.seq > held.journal_seq)
            .order_by(journal_table.c.seq)
        ).all()
        head = held.journal_head
        journalled = set()
        for line, link, _seq in new_lines:
            line = bytes(line)
            try:
                entry = json.loads(line)
                prev = entry.get("prev")
                journalled.add(entry.get("sha256"))
            except (ValueError, AttributeError):
                prev = None
            if prev != head or sha256_bytes(line) != link:
                return Stale(
                    f"the journal of {where} does not chain on from the head "
                    f"{head[:16]}... {folder} was rendered from"
                )
            head = link
        # every record re-hashed by the server itself (3-4 s for 1.8 GB at 100,000
        # records; the bytes stay there): a record edited on the server fails the
        # render as it fails a whole one
        tampered = connection.execute(
            select(records_table.c.sha256)
            .where(func.encode(func.sha256(records_table.c.data), "hex") != records_table.c.sha256)
            .order_by(records_table.c.sha256)
            .limit(1)
        ).scalar()
        if tampered is not None:
            raise _tampered(tampered, where)
        stored = set(connection.execute(select(records_table.c.sha256)).scalars())
        if good - stored:
            gone = sorted(good - stored)
            return Stale(f"{len(gone)} records {folder} holds are gone from {where} ({gone[0]})")
        repaired = [p for p in bad if sha256_of_record_name(p) in stored]
        wanted = sorted(stored - good)
        # new to the folder: what it lacks, and what was registered since (a record
        # file written by an update that failed before its commit is held already)
        new_shas = set(wanted) - {sha256_of_record_name(p) for p in repaired}
        new_shas |= journalled & stored
        new_shas |= set(
            connection.execute(
                select(RecordRow.sha256).where(RecordRow.seq > held.records_seq)
            ).scalars()
        )
        for first in range(0, len(wanted), 500):
            chunk = wanted[first : first + 500]
            rows = connection.execute(
                select(records_table.c.sha256, records_table.c.data).where(
                    records_table.c.sha256.in_(chunk)
                )
            )
            for sha256, data in rows:
                _write_record(layout, sha256, _checked(sha256, bytes(data), where))
        for path in bad:
            if path not in repaired:
                path.unlink(missing_ok=True)  # not a record's name, or not on the server
        last_seq = connection.execute(select(func.max(journal_table.c.seq))).scalar() or 0
        last_index = connection.execute(select(func.max(RecordRow.seq))).scalar() or 0
        source = _prefix(connection, where, last_seq, last_index)
        target = sqlite3.connect(index_path)
        try:
            new_seqs = [row[0] for row in connection.execute(
                select(RecordRow.seq).where(RecordRow.seq > held.records_seq).order_by(RecordRow.seq)
            )]  # fmt: skip
            _copy_rows(connection, target, RecordRow, RecordRow.seq > held.records_seq)
            for model, max_id in (
                (TrialRow, held.trials_max_id),
                (SummaryRow, held.summaries_max_id),
            ):
                low = connection.execute(
                    select(func.count()).select_from(model)
                    .where(model.record_seq > held.records_seq, model.id <= max_id)
                ).scalar_one()  # fmt: skip
                if low:
                    target.rollback()
                    return Stale(
                        f"the index of {where} has {model.__tablename__} rows of new records "
                        "placed before held ones (rebuilt or edited since)"
                    )
                _copy_rows(connection, target, model, model.record_seq > held.records_seq)
            _write_source(target, source)
            target.commit()
        finally:
            target.close()
        if new_lines:
            replace_file(
                layout.journal,
                journal + b"".join(bytes(line) for line, _link, _seq in new_lines),
                step="writing the journal to render",
            )
    return SnapshotUpdate(new_seqs, new_shas, repaired, head or GENESIS_HEAD)


# --- a render of the server, from the copy its output folder keeps -----------------------

#: The ``index_meta`` key, in a render's snapshot, of the options it was rendered with
#: (the render's: whether plots were drawn, and a digest of the git order of records).
META_RENDER_OPTIONS = "render.options"
#: Seconds to wait for another render into the same folder.
RENDER_LOCK_TIMEOUT = 600.0


class CopyObserver(Protocol):
    """What a render does while the server is copied whole into its folder (record
    pages, timings.csv and key trials drawn from the rows as they pass)."""

    record_files: RecordFiles | None

    def rows_copied(self, table: str, batch: list) -> None:
        """A batch of index rows of ``table`` copied."""

    def finish(self) -> None:
        """The copy is complete."""

    def abort(self) -> None:
        """The copy failed."""

    def close(self) -> None:
        """The render is over (its workers stop, if the render failed before them)."""


def _held_options(index_path: Path) -> dict | None:
    engine = open_index(index_path, create=False)
    try:
        with engine.connect() as connection:
            return read_meta_json(connection, META_RENDER_OPTIONS)
    finally:
        engine.dispose()
        forget_index(index_path)


@contextmanager
def render_copy(
    store: PostgresStore,
    out: Path | None,
    *,
    options: Callable[[], dict],
    on_copy: Callable[[HistoryLayout], CopyObserver] | None = None,
) -> Iterator[RenderSource]:
    """The copy of the server that ``out`` keeps, for a render there, held (a lock in
    the copy) until the render is done; then it records the render's options and that
    the render of everything it holds is complete.

    A folder rendered from the same server before is brought up to date
    (:func:`update_snapshot`: ``changes`` says what it gained); when it no longer
    matches the server (:class:`Stale`, or other render options) it is taken again
    whole (:func:`take_snapshot`), and a note says why.
    """
    from filelock import FileLock, Timeout

    where = server_name(store.engine.url)
    if out is None:
        raise UsageError(f"render index of {where} needs --out DIR (where to render)")
    if (out / "history.json").exists():
        raise UsageError(f"--out {out} is a history folder; render {where} into a new folder")
    index_path = snapshot_path(out)
    ensure_dir(index_path.parent, step="creating the render snapshot folder")
    lock = FileLock(str(index_path.parent / "lock"), timeout=RENDER_LOCK_TIMEOUT)
    try:
        lock.acquire()
    except Timeout:
        raise HistoryError(
            f"{out}: another render into this folder has held it for "
            f"{RENDER_LOCK_TIMEOUT:.0f} s; try again when it is done"
        ) from None
    layout = HistoryLayout.at(out)
    observer = None
    try:
        wanted = options()
        rendered_before = index_path.exists()
        update = update_snapshot(store, out) if rendered_before else Stale("first render")
        held = None
        if not isinstance(update, Stale):
            held = _held_options(index_path)
            if held is None or held["plots"] != wanted["plots"]:
                update = Stale(f"{out} was rendered with other options (plots or not)")
        source = RenderSource(layout, None, None, changes=update, held_options=held)
        if isinstance(update, Stale):
            if rendered_before:
                source.warnings.append(f"note: {out}: rendering everything again: {update.reason}")
            observer = on_copy(layout) if on_copy is not None else None
            try:
                take_snapshot(
                    store,
                    out,
                    prune=rendered_before,
                    record_files=observer.record_files if observer is not None else None,
                    rows_copied=observer.rows_copied if observer is not None else None,
                )
            except BaseException:
                if observer is not None:
                    observer.abort()
                raise
            if observer is not None:
                observer.finish()
        else:
            source.warnings += [
                f"note: {path}: not the server's bytes; written again" for path in update.repaired
            ]
        source.warnings += [
            f"warning: record {sha256} is not indexed and was left out (not a valid report, "
            "or the index lags): `harness history verify` says which"
            for sha256 in unindexed_records(store)
        ]
        source.engine = open_index(index_path, create=False)
        try:
            yield source
            with source.engine.begin() as connection:
                write_meta(connection, META_RENDER_OPTIONS, json.dumps(wanted))
        finally:
            source.engine.dispose()
            forget_index(index_path)
        mark_complete(index_path)
    finally:
        if observer is not None:
            observer.close()
        lock.release()
