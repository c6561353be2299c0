"""Registering reports into a history: validate, store, journal, index, render.

Every report is parsed and validated before anything is written, so a bad report
leaves the history untouched. The rest runs under the history's file lock, so any
number of processes may register at once: records are written first (durable,
content-addressed), then journalled, then indexed in one transaction, then the
rendered files are brought up to date incrementally.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout
from sqlalchemy import Engine, select

from harness.errors import HistoryError
from harness.history.entries import IndexEntry, derive_entry
from harness.history.index_db import (
    IndexNeedsRebuild,
    IndexUnreadable,
    RecordRow,
    insert_entry,
    open_index,
)
from harness.history.journal import append_journal, utc_now
from harness.history.layout import (
    HISTORY_FORMAT,
    HISTORY_FORMAT_VERSION,
    LOCK_NAME,
    MARKER_NAME,
    MARKER_TEMP_NAME,
    HistoryLayout,
)
from harness.history.records import ensure_dir, fsync_dir, sha256_bytes, write_record
from harness.render import check_plot_policy
from harness.report import (
    migrate_report,
    parse_report_json,
    read_report_bytes,
    schema_version_of,
    validate_report,
)

#: Seconds to wait for another process's registration before giving up.
DEFAULT_LOCK_TIMEOUT = 600.0


@dataclass(frozen=True)
class PreparedReport:
    """A report read and validated, not yet stored."""

    data: bytes
    sha256: str
    doc: dict[str, Any]
    schema_version: int
    source: str


@dataclass(frozen=True)
class RegisterResult:
    """What registration did with one report."""

    sha256: str
    path: Path
    source: str
    created: bool
    comparison_key: str

    @property
    def message(self) -> str:
        if self.created:
            return f"stored {self.sha256} from {self.source}"
        return f"already stored {self.sha256} (identical bytes from {self.source}; nothing written)"


def prepare_report(source: bytes | str | Path, *, name: str | None = None) -> PreparedReport:
    """Read, validate and migrate (in memory) one report; raises ReportValidationError."""
    data, label = read_report_bytes(source, name=name)
    doc = parse_report_json(data, name=label)
    version = schema_version_of(doc, label)
    doc = migrate_report(doc, version, name=label)
    validate_report(doc, name=label)
    return PreparedReport(
        data=data, sha256=sha256_bytes(data), doc=doc, schema_version=version, source=label
    )


def entry_for(layout: HistoryLayout, prepared: PreparedReport) -> IndexEntry:
    return derive_entry(
        prepared.doc,
        sha256=prepared.sha256,
        path=layout.record_relpath(prepared.sha256),
        size_bytes=len(prepared.data),
        schema_version=prepared.schema_version,
    )


@contextmanager
def history_lock(layout: HistoryLayout, timeout: float = DEFAULT_LOCK_TIMEOUT) -> Iterator[None]:
    """Hold the history's registration lock (across processes)."""
    ensure_dir(layout.root)
    lock = FileLock(str(layout.lock), timeout=timeout)
    try:
        with lock:
            yield
    except Timeout as exc:
        raise HistoryError(
            f"{layout.lock}: another process held the history lock for {timeout:g} s"
        ) from exc


def check_history_marker(layout: HistoryLayout, *, create: bool) -> None:
    """Check (or write) ``history.json``; refuse newer layouts and foreign folders."""
    if layout.marker.exists():
        try:
            marker = json.loads(layout.marker.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise HistoryError(f"{layout.marker}: unreadable history marker: {exc}") from exc
        if not isinstance(marker, dict) or marker.get("format") != HISTORY_FORMAT:
            raise HistoryError(f"{layout.marker}: not a quantem-harness history marker")
        version = marker.get("version")
        if not isinstance(version, int) or version > HISTORY_FORMAT_VERSION:
            raise HistoryError(
                f"{layout.root}: history layout version {version!r} is newer than this harness "
                f"reads ({HISTORY_FORMAT_VERSION}); upgrade quantem-harness"
            )
        return
    if not create:
        raise HistoryError(f"{layout.root}: not a history (no {layout.marker.name})")
    foreign = (
        [p.name for p in layout.root.iterdir() if p.name not in _CREATION_NAMES]
        if layout.root.exists()
        else []
    )
    if foreign:
        raise HistoryError(
            f"{layout.root}: folder is not empty and is not a history (no {layout.marker.name}); "
            "choose an empty or new folder"
        )
    ensure_dir(layout.root)
    text = (
        json.dumps({"format": HISTORY_FORMAT, "version": HISTORY_FORMAT_VERSION}, sort_keys=True)
        + "\n"
    )
    temp = layout.marker_temp
    temp.write_text(text, encoding="ascii")
    temp.replace(layout.marker)
    fsync_dir(layout.root)


def require_history(layout: HistoryLayout) -> None:
    """Refuse, before touching anything, a folder that is not an existing history."""
    if not layout.root.is_dir():
        raise HistoryError(f"{layout.root}: no such history folder")
    if not layout.marker.exists():
        raise HistoryError(f"{layout.root}: not a history (no {layout.marker.name})")


_CREATION_NAMES = frozenset({LOCK_NAME, MARKER_NAME, MARKER_TEMP_NAME})


def _refuse_foreign_folder(layout: HistoryLayout) -> None:
    """Refuse a non-empty folder without a marker before the lock file is created in it."""
    if not layout.root.is_dir():
        return
    # Another process may be creating this history right now: its lock and the marker's
    # temporary file are the only things it writes before the marker itself. So list the
    # folder first and look for the marker afterwards; checking the marker first left a
    # window in which the creator wrote the marker and then its index between the two
    # looks, and the new index looked foreign.
    foreign = [p.name for p in layout.root.iterdir() if p.name not in _CREATION_NAMES]
    if foreign and not layout.marker.exists():
        raise HistoryError(
            f"{layout.root}: folder is not empty and is not a history (no {layout.marker.name}); "
            "choose an empty or new folder"
        )


def open_history_index(layout: HistoryLayout) -> Engine:
    """Open the index; an old (unmigratable) or damaged index is rebuilt from the records.

    The caller holds the history lock.
    """
    try:
        return open_index(layout.index_db)
    except (IndexNeedsRebuild, IndexUnreadable):
        from harness.history.rebuild import rebuild_index_locked

        rebuild_index_locked(layout)
        return open_index(layout.index_db)


def register_reports(
    history_dir: str | Path,
    sources: Iterable[bytes | str | Path],
    *,
    names: Sequence[str] | None = None,
    render: bool = True,
    plots: str = "auto",
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
) -> list[RegisterResult]:
    """Register reports into the history at ``history_dir`` (created when new).

    Parameters
    ----------
    sources
        Paths of report files, or report bytes.
    names
        Labels for byte sources in messages and the journal.
    render
        Bring ``index.json``, ``timings.csv``, ``README.md`` and ``index.html`` up to date.
    plots
        What to do with the plots of the comparison keys that gained records:
        ``"now"`` redraws them; ``"defer"`` marks them pending in README.md for
        ``harness render index``; ``"auto"`` (default) redraws a key's plot while it
        holds at most ``PLOT_INLINE_RECORDS`` records and defers the larger ones,
        whose redraw alone would take longer than the registration (see
        ``docs/history-format.md``).

    Raises
    ------
    ReportValidationError
        When any report is invalid; nothing is written then.
    HistoryError
        When the folder is not a history, or a stored record was tampered with.
    """
    sources = list(sources)
    labels = list(names) if names is not None else [None] * len(sources)
    if len(labels) != len(sources):
        raise ValueError("names must match sources one to one")
    check_plot_policy(plots)
    prepared = [prepare_report(source, name=label) for source, label in zip(sources, labels)]
    layout = HistoryLayout.at(history_dir)
    _refuse_foreign_folder(layout)
    with history_lock(layout, lock_timeout):
        check_history_marker(layout, create=True)
        engine = open_history_index(layout)
        return _register_locked(layout, engine, prepared, render=render, plots=plots)


def _register_locked(
    layout: HistoryLayout,
    engine: Engine,
    prepared: list[PreparedReport],
    *,
    render: bool,
    plots: str,
) -> list[RegisterResult]:
    results: list[RegisterResult] = []
    journal_entries = []
    to_index: dict[str, PreparedReport] = {}
    for report in prepared:
        written = write_record(layout, report.data)
        if written.created:
            journal_entries.append(
                {"registered_utc": utc_now(), "sha256": written.sha256, "source": report.source}
            )
        to_index.setdefault(written.sha256, report)
        results.append(
            RegisterResult(
                sha256=written.sha256,
                path=written.path,
                source=report.source,
                created=written.created,
                comparison_key="",
            )
        )
    append_journal(layout, journal_entries)
    new_seqs: list[int] = []
    keys: dict[str, str] = {}
    with engine.begin() as connection:
        present = set(
            connection.execute(
                select(RecordRow.sha256).where(RecordRow.sha256.in_(list(to_index)))
            ).scalars()
        )
        for sha256, report in to_index.items():
            entry = entry_for(layout, report)
            keys[sha256] = entry.record["comparison_key"]
            if (
                sha256 not in present
            ):  # also indexes a stored record whose indexing a crash cut short
                new_seqs.append(insert_entry(connection, entry))
    if render:
        from harness.render import render_after_registration

        render_after_registration(layout, engine, new_seqs=new_seqs, plots=plots)
    return [RegisterResult(r.sha256, r.path, r.source, r.created, keys[r.sha256]) for r in results]
