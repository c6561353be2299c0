"""The timed stages of one scale: a folder history of N synthetic records.

Each stage returns what it produced so that the caller checks it outside the timer:
a registration stores a new record, a query finds the record asked for, a render leaves
an index.json listing every record, a verify finds no problem, a PostgreSQL
registration stores a new record on the server.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.history.backend import load_reference
from harness.history.folder_history import FolderHistory
from harness.history.index_db import open_index
from harness.history.journal import utc_now
from harness.history.layout import HistoryLayout
from harness.history.store import register_reports
from harness.history.verify import verify_history
from harness.render import registration_renderer, render_all
from harness.report import dump_report
from harness.testing import make_example_report

#: The comparison groups the synthetic records are spread over (dashboard keys).
GROUPS = ("nvme-a", "nvme-b", "raid-c", "nfs-d")
#: Records registered per call while building (validation is batched; one lock each).
BUILD_BATCH = 500


def synthetic_report(index: int) -> bytes:
    """Record ``index`` of the synthetic history: an example report (2 acquisitions x 2
    formats x 2 cache states x 5 reps), its storage one of :data:`GROUPS`, a distinct time."""
    minutes = index
    created = (
        f"2026-{1 + (minutes // 40000) % 12:02d}-{1 + (minutes // 1440) % 28:02d}"
        f"T{(minutes // 60) % 24:02d}:{minutes % 60:02d}:00Z"
    )
    return dump_report(
        make_example_report(index, storage_id=GROUPS[index % len(GROUPS)], created_utc=created)
    )


def _register_range(job: tuple[str, int, int]) -> list[str]:
    history, first, stop = job
    batch = [synthetic_report(i) for i in range(first, stop)]
    return [result.sha256 for result in register_reports(history, batch, render=None)]


def build_history(history: Path, records: int, processes: int = 1) -> list[str]:
    """Register records 0..records-1 without rendering; their SHA-256s (the first batch
    first, the rest in batch order). With ``processes`` > 1 the batches are built and
    validated in that many forked processes; the history lock serialises their writes."""
    jobs = [
        (str(history), first, min(first + BUILD_BATCH, records))
        for first in range(0, records, BUILD_BATCH)
    ]
    stored = _register_range(jobs[0])  # creates the history before any worker opens it
    if processes <= 1 or len(jobs) == 1:
        return stored + [sha for job in jobs[1:] for sha in _register_range(job)]
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        return stored + [sha for batch in pool.map(_register_range, jobs[1:]) for sha in batch]


def records_digest(sha256s: list[str]) -> dict:
    """The scale's identity: SHA-256 of its records' sorted SHA-256s (same generator, same
    N: same digest), in the report's digest shape."""
    joined = "\n".join(sorted(sha256s)).encode("ascii")
    return {
        "sha256": hashlib.sha256(joined).hexdigest(),
        "dtype": "sha256-list",
        "shape": [len(sha256s)],
    }


@dataclass
class ScaleStages:
    """The stages of one scale; ``next_index`` numbers the records each round adds."""

    history: Path
    next_index: int
    postgres_url: str | None = None

    def register(self) -> Callable[[], object]:
        data = synthetic_report(self.next_index)
        self.next_index += 1
        renderer = registration_renderer("defer")
        return lambda: register_reports(self.history, [data], render=renderer)[0]

    def query(self, sha256: str) -> Callable[[], object]:
        return lambda: load_reference(FolderHistory(self.history), sha256[:16])

    def render_full(self, plots: str = "none") -> Callable[[], object]:
        """Every view rewritten (``harness render index --full``); ``plots="all"`` redraws
        each key's plot too (matplotlib, seconds per key whatever the history's size)."""

        def render() -> dict:
            layout = HistoryLayout.at(self.history)
            engine = open_index(layout.index_db, create=False)
            try:
                render_all(layout, engine, plots=plots, full=True)
            finally:
                engine.dispose()
            return json.loads((self.history / "index.json").read_text(encoding="utf-8"))

        return render

    def verify(self) -> Callable[[], object]:
        return lambda: verify_history(self.history)

    def postgres_register(self) -> Callable[[], object]:
        from harness.history.opening import open_history

        data = synthetic_report(self.next_index)
        self.next_index += 1
        history = open_history(self.postgres_url)

        def register():
            try:
                return history.register(data, source="self-benchmark", registered_utc=utc_now())
            finally:
                history.close()

        return register
