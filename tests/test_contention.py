"""Contention is others' activity, never the harness's own (issue 40, defect 4)."""

from __future__ import annotations

import subprocess
import sys
import time

from harness.run.contention import THRESHOLDS, assess_contention, collect_contention_sample

BUSY = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass\n"


def test_back_to_back_runs_on_an_idle_host_are_quiet() -> None:
    # Right after the harness's own previous run the 1-minute load average still holds
    # it (1.03-1.09 per core in the back-to-back runs, every other process at 0%);
    # the sample's own PSI window and the other processes show an idle host.
    after_own_run = {
        "cores": 2,
        "load1": 2.18,
        "procs_running": 1,
        "own_running": 1,
        "cpu_pressure": {"some_avg10": 35.0, "some_window": 0.0},
        "io_pressure": {"some_avg10": 12.0, "some_window": 0.0},
        "top_processes": [{"pid": 4242, "name": "sshd", "cpu_percent": 0.0}],
        "gpu": None,
    }
    assert assess_contention({"before": after_own_run, "after": after_own_run}) == []
    assert "load1_per_core" not in THRESHOLDS
    # others' activity still counts: another process busy, or others' runnable tasks
    busy = dict(after_own_run, top_processes=[{"pid": 77, "name": "make", "cpu_percent": 95.0}])
    assert assess_contention({"after": busy}) == ["after: CPU % of PID 77 (make) 95 > 50"]
    queued = dict(after_own_run, procs_running=9, own_running=3)
    assert assess_contention({"after": queued}) == ["after: other runnable tasks per core 3 > 1.5"]


def test_the_harness_own_busy_children_are_left_out_of_the_sample() -> None:
    children = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2)]
    try:
        time.sleep(0.3)
        sample = collect_contention_sample()
    finally:
        for child in children:
            child.kill()
            child.wait()
    ours = {child.pid for child in children}
    # this host is shared, so whether it is quiet depends on others; what must hold is
    # that our own children are neither among "other" processes nor in others' run queue
    assert not ours & {p["pid"] for p in sample["top_processes"]}
    assert sample["own_running"] >= 1 + len(children)  # this process and both children
    judged = dict(sample, cpu_pressure=None, io_pressure=None, top_processes=[])
    reasons = assess_contention({"after": judged})
    others = sample["procs_running"] - sample["own_running"]
    assert bool(reasons) == (others / sample["cores"] > THRESHOLDS["procs_running_per_core"])
