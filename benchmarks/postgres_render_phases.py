"""Benchmark: where a first ``render index --out DIR --history-url URL`` spends its time.

Runs the command in this process (``harness.cli.main``) into a new folder, with the
render's phases timed (wall and this process's CPU of each call: the snapshot's record
export and row copies, each key's data, plot and page, timings.csv, index.json, the
wait for the record-page workers), then prints the whole wall time, the CPU of this
process and of its worker processes, both peak RSS figures and the load average before
and after, the user and system split, and the CPU of the local ``postgres`` processes
(the server's share). ``--profile FILE`` also writes a cProfile of this process.

The server is one filled by ``history_postgres_scale.py`` (``--url``); run it with
``PYTHONPATH`` naming the tree to measure (e.g. a ``git archive`` of an older revision)::

    PYTHONPATH=$PWD python benchmarks/postgres_render_phases.py \
        --url 'postgresql+psycopg://harness@/bench?host=/var/tmp/pg' --out /var/tmp/dash1
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import sys
import time
from pathlib import Path

PHASES = {
    "harness.history.snapshot": ["take_snapshot", "_copy_rows"],
    "harness.render.update": [
        "collect_key_data",
        "refresh_change_points",
        "render_plot",
        "write_key_page",
        "write_timings_csv",
        "write_index_json",
        "start_record_pages",
        "_write_index_pages",
        "remove_stale_pages",
    ],
}


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _server_cpu() -> float | None:
    """CPU seconds (user and system) of every ``postgres`` process on this machine so far,
    with their reaped children's (the postmaster's: a backend that exited counts): the
    local server's share of a render is the difference around it, other clients' work
    meanwhile included. None off Linux."""
    proc = Path("/proc")
    if not (proc / "stat").exists():
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        if name == "postgres":
            values = fields.split()
            # utime, stime, cutime, cstime: fields 14-17 of proc(5), 12-15 after the name
            total += sum(int(v) for v in values[11:15])
    return total / ticks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--out", type=Path, required=True, help="a folder that does not exist")
    parser.add_argument("--git-repo", default=".")
    parser.add_argument("--profile", help="write a cProfile of this process here")
    args = parser.parse_args()
    if args.out.exists():
        parser.error(f"{args.out} exists: a first render needs a new folder")

    import importlib

    from harness.cli import main as harness_main
    from harness.render import record_pages

    start = time.perf_counter()
    phases: list[tuple[str, float, float, float]] = []

    def timed(owner, name: str, label: str) -> None:
        function = getattr(owner, name)

        @functools.wraps(function)
        def wrapper(*a, **k):
            began, cpu = time.perf_counter(), time.process_time()
            try:
                return function(*a, **k)
            finally:
                phases.append((label, began - start, time.perf_counter() - began,
                               time.process_time() - cpu))  # fmt: skip

        setattr(owner, name, wrapper)

    for module_name, names in PHASES.items():
        module = importlib.import_module(module_name)
        for name in names:
            timed(module, name, name)
    timed(record_pages.RecordPages, "finish", "record pages: wait for the workers")

    profile = None
    if args.profile:
        import cProfile

        profile = cProfile.Profile()
        profile.enable()
    before = _load()
    server_before = _server_cpu()
    start = time.perf_counter()
    code = harness_main(["render", "index", "--out", str(args.out), "--history-url", args.url,
                         "--git-repo", args.git_repo])  # fmt: skip
    wall = time.perf_counter() - start
    if profile is not None:
        profile.disable()
        profile.dump_stats(args.profile)
    me = resource.getrusage(resource.RUSAGE_SELF)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_after = _server_cpu()
    print(
        f"exit {code}; wall {wall:.1f} s; CPU {me.ru_utime + me.ru_stime:.1f} s in this "
        f"process, {workers.ru_utime + workers.ru_stime:.1f} s in workers; peak RSS "
        f"{me.ru_maxrss // 1024} MB (this process), {workers.ru_maxrss // 1024} MB (largest "
        f"worker); load average {before} before, {_load()} after"
    )
    server = (
        "not measured"
        if server_before is None or server_after is None
        else f"{server_after - server_before:.1f} s"
    )
    print(
        f"CPU user/system: this process {me.ru_utime:.1f}/{me.ru_stime:.1f} s, workers "
        f"{workers.ru_utime:.1f}/{workers.ru_stime:.1f} s; local postgres processes {server}"
    )
    print("phase: started at s, wall s, CPU s (this process)")
    for label, began, seconds, cpu in phases:
        print(f"  {label}: {began:.1f}, {seconds:.2f}, {cpu:.2f}")
    return code


if __name__ == "__main__":
    sys.exit(main())
