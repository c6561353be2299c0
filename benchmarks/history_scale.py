"""Benchmark: the evidence history at scale (issue 6, "Performance").

Builds a history of N records (default 10,000; example reports of 2 acquisitions x
2 formats x 2 cache states x 5 reps = 40 trials each, spread over 4 comparison
groups), then measures:

- registering one more report in-process (``register_reports``), median over
  ``--repeat`` registrations, including re-rendering index.json, timings.csv,
  README.md and index.html, with the default plot policy (``auto``: at this size the
  group's plot is left pending), with ``defer``, and with the plot redrawn (``now``);
- the same through the CLI (``harness history register``, a fresh process, default policy);
- ``harness render index`` (the default: README/HTML, pending plots, index.json and
  timings.csv only where they lag), ``--full`` (rewrites everything but current plots)
  and ``--full --all-plots``;
- ``harness history verify``.

Usage::

    python benchmarks/history_scale.py --records 10000 --work /tmp/history-bench

Prints a table and writes ``results.json`` in the work folder.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GROUPS = ("nvme-a", "nvme-b", "raid-c", "nfs-d")


def _report_bytes(index: int) -> bytes:
    from harness.report import dump_report
    from harness.testing import make_example_report

    minutes = index
    created = f"2026-{1 + (minutes // 40000) % 12:02d}-{1 + (minutes // 1440) % 28:02d}T{(minutes // 60) % 24:02d}:{minutes % 60:02d}:00Z"
    return dump_report(
        make_example_report(index, storage_id=GROUPS[index % len(GROUPS)], created_utc=created)
    )


def _progress(total: int, description: str):
    if sys.stdout.isatty():
        from rich.progress import Progress

        progress = Progress()
        progress.start()
        task = progress.add_task(description, total=total)
        return progress, task
    return None, None


def _register_batch(args: tuple[str, int, int]) -> int:
    from harness.history.store import register_reports

    history, first, stop = args
    register_reports(history, [_report_bytes(i) for i in range(first, stop)], render=None)
    return stop - first


def build_history(history: Path, records: int, batch: int = 200) -> float:
    """Register ``records`` reports from two processes (validation runs in parallel; the
    history lock serialises the writes), then render everything once."""
    import multiprocessing

    from harness.history.index_db import open_index
    from harness.history.layout import HistoryLayout
    from harness.history.store import register_reports
    from harness.render import render_all

    start = time.perf_counter()
    register_reports(history, [_report_bytes(0)], render=None)
    jobs = [
        (str(history), first, min(first + batch, records)) for first in range(1, records, batch)
    ]
    progress, task = _progress(records, "building history")
    with multiprocessing.get_context("fork").Pool(os.cpu_count() or 2) as pool:
        for done in pool.imap_unordered(_register_batch, jobs):
            if progress:
                progress.update(task, advance=done)
    if progress:
        progress.stop()
    layout = HistoryLayout.at(history)
    render_all(layout, open_index(layout.index_db), plots="all")
    return time.perf_counter() - start


def _cli(*args: str) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "harness", *args], capture_output=True, text=True, check=False
    )
    return time.perf_counter() - start, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=15, help="registrations timed per variant")
    parser.add_argument(
        "--work", type=Path, default=None, help="work folder (default: a temporary one)"
    )
    parser.add_argument("--reuse", action="store_true", help="reuse an existing history in --work")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="history-bench-"))
    history = work / "history"
    results: dict[str, object] = {
        "records": args.records,
        "python": sys.version.split()[0],
        "cores": os.cpu_count(),
    }
    if not (args.reuse and history.exists()):
        shutil.rmtree(history, ignore_errors=True)
        results["build_seconds"] = round(build_history(history, args.records), 1)
    from harness.history.store import register_reports
    from harness.render import registration_renderer

    # seeds never used before in this history, so every timed registration stores a new record
    base = args.records + 1_000_000 + time.time_ns() // 1000 % 1_000_000_000
    extra = [_report_bytes(base + i) for i in range(4 * args.repeat + 2)]
    # warm imports and the engine cache
    register_reports(history, [extra.pop()], render=registration_renderer("defer"))
    for policy, name in (("auto", "register_one"), ("defer", "register_one_deferred")):
        timings = []
        for _ in range(args.repeat):
            data = extra.pop()
            start = time.perf_counter()
            (result,) = register_reports(history, [data], render=registration_renderer(policy))
            timings.append(time.perf_counter() - start)
            assert result.created, "timed registrations must store new records"
        results[f"{name}_ms_median"] = round(statistics.median(timings) * 1000, 1)
        results[f"{name}_ms_max"] = round(max(timings) * 1000, 1)
    timings = []
    for _ in range(args.repeat):
        data = extra.pop()
        start = time.perf_counter()
        (result,) = register_reports(history, [data], render=registration_renderer("now"))
        timings.append(time.perf_counter() - start)
        assert result.created
    results["register_one_with_plot_ms_median"] = round(statistics.median(timings) * 1000, 1)
    cli = []
    for _ in range(max(3, args.repeat // 3)):
        path = work / "one.json"
        path.write_bytes(extra.pop())
        seconds, completed = _cli("history", "register", str(path), "--history-dir", str(history))
        assert completed.returncode == 0 and completed.stdout.startswith("stored"), completed
        cli.append(seconds)
    results["cli_register_one_s_median"] = round(statistics.median(cli), 2)
    seconds, completed = _cli("render", "index", "--history-dir", str(history))
    assert completed.returncode == 0, completed.stderr
    results["render_index_s"] = round(seconds, 2)
    seconds, completed = _cli("render", "index", "--history-dir", str(history), "--full")
    assert completed.returncode == 0, completed.stderr
    results["render_index_full_s"] = round(seconds, 2)
    seconds, completed = _cli(
        "render", "index", "--history-dir", str(history), "--full", "--all-plots"
    )
    assert completed.returncode == 0, completed.stderr
    results["render_index_full_all_plots_s"] = round(seconds, 2)
    seconds, completed = _cli("history", "verify", "--history-dir", str(history))
    results["verify_s"] = round(seconds, 2)
    import resource

    # largest resident set of any child so far; verify is the biggest of them
    results["max_child_rss_mb"] = round(
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    )
    results["verify_exit"] = completed.returncode
    results["verify_summary"] = (
        completed.stdout.strip().splitlines()[-1] if completed.stdout else completed.stderr
    )
    results["history_bytes"] = sum(p.stat().st_size for p in history.rglob("*") if p.is_file())
    (work / "results.json").write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    for key, value in results.items():
        print(f"{key:34} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
