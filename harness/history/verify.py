"""Checking a history: records against their names, the index against the records,
the journal and the rendered files (``harness history verify``).

Every record is re-hashed. Problems are named one by one; errors make the command
exit 1, warnings (an interrupted registration's leftovers, a plot waiting to be
drawn) do not. Nothing is modified.
"""

from __future__ import annotations

import enum
import json
import stat
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

from harness.errors import ReportValidationError
from harness.history.entries import SUMMARY_FIELDS, TRIAL_FIELDS, IndexEntry, derive_entry
from harness.history.layout import HistoryLayout, sha256_of_record_name
from harness.history.records import sha256_bytes
from harness.report import looks_truncated, migrate_report, schema_version_of


class ProblemKind(enum.Enum):
    """What can be wrong in a history; the value is how it is printed."""

    TAMPERED = "tampered"  # a record's bytes differ from its name
    TRUNCATED = "truncated"  # ... and are a cut-off JSON document
    UNREADABLE = "unreadable"  # a record whose hash matches but that no longer parses
    MISNAMED = "misnamed"  # a file under records/sha256/ that is not named like a record
    MISSING = "missing"  # journalled or indexed record whose file is gone
    ORPHANED = "orphaned"  # index row with no record and no journal entry (added by hand)
    UNINDEXED = "unindexed"  # a stored record the index lacks (index lags: run rebuild)
    INDEX_MISMATCH = "index-mismatch"  # an index row that differs from what its record gives
    STALE_RENDER = "stale-render"  # a rendered file that differs from what the index gives
    UNJOURNALED = "unjournaled"  # record stored but not journalled (interrupted registration)
    TORN_JOURNAL = "torn-journal"  # an unreadable journal line (interrupted registration)
    STALE_TEMP = "stale-temp"  # a temporary file left by an interrupted registration
    WRITABLE = "writable"  # a record file that is not read-only
    PLOT_PENDING = "plot-pending"  # a comparison group whose plot is missing or out of date


_DAMAGE_KINDS = frozenset({ProblemKind.TAMPERED, ProblemKind.TRUNCATED, ProblemKind.UNREADABLE})

WARNING_KINDS = frozenset(
    {
        ProblemKind.UNJOURNALED,
        ProblemKind.TORN_JOURNAL,
        ProblemKind.STALE_TEMP,
        ProblemKind.WRITABLE,
        ProblemKind.PLOT_PENDING,
    }
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


@dataclass
class RecordScan:
    """Result of reading every record file: good entries and problems."""

    entries: dict[str, IndexEntry] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    bad_names: set[str] = field(default_factory=set)  # claimed SHA-256 of damaged records


@dataclass
class VerifyResult:
    records: int
    problems: list[Problem]

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
            # bytes equal to their name were strictly parsed and validated at registration
            doc = json.loads(data)
            version = schema_version_of(doc, relpath)
            doc = migrate_report(doc, version, name=relpath)
            entry = derive_entry(
                doc, sha256=claimed, path=relpath, size_bytes=len(data), schema_version=version
            )
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
        elif scanned.sha256 is not None:
            scan.bad_names.add(scanned.sha256)
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
    lock_timeout: float = 600.0,
    progress: Callable[[int], None] | None = None,
) -> VerifyResult:
    """Check everything in a history; see :class:`ProblemKind` for what is reported."""
    from harness.history.store import check_history_marker, history_lock, require_history

    layout = HistoryLayout.at(history_dir)
    require_history(layout)
    with history_lock(layout, lock_timeout):
        check_history_marker(layout, create=False)
        return _verify_locked(layout, progress)


def _verify_locked(
    layout: HistoryLayout, progress: Callable[[int], None] | None = None
) -> VerifyResult:
    from harness.history.index_db import RecordRow, SummaryRow, TrialRow, open_index
    from harness.history.journal import read_journal

    problems: list[Problem] = []
    journal = read_journal(layout)
    for number in journal.torn_lines:
        subject = f"{layout.journal.name}:{number}"
        problems.append(Problem(ProblemKind.TORN_JOURNAL, subject, "unreadable line skipped"))
    journalled = journal.shas
    engine = open_index(layout.index_db, create=False)
    with engine.connect() as connection:
        # the index is loaded first; records are then streamed and compared one by one
        rows = {row.sha256: row for row in connection.execute(select(RecordRow.__table__))}
        trials_by_seq = _rows_by_seq(connection, TrialRow, TRIAL_FIELDS)
        summaries_by_seq = _rows_by_seq(connection, SummaryRow, SUMMARY_FIELDS)
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
        on_disk: set[str] = set()
        sound: set[str] = set()
        for scanned in iter_scanned_records(layout, progress):
            if scanned.problem is not None:
                problems.append(scanned.problem)
            if scanned.sha256 is None:
                continue
            on_disk.add(scanned.sha256)
            entry = scanned.entry
            row = rows.get(scanned.sha256)
            if entry is None or row is None:
                continue  # damaged (already reported) or unindexed (reported below)
            sound.add(scanned.sha256)
            differing = [k for k, v in entry.record.items() if getattr(row, k) != v]
            expected_trials = [tuple(t[f] for f in TRIAL_FIELDS) for t in entry.trials]
            if trials_by_seq.get(row.seq, []) != expected_trials:
                differing.append("trials")
            expected_summaries = [tuple(s[f] for f in SUMMARY_FIELDS) for s in entry.summaries]
            if summaries_by_seq.get(row.seq, []) != expected_summaries:
                differing.append("summaries")
            if differing:
                problems.append(
                    Problem(
                        ProblemKind.INDEX_MISMATCH,
                        f"index row {scanned.sha256}",
                        "differs from its record in " + ", ".join(differing),
                    )
                )
        del trials_by_seq, summaries_by_seq
        for sha256 in sorted(set(rows) - on_disk):
            if sha256 in journalled:
                problems.append(
                    Problem(
                        ProblemKind.MISSING,
                        layout.record_relpath(sha256),
                        "registered and indexed, but the record file is gone",
                    )
                )
            else:
                problems.append(
                    Problem(
                        ProblemKind.ORPHANED,
                        f"index row {sha256}",
                        "no record file and never journalled (added to the index by hand?)",
                    )
                )
        damaged = {p.subject for p in problems if p.kind in _DAMAGE_KINDS}
        for sha256 in sorted(on_disk - set(rows)):
            if layout.record_relpath(sha256) not in damaged:
                problems.append(
                    Problem(
                        ProblemKind.UNINDEXED,
                        layout.record_relpath(sha256),
                        "stored but not in the index (run `harness history rebuild`)",
                    )
                )
        for sha256 in sorted(journalled - on_disk - set(rows)):
            problems.append(
                Problem(
                    ProblemKind.MISSING,
                    layout.record_relpath(sha256),
                    "journalled, but the record file is gone",
                )
            )
        for sha256 in sorted(on_disk - journalled):
            problems.append(
                Problem(
                    ProblemKind.UNJOURNALED,
                    layout.record_relpath(sha256),
                    "stored but not journalled (interrupted registration; rebuild adds it)",
                )
            )
        problems.extend(_check_rendered(layout, connection))
    if layout.temp.is_dir():
        for temp in sorted(layout.temp.iterdir()):
            problems.append(
                Problem(
                    ProblemKind.STALE_TEMP,
                    temp.relative_to(layout.root).as_posix(),
                    "left by an interrupted registration (rebuild removes it)",
                )
            )
    for temp in sorted([*layout.root.glob(".*.tmp"), *layout.plots.glob(".*.tmp")]):
        problems.append(
            Problem(
                ProblemKind.STALE_TEMP,
                temp.relative_to(layout.root).as_posix(),
                "left by an interrupted render (rebuild removes it)",
            )
        )
    return VerifyResult(records=len(on_disk), problems=problems)


def _rows_by_seq(connection: Any, model: Any, fields: tuple[str, ...]) -> dict[int, list[tuple]]:
    """Rows of a per-record table as value tuples grouped by record, in insertion order.

    Read through the DB-API cursor (hundreds of thousands of rows); booleans come back
    as 0/1, which compare equal to the records' True/False.
    """
    table = model.__tablename__
    columns = ", ".join(f'"{field}"' for field in fields)
    sql = f"SELECT record_seq, {columns} FROM {table} ORDER BY id"
    grouped: dict[int, list[tuple]] = defaultdict(list)
    for row in connection.connection.driver_connection.execute(sql).fetchall():
        grouped[row[0]].append(row[1:])
    return grouped


def _check_rendered(layout: HistoryLayout, connection: Any) -> list[Problem]:
    from harness.render.index_json import build_index_json
    from harness.render.pages import build_readme_and_html
    from harness.render.pages import plot_state as _plot_state
    from harness.render.targets import RenderTargets
    from harness.render.targets import all_keys as _all_keys
    from harness.render.targets import latest_seq_of as _latest_seq_of
    from harness.render.timings import build_timings_csv

    targets = RenderTargets(layout.root)
    problems = []
    readme, html = build_readme_and_html(connection, targets)
    expected = {
        targets.index_json: build_index_json(connection),
        targets.timings_csv: build_timings_csv(connection),
        targets.readme: readme,
        targets.html: html,
    }
    for path, data in expected.items():
        if not path.exists():
            problems.append(
                Problem(ProblemKind.STALE_RENDER, path.name, "missing (run `harness render index`)")
            )
        elif path.read_bytes() != data:
            problems.append(
                Problem(
                    ProblemKind.STALE_RENDER,
                    path.name,
                    "differs from what the index renders (run `harness render index`)",
                )
            )
    for key in _all_keys(connection):
        state = _plot_state(connection, targets, key, _latest_seq_of(connection, key))
        if state != "current":
            problems.append(
                Problem(
                    ProblemKind.PLOT_PENDING,
                    f"plots/{key}.png",
                    f"{state} (run `harness render index`)",
                )
            )
    return problems
