"""Benchmark: rendering the dashboard of a large history (issue 18, "Evidence").

Builds (or reuses) a history of N example reports (the history of
``benchmarks/history_scale.py``: 2 acquisitions x 2 formats x 2 cache states x 5 reps
= 40 trials each, 4 comparison keys), registered without rendering, then times:

- ``render_all(plots="all", full=True)``, what ``harness render index --full
  --all-plots`` does, ``--repeat`` times (best and median, wall and CPU time including
  the record-page workers'); with ``--fresh`` as a first render (no record page yet, as
  ``tests/test_dashboard_scale.py`` renders), else over the pages already there;
- each phase of it on its own, once: the record pages, per key the data, the PNG and
  the page, timings.csv, index.json, README.md with the overview.

With ``--profile FILE`` one more full render runs under cProfile and the top functions
by cumulative and by own time are printed (the statistics are written to FILE).

Usage::

    python benchmarks/dashboard_scale.py --records 10000 --work /tmp/dashboard-bench --reuse

Prints one JSON object (``DASHBOARD-BENCH {...}``) and writes ``results.json`` in the work
folder.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def build(history: Path, records: int, processes: int = 2, batch: int = 250) -> float:
    """Register ``records`` example reports without rendering anything."""
    import history_scale

    from harness.history.store import register_reports

    start = time.perf_counter()
    register_reports(history, [history_scale._report_bytes(0)], render=None)
    jobs = [
        (str(history), first, min(first + batch, records)) for first in range(1, records, batch)
    ]
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        assert sum(pool.imap_unordered(history_scale._register_batch, jobs)) == records - 1
    return time.perf_counter() - start


def _phases(history: Path) -> dict[str, float]:
    """Each phase of a full render on its own, into a scratch folder (the history untouched)."""
    from harness.history.index_db import open_index
    from harness.history.journal import journal_head
    from harness.history.layout import HistoryLayout
    from harness.render.index_json import build_index_json
    from harness.render.keys import collect_key_data, git_positions, write_key_page
    from harness.render.pages import build_readme_and_html, write_assets
    from harness.render.plots import render_plot
    from harness.render.record_pages import write_record_pages
    from harness.render.targets import RenderTargets, all_keys
    from harness.render.timings import build_timings_csv

    layout = HistoryLayout.at(history)
    engine = open_index(layout.index_db, create=False)
    phases: dict[str, float] = {}

    def timed(name: str, fn):
        start = time.perf_counter()
        result = fn()
        phases[name] = round(phases.get(name, 0.0) + time.perf_counter() - start, 3)
        return result

    with tempfile.TemporaryDirectory(prefix="dashboard-phases-") as scratch:
        targets = RenderTargets(Path(scratch))
        try:
            with engine.begin() as connection:
                write_assets(targets)
                positions = timed("git_positions", lambda: git_positions(Path.cwd()))
                for key in all_keys(connection):
                    data = timed(
                        "key_data", partial(collect_key_data, connection, key, positions=positions)
                    )
                    timed(
                        "key_png",
                        partial(render_plot, connection, key, targets.plot(key), data=data),
                    )
                    timed("key_page", partial(write_key_page, connection, targets, key, data=data))
                timed(
                    "record_pages",
                    lambda: write_record_pages(connection, layout, targets, None, rewrite=True),
                )
                timed("timings_csv", lambda: build_timings_csv(connection))
                head = journal_head(layout)
                timed("index_json", lambda: build_index_json(connection, head))
                timed(
                    "readme_and_overview", lambda: build_readme_and_html(connection, targets, head)
                )
        finally:
            engine.dispose()
    return phases


def _cpu_seconds() -> float:
    """CPU of this process and its finished children (the record-page workers)."""
    import resource

    return sum(
        usage.ru_utime + usage.ru_stime
        for usage in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    )


def _render_all(history: Path, *, fresh: bool) -> tuple[float, float]:
    """One full render; with ``fresh`` the record pages are moved aside first (and deleted
    after the timing), as in a history rendered for the first time. Returns (wall, CPU)."""
    import shutil

    from harness.history.index_db import open_index
    from harness.history.layout import HistoryLayout
    from harness.render import render_all

    pages = history / "dashboard" / "records"
    aside = history.parent / "records-aside"
    if fresh and pages.exists():
        shutil.rmtree(aside, ignore_errors=True)
        pages.rename(aside)
    layout = HistoryLayout.at(history)
    engine = open_index(layout.index_db, create=False)
    try:
        cpu = _cpu_seconds()
        start = time.perf_counter()
        render_all(layout, engine, plots="all", full=True)
        return time.perf_counter() - start, _cpu_seconds() - cpu
    finally:
        engine.dispose()
        shutil.rmtree(aside, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3, help="full renders timed")
    parser.add_argument("--work", type=Path, default=None, help="work folder (default: temporary)")
    parser.add_argument("--reuse", action="store_true", help="reuse the history in --work")
    parser.add_argument("--no-phases", action="store_true", help="skip the per-phase timings")
    parser.add_argument(
        "--fresh", action="store_true", help="render as if no record page existed yet"
    )
    parser.add_argument("--profile", type=Path, default=None, help="cProfile one more render")
    args = parser.parse_args()
    from _common import source_identity

    work = args.work or Path(tempfile.mkdtemp(prefix="dashboard-bench-"))
    history = work / "history"
    results: dict[str, object] = {
        "records": args.records,
        "revision": source_identity(),
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
    }
    if not (args.reuse and history.exists()):
        import shutil

        shutil.rmtree(history, ignore_errors=True)
        history.parent.mkdir(parents=True, exist_ok=True)
        results["build_s"] = round(build(history, args.records), 1)
    results["load_before"] = _load_average()
    timed = [_render_all(history, fresh=args.fresh) for _ in range(args.repeat)]
    if timed:
        renders = [wall for wall, _ in timed]
        results["fresh"] = args.fresh
        results["render_all_s"] = [round(s, 2) for s in renders]
        results["render_all_cpu_s"] = [round(cpu, 2) for _, cpu in timed]
        results["render_all_best_s"] = round(min(renders), 2)
        results["render_all_median_s"] = round(statistics.median(renders), 2)
        results["load_after_renders"] = _load_average()
    if not args.no_phases:
        results["phases_s"] = _phases(history)
    if args.profile is not None:
        import cProfile
        import pstats

        profile = cProfile.Profile()
        profile.enable()
        _render_all(history, fresh=args.fresh)
        profile.disable()
        profile.dump_stats(str(args.profile))
        stats = pstats.Stats(profile, stream=sys.stderr)
        stats.sort_stats("cumulative").print_stats(40)
        stats.sort_stats("tottime").print_stats(30)
    pages = [history / "index.html", *(history / "dashboard").rglob("*.html")]
    sizes = [p.stat().st_size for p in pages]
    results["pages"] = len(pages)
    results["largest_page_bytes"] = max(sizes)
    results["load_end"] = _load_average()
    (work / "results.json").write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    print("DASHBOARD-BENCH " + json.dumps(results, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
