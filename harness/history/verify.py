"""Checking a history: records against their names, the journal's hash chain, the index
against the records and SQLite's own integrity check (``harness history verify``).

Every record is re-hashed. Problems are named one by one; errors make the command
exit 1, warnings (an interrupted registration's leftovers, a plot waiting to be
drawn) do not. Nothing is modified: the index is opened read-only and no schema is
created. The rendered files are checked by a hook the caller passes in (the views are
not this package's business); the plots' PNG structure is checked here.
"""

from __future__ import annotations

import enum
import json
import stat
import struct
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, func, select
from sqlalchemy.exc import DatabaseError

from harness.errors import HistoryError, ReportValidationError
from harness.fsio import TEMP_SUFFIX
from harness.history.entries import SUMMARY_FIELDS, TRIAL_FIELDS, IndexEntry, derive_entry
from harness.history.index_db import (
    INDEX_SCHEMA_VERSION,
    META_SCHEMA_VERSION,
    RecordRow,
    SummaryRow,
    TrialRow,
    check_integrity,
    damaged_index_message,
    missing_tables,
    open_index_readonly,
    read_meta,
)
from harness.history.journal import GENESIS_HEAD, JournalContents, read_journal
from harness.history.layout import PLOT_SUFFIX, HistoryLayout, sha256_of_record_name
from harness.history.lock import DEFAULT_LOCK_TIMEOUT, locked_history
from harness.history.records import sha256_bytes
from harness.report import looks_truncated, migrate_report, schema_version_of


class ProblemKind(enum.Enum):
    """What can be wrong in a history; the value is how it is printed."""

    TAMPERED = "tampered"  # a record's bytes differ from its name
    TRUNCATED = "truncated"  # ... and are a cut-off JSON document
    UNREADABLE = "unreadable"  # a record whose hash matches but that no longer parses
    MISNAMED = "misnamed"  # a file under records/sha256/ that is not named like a record
    SYMLINK = "symlink"  # a record (or its folder) replaced by a symbolic link
    MISSING = "missing"  # journalled or indexed record whose file is gone
    ORPHANED = "orphaned"  # index row with no record and no journal entry (added by hand)
    UNINDEXED = "unindexed"  # a registered record the index lacks (index lags: run rebuild)
    UNREGISTERED = "unregistered"  # a record file the journal lacks (killed, or planted)
    DUPLICATE_ROW = "duplicate-row"  # several index rows for one record
    INDEX_MISMATCH = "index-mismatch"  # an index row that differs from what its record gives
    INDEX_DAMAGED = "index-damaged"  # SQLite's integrity check failed, or a table is gone
    INDEX_MISSING = "index-missing"  # no index.sqlite
    JOURNAL_MISSING = "journal-missing"  # no journal.jsonl: deletions are undetectable
    JOURNAL_BROKEN = "journal-broken"  # a line that does not follow the one before it
    HEAD_NOT_FOUND = "head-not-found"  # --expect-head is not a link of the journal
    STALE_RENDER = "stale-render"  # a rendered file that differs from what the index gives
    RENDER_DAMAGED = "render-damaged"  # a rendered file that is not what it claims (PNG)
    PAGE_FAILED = "page-failed"  # a record whose page could not be drawn (its JSON shown)
    TORN_JOURNAL = "torn-journal"  # an unreadable journal line (interrupted registration)
    STALE_TEMP = "stale-temp"  # a temporary file left by an interrupted write
    WRITABLE = "writable"  # a record file that is not read-only
    PLOT_PENDING = "plot-pending"  # a comparison group whose plot is missing or out of date
    INDEX_OUTDATED = "index-outdated"  # an older index schema, rebuilt at the next write


_DAMAGE_KINDS = frozenset(
    {ProblemKind.TAMPERED, ProblemKind.TRUNCATED, ProblemKind.UNREADABLE, ProblemKind.SYMLINK}
)

WARNING_KINDS = frozenset(
    {
        ProblemKind.TORN_JOURNAL,
        ProblemKind.STALE_TEMP,
        ProblemKind.WRITABLE,
        ProblemKind.PLOT_PENDING,
        ProblemKind.INDEX_OUTDATED,
    }
)

UNREGISTERED_DETAIL = (
    "stored but not in the journal (an interrupted registration, or a file planted by hand): "
    "not indexed; `harness history register PATH` adopts it"
)


@dataclass(frozen=True)
class Problem:
    kind: ProblemKind
    subject: str
    detail: str

    @property
    def is_error(self) -> bool:
        return self.kind not in WARNING_KINDS

    def __str__(self) -> str:
        level = "error" if self.is_error else "warning"
        return f"{level}: {self.kind.value}: {self.subject}: {self.detail}"


#: Checks the rendered files against the index (lock held, index sound); see
#: :func:`harness.render.check_rendered`.
RenderedCheck = Callable[[HistoryLayout, Connection], list[Problem]]


@dataclass
class RecordScan:
    """Result of reading every record file: good entries and problems."""

    entries: dict[str, IndexEntry] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)


@dataclass
class VerifyResult:
    records: int
    problems: list[Problem]
    #: the journal's head as read now (None without a readable journal)
    journal_head: str | None = None

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.is_error]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if not p.is_error]

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass(frozen=True)
class ScannedRecord:
    """One file under ``records/sha256/``: its claimed SHA-256, entry if sound, problem if any."""

    sha256: str | None
    entry: IndexEntry | None
    problem: Problem | None


@dataclass(frozen=True)
class Leftover:
    """A temporary file left by an interrupted write; rebuild removes it."""

    path: Path
    detail: str


def iter_leftover_files(layout: HistoryLayout) -> Iterator[Leftover]:
    """Temporary files of interrupted registrations, renders and rebuilds (lock held).

    Under the lock no other writer is running, so every one of them is stale.
    """
    if layout.temp.is_dir():
        for temp in sorted(layout.temp.iterdir()):
            yield Leftover(temp, "left by an interrupted registration (rebuild removes it)")
    renders = [*layout.root.glob(f".*{TEMP_SUFFIX}"), *layout.plots.glob(f".*{TEMP_SUFFIX}")]
    for temp in sorted(renders):
        yield Leftover(temp, "left by an interrupted render (rebuild removes it)")
    for temp in sorted(layout.root.glob(f"{layout.index_db.name}.rebuild-*")):
        yield Leftover(temp, "left by an interrupted rebuild (rebuild removes it)")
    if layout.marker_temp.exists() and layout.marker.exists():
        yield Leftover(layout.marker_temp, "left by an interrupted creation (rebuild removes it)")


def iter_scanned_records(
    layout: HistoryLayout, progress: Callable[[int], None] | None = None
) -> Iterator[ScannedRecord]:
    """Re-hash and parse every record file, one at a time; never modifies anything.

    A sound record that is merely writable yields a WRITABLE problem with its entry.
    """
    for path in layout.iter_record_files():
        if progress is not None:
            progress(1)
        relpath = path.relative_to(layout.root).as_posix()
        claimed = sha256_of_record_name(path)
        if path.is_symlink() or path.parent.is_symlink():
            detail = "a symbolic link, not the stored bytes (the record was replaced)"
            yield ScannedRecord(claimed, None, Problem(ProblemKind.SYMLINK, relpath, detail))
            continue
        if claimed is None or not path.is_file():
            detail = "not a record name (records/sha256/ab/<64 hex>.json)"
            yield ScannedRecord(None, None, Problem(ProblemKind.MISNAMED, relpath, detail))
            continue
        data = path.read_bytes()
        actual = sha256_bytes(data)
        if actual != claimed:
            kind, detail = _classify_damage(data)
            yield ScannedRecord(
                claimed, None, Problem(kind, relpath, f"{detail}; bytes hash to {actual}")
            )
            continue
        try:
            entry = entry_of_record(data, sha256=claimed, path=relpath)
        except (ReportValidationError, KeyError, TypeError, ValueError) as exc:
            detail = f"hash matches but it does not parse: {exc}"
            yield ScannedRecord(claimed, None, Problem(ProblemKind.UNREADABLE, relpath, detail))
            continue
        mode = path.stat().st_mode
        problem = None
        if mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
            detail = f"mode {stat.filemode(mode)}, expected read-only"
            problem = Problem(ProblemKind.WRITABLE, relpath, detail)
        yield ScannedRecord(claimed, entry, problem)


def entry_of_record(data: bytes, *, sha256: str, path: str) -> IndexEntry:
    """The index rows a record's bytes give (bytes equal to their name were strictly
    parsed and validated at registration); raises ReportValidationError, KeyError,
    TypeError or ValueError when they no longer parse."""
    doc = json.loads(data)
    version = schema_version_of(doc, path)
    doc = migrate_report(doc, version, name=path)
    return derive_entry(doc, sha256=sha256, path=path, size_bytes=len(data), schema_version=version)


def index_row_differences(
    entry: IndexEntry, row: Any, trials: list[tuple], summaries: list[tuple]
) -> list[str]:
    """What of a record's index rows (its records row, and its trials and summaries rows
    as value tuples in insertion order) differs from what its bytes give; [] when none."""
    differing = [k for k, v in entry.record.items() if getattr(row, k) != v]
    if trials != [tuple(t[f] for f in TRIAL_FIELDS) for t in entry.trials]:
        differing.append("trials")
    if summaries != [tuple(s[f] for f in SUMMARY_FIELDS) for s in entry.summaries]:
        differing.append("summaries")
    return differing


def scan_records(
    layout: HistoryLayout, progress: Callable[[int], None] | None = None
) -> RecordScan:
    """Every record's scan, collected (for rebuild, which needs all entries at once)."""
    scan = RecordScan()
    for scanned in iter_scanned_records(layout, progress):
        if scanned.problem is not None:
            scan.problems.append(scanned.problem)
        if scanned.entry is not None:
            scan.entries[scanned.sha256] = scanned.entry
    return scan


def _classify_damage(data: bytes) -> tuple[ProblemKind, str]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return ProblemKind.TAMPERED, "bytes differ from the record's name (not even UTF-8 now)"
    try:
        json.loads(text)
    except ValueError:
        if looks_truncated(text):
            return ProblemKind.TRUNCATED, f"record is cut off ({len(data)} bytes left)"
        return ProblemKind.TAMPERED, "bytes differ from the record's name and no longer parse"
    return ProblemKind.TAMPERED, "bytes differ from the record's name (edited)"


def verify_history(
    history_dir: str | Path,
    *,
    expect_head: str | None = None,
    check_rendered: RenderedCheck | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    progress: Callable[[int], None] | None = None,
    records_only: bool = False,
) -> VerifyResult:
    """Check everything in a history; see :class:`ProblemKind` for what is reported.

    ``expect_head`` is a journal head kept from earlier (printed by a registration,
    written into README.md): it must be a link of the journal's chain, which proves
    that no line up to it was removed or altered. ``records_only`` checks the records
    and the journal alone, for a history kept without its derived files (the evidence
    history committed under ``docs/performance/evidence``); a record's write bit is not
    reported there, since git does not keep it.
    """
    with locked_history(history_dir, timeout=lock_timeout, shared=True) as layout:
        return _verify_locked(layout, expect_head, check_rendered, progress, records_only)


def _check_journal(
    layout: HistoryLayout, expect_head: str | None, problems: list[Problem]
) -> JournalContents | None:
    try:
        journal = read_journal(layout)
    except HistoryError as exc:
        problems.append(Problem(ProblemKind.JOURNAL_MISSING, layout.journal.name, str(exc)))
        return None
    name = layout.journal.name
    for number in journal.torn_lines:
        problems.append(
            Problem(ProblemKind.TORN_JOURNAL, f"{name}:{number}", "unreadable line skipped")
        )
    for chain_break in journal.breaks:
        problems.append(
            Problem(ProblemKind.JOURNAL_BROKEN, f"{name}:{chain_break.line}", chain_break.detail)
        )
    links = {link for _, link in journal.links}
    if expect_head is not None and expect_head != GENESIS_HEAD and expect_head not in links:
        problems.append(
            Problem(
                ProblemKind.HEAD_NOT_FOUND,
                name,
                f"the expected head {expect_head} is not a link of the journal (whose head "
                f"is now {journal.head}): a line up to it was removed or altered",
            )
        )
    return journal


def _verify_locked(
    layout: HistoryLayout,
    expect_head: str | None,
    check_rendered: RenderedCheck | None,
    progress: Callable[[int], None] | None = None,
    records_only: bool = False,
) -> VerifyResult:
    problems: list[Problem] = []
    journal = _check_journal(layout, expect_head, problems)
    journalled = journal.shas if journal is not None else set()
    scanned = list(iter_scanned_records(layout, progress))
    on_disk: set[str] = set()
    entries: dict[str, IndexEntry] = {}
    for record in scanned:
        if record.problem is not None and not (
            records_only and record.problem.kind is ProblemKind.WRITABLE
        ):
            problems.append(record.problem)
        if record.sha256 is None:
            continue
        on_disk.add(record.sha256)
        if record.entry is not None:
            entries[record.sha256] = record.entry
    damaged = {p.subject for p in problems if p.kind in _DAMAGE_KINDS}
    if journal is not None:
        for sha256 in sorted(journalled - on_disk):
            problems.append(
                Problem(
                    ProblemKind.MISSING,
                    layout.record_relpath(sha256),
                    "registered (journalled), but the record file is gone",
                )
            )
        for sha256 in sorted(on_disk - journalled):
            if layout.record_relpath(sha256) not in damaged:
                problems.append(
                    Problem(
                        ProblemKind.UNREGISTERED, layout.record_relpath(sha256), UNREGISTERED_DETAIL
                    )
                )
    if not records_only:
        problems.extend(_check_index(layout, entries, on_disk, journalled, damaged, check_rendered))
        problems.extend(_check_plot_files(layout))
    for leftover in iter_leftover_files(layout):
        problems.append(
            Problem(
                ProblemKind.STALE_TEMP,
                leftover.path.relative_to(layout.root).as_posix(),
                leftover.detail,
            )
        )
    head = journal.head if journal is not None else None
    return VerifyResult(records=len(on_disk), problems=problems, journal_head=head)


def _check_index(
    layout: HistoryLayout,
    entries: dict[str, IndexEntry],
    on_disk: set[str],
    journalled: set[str],
    damaged: set[str],
    check_rendered: RenderedCheck | None,
) -> list[Problem]:
    """The index against the records: SQLite's integrity check first, then row by row."""
    name = layout.index_db.name
    if not layout.index_db.is_file():
        return [
            Problem(ProblemKind.INDEX_MISSING, name, "no index (run `harness history rebuild`)")
        ]
    findings = check_integrity(layout.index_db)
    if findings:
        detail = "; ".join(findings[:3]) + (
            f"; ... {len(findings) - 3} more" if len(findings) > 3 else ""
        )
        return [Problem(ProblemKind.INDEX_DAMAGED, name, damaged_index_message(detail))]
    engine = open_index_readonly(layout.index_db)
    try:
        with engine.connect() as connection:
            absent = missing_tables(connection)
            if absent:
                detail = f"table {', '.join(absent)} is missing"
                return [
                    Problem(
                        ProblemKind.INDEX_DAMAGED,
                        name,
                        damaged_index_message(detail),
                    )
                ]
            problems = _compare_index(layout, connection, entries, on_disk, journalled, damaged)
            if check_rendered is not None:
                problems.extend(check_rendered(layout, connection))
            return problems
    except DatabaseError as exc:
        detail = damaged_index_message(str(exc.orig))
        return [Problem(ProblemKind.INDEX_DAMAGED, name, detail)]
    finally:
        engine.dispose()


def _compare_index(
    layout: HistoryLayout,
    connection: Connection,
    entries: dict[str, IndexEntry],
    on_disk: set[str],
    journalled: set[str],
    damaged: set[str],
) -> list[Problem]:
    problems: list[Problem] = []
    version = read_meta(connection, META_SCHEMA_VERSION)
    if version is None or int(version) != INDEX_SCHEMA_VERSION:
        problems.append(
            Problem(
                ProblemKind.INDEX_OUTDATED,
                layout.index_db.name,
                f"index schema version {version}, this harness writes {INDEX_SCHEMA_VERSION} "
                "(the next registration or `harness history rebuild` rebuilds it)",
            )
        )
        # its rows lack this schema's columns: compared after the upgrade, not before
        return problems
    duplicates = connection.execute(
        select(RecordRow.sha256, func.count())
        .group_by(RecordRow.sha256)
        .having(func.count() > 1)
        .order_by(RecordRow.sha256)
    ).all()
    for sha256, count in duplicates:
        problems.append(
            Problem(
                ProblemKind.DUPLICATE_ROW,
                f"index row {sha256}",
                f"{count} rows for one record (run `harness history rebuild`)",
            )
        )
    rows = {row.sha256: row for row in connection.execute(select(RecordRow.__table__))}
    trials_by_seq = rows_by_seq(connection, TrialRow, TRIAL_FIELDS)
    summaries_by_seq = rows_by_seq(connection, SummaryRow, SUMMARY_FIELDS)
    seqs = {row.seq for row in rows.values()}
    for seq in sorted(set(trials_by_seq) - seqs):
        problems.append(
            Problem(
                ProblemKind.ORPHANED,
                f"index trials of seq {seq}",
                "trial rows without a record row",
            )
        )
    for seq in sorted(set(summaries_by_seq) - seqs):
        problems.append(
            Problem(
                ProblemKind.ORPHANED,
                f"index summaries of seq {seq}",
                "summary rows without a record row",
            )
        )
    for sha256, entry in entries.items():
        row = rows.get(sha256)
        if row is None:
            continue
        differing = index_row_differences(
            entry, row, trials_by_seq.get(row.seq, []), summaries_by_seq.get(row.seq, [])
        )
        if differing:
            problems.append(
                Problem(
                    ProblemKind.INDEX_MISMATCH,
                    f"index row {sha256}",
                    "differs from its record in " + ", ".join(differing),
                )
            )
    for sha256 in sorted(set(rows) - on_disk):
        if sha256 not in journalled:
            problems.append(
                Problem(
                    ProblemKind.ORPHANED,
                    f"index row {sha256}",
                    "no record file and never journalled (added to the index by hand?)",
                )
            )
        # a journalled record whose file is gone is already reported as missing
    for sha256 in sorted((on_disk & journalled) - set(rows)):
        if layout.record_relpath(sha256) not in damaged:
            problems.append(
                Problem(
                    ProblemKind.UNINDEXED,
                    layout.record_relpath(sha256),
                    "registered but not in the index (run `harness history rebuild`)",
                )
            )
    for sha256 in sorted((on_disk - journalled) & set(rows)):
        problems.append(
            Problem(
                ProblemKind.ORPHANED,
                f"index row {sha256}",
                "indexed but never journalled (added to the index by hand?)",
            )
        )
    return problems


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_problem(data: bytes) -> str | None:
    """What makes ``data`` not a complete PNG file (signature, chunk CRCs, IHDR..IEND), or None."""
    if not data.startswith(_PNG_SIGNATURE):
        return "not a PNG file (no PNG signature)"
    position = len(_PNG_SIGNATURE)
    first = True
    while position + 12 <= len(data):
        (length,) = struct.unpack_from(">I", data, position)
        kind = data[position + 4 : position + 8]
        end = position + 12 + length
        if end > len(data):
            return f"chunk {kind!r} runs past the end of the file (cut off)"
        body = data[position + 4 : end - 4]
        (crc,) = struct.unpack_from(">I", data, end - 4)
        if zlib.crc32(body) != crc:
            return f"chunk {kind!r} at byte {position} fails its CRC (damaged)"
        if first and kind != b"IHDR":
            return "the first chunk is not IHDR"
        first = False
        position = end
        if kind == b"IEND":
            return None if position == len(data) else "bytes after the IEND chunk"
    return "no IEND chunk (cut off)"


def _check_plot_files(layout: HistoryLayout) -> list[Problem]:
    """Every ``plots/*.png`` must be a complete PNG (a plot replaced by garbage is reported)."""
    if not layout.plots.is_dir():
        return []
    problems = []
    for path in sorted(layout.plots.glob(f"*{PLOT_SUFFIX}")):
        relpath = path.relative_to(layout.root).as_posix()
        if path.is_symlink() or not path.is_file():
            problems.append(Problem(ProblemKind.RENDER_DAMAGED, relpath, "not a regular file"))
            continue
        detail = png_problem(path.read_bytes())
        if detail is not None:
            problems.append(
                Problem(
                    ProblemKind.RENDER_DAMAGED,
                    relpath,
                    f"{detail} (run `harness render index --all-plots`)",
                )
            )
    return problems


def rows_by_seq(connection: Any, model: Any, fields: tuple[str, ...]) -> dict[int, list[tuple]]:
    """Rows of a per-record table as value tuples grouped by record, in insertion order.

    Read through the DB-API connection (hundreds of thousands of rows; SQLite's or
    psycopg's, in the connection's transaction); SQLite's booleans come back as 0/1,
    which compare equal to the records' True/False.
    """
    table = model.__tablename__
    columns = ", ".join(f'"{field}"' for field in fields)
    sql = f"SELECT record_seq, {columns} FROM {table} ORDER BY id"
    grouped: dict[int, list[tuple]] = defaultdict(list)
    for row in connection.connection.driver_connection.execute(sql).fetchall():
        grouped[row[0]].append(row[1:])
    return grouped
