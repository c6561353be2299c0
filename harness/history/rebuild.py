"""Regenerating the index and every rendered file from ``records/`` alone.

Records that fail their hash are reported and left in place (never deleted or
repaired: they are evidence of what happened). The new index is built in a
temporary file and renamed over the old one, so a crash during a rebuild leaves
the old index or the new one. Journal entries missing for stored records are
appended (marked ``recovered``) and temporary files of interrupted registrations
are removed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.history.index_db import (
    _prepare_schema,
    forget_index,
    insert_entry,
    make_engine,
    open_index,
)
from harness.history.journal import append_journal, read_journal, utc_now
from harness.history.layout import HistoryLayout
from harness.history.verify import Problem, scan_records


@dataclass
class RebuildResult:
    indexed: int = 0
    problems: list[Problem] = field(default_factory=list)
    journal_recovered: int = 0
    temps_removed: int = 0
    stored: set[str] = field(default_factory=set)  # records whose bytes match their names


def rebuild_index_locked(
    layout: HistoryLayout, progress: Callable[[int], None] | None = None
) -> RebuildResult:
    """Rebuild ``index.sqlite`` from the records; the caller holds the history lock."""
    scan = scan_records(layout, progress)
    result = RebuildResult(problems=list(scan.problems))
    ordered = sorted(
        scan.entries.values(), key=lambda e: (e.record["created_utc"], e.record["sha256"])
    )
    temp = layout.index_db.with_name(f"{layout.index_db.name}.rebuild-{os.getpid()}")
    for leftover in (temp, Path(f"{temp}-wal"), Path(f"{temp}-shm")):
        leftover.unlink(missing_ok=True)
    engine = make_engine(temp)
    try:
        _prepare_schema(engine, temp)
        with engine.begin() as connection:
            for entry in ordered:
                insert_entry(connection, entry)
    finally:
        engine.dispose()
    forget_index(layout.index_db)
    for suffix in ("-wal", "-shm"):  # the old index's WAL must never be applied to the new file
        Path(f"{layout.index_db}{suffix}").unlink(missing_ok=True)
    os.replace(temp, layout.index_db)
    from harness.history.records import fsync_dir

    fsync_dir(layout.root)
    result.indexed = len(ordered)
    result.stored = set(scan.entries)
    return result


def rebuild_history(
    history_dir: str | Path,
    *,
    plots: bool = True,
    lock_timeout: float = 600.0,
    progress: Callable[[int], None] | None = None,
) -> RebuildResult:
    """Rebuild the index, recover the journal, remove temporaries and re-render everything."""
    from harness.history.store import check_history_marker, history_lock, require_history
    from harness.render import render_all

    layout = HistoryLayout.at(history_dir)
    require_history(layout)
    with history_lock(layout, lock_timeout):
        check_history_marker(layout, create=False)
        result = rebuild_index_locked(layout, progress)
        journalled = read_journal(layout).shas
        missing = sorted(result.stored - journalled)
        append_journal(
            layout,
            [
                {
                    "recovered": True,
                    "registered_utc": utc_now(),
                    "sha256": sha,
                    "source": "history rebuild",
                }
                for sha in missing
            ],
        )
        result.journal_recovered = len(missing)
        if layout.temp.is_dir():
            for temp in layout.temp.iterdir():
                temp.unlink()
                result.temps_removed += 1
        for temp in [*layout.root.glob(".*.tmp"), *layout.plots.glob(".*.tmp")]:
            temp.unlink()
            result.temps_removed += 1
        render_all(layout, open_index(layout.index_db), plots="all" if plots else "none")
    return result
