"""Regenerating the index (and, through a hook, the rendered files) from ``records/``.

Records that fail their hash are reported and left in place (never deleted or
repaired: they are evidence of what happened). Only registered records, those in the
journal, are indexed: a record file the journal lacks (a registration killed between
the two, or a file planted by hand) is listed as unregistered and never adopted
silently; ``harness history register PATH`` adopts it explicitly. The new index is
built in a temporary file and renamed over the old one, so a crash during a rebuild
leaves the old index or the new one. Temporary files of interrupted registrations,
renders and rebuilds are removed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.exc import DatabaseError

from harness.fsio import FileWriteError, fsync_dir
from harness.history.index_db import (
    _prepare_schema,
    forget_index,
    index_write_error,
    insert_entry,
    make_engine,
    open_index,
)
from harness.history.journal import read_journal
from harness.history.layout import HistoryLayout
from harness.history.lock import DEFAULT_LOCK_TIMEOUT, locked_history
from harness.history.verify import (
    UNREGISTERED_DETAIL,
    Problem,
    ProblemKind,
    iter_leftover_files,
    scan_records,
)

#: Called under the lock after a rebuild to re-render every view.
RebuildRenderer = Callable[[HistoryLayout, Engine], None]


@dataclass
class RebuildResult:
    indexed: int = 0
    problems: list[Problem] = field(default_factory=list)
    temps_removed: int = 0
    stored: set[str] = field(default_factory=set)  # records whose bytes match their names
    unregistered: list[str] = field(default_factory=list)  # their paths, relative to the root


def rebuild_index_locked(
    layout: HistoryLayout, progress: Callable[[int], None] | None = None
) -> RebuildResult:
    """Rebuild ``index.sqlite`` from the registered records; the caller holds the lock."""
    journalled = read_journal(layout).shas  # raises when the journal is missing
    scan = scan_records(layout, progress)
    result = RebuildResult(problems=list(scan.problems))
    for sha in sorted(set(scan.entries) - journalled):
        relpath = layout.record_relpath(sha)
        result.unregistered.append(relpath)
        result.problems.append(Problem(ProblemKind.UNREGISTERED, relpath, UNREGISTERED_DETAIL))
    ordered = sorted(
        (entry for sha, entry in scan.entries.items() if sha in journalled),
        key=lambda e: (e.record["created_utc"], e.record["sha256"]),
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
    except DatabaseError as exc:
        for leftover in (temp, Path(f"{temp}-wal"), Path(f"{temp}-shm")):
            leftover.unlink(missing_ok=True)
        raise index_write_error(temp, "rebuilding the index", exc) from exc
    finally:
        engine.dispose()
    forget_index(layout.index_db)
    try:
        for suffix in ("-wal", "-shm"):  # the old index's WAL must never apply to the new file
            Path(f"{layout.index_db}{suffix}").unlink(missing_ok=True)
        os.replace(temp, layout.index_db)
        fsync_dir(layout.root)
    except OSError as exc:
        raise FileWriteError(layout.index_db, "replacing the index by its rebuild", exc) from exc
    result.indexed = len(ordered)
    result.stored = set(scan.entries)
    return result


def rebuild_history(
    history_dir: str | Path,
    *,
    render: RebuildRenderer | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    progress: Callable[[int], None] | None = None,
) -> RebuildResult:
    """Rebuild the index, remove leftover temporary files, then call ``render``."""
    with locked_history(history_dir, timeout=lock_timeout) as layout:
        result = rebuild_index_locked(layout, progress)
        for leftover in iter_leftover_files(layout):
            try:
                leftover.path.unlink()
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise FileWriteError(leftover.path, "removing a leftover file", exc) from exc
            result.temps_removed += 1
        if render is not None:
            render(layout, open_index(layout.index_db))
    return result
