"""One instrumented load (``--profile-reload``), kept apart from the statistics.

A profiler hook records, relative to the start of the load: the intervals of every
``quantem`` Python function call on the host (aggregated per function, plus the
first :data:`MAX_INTERVALS` raw intervals), and per worker thread the intervals of
the read calls (``os.pread``/``os.preadv``/``readinto``) the load made, plus the
process IO counters. The hook slows the load, which is why its time never enters a
summary. Reads done inside compiled code (numba, C++) or through a memory map (the CPU
``.qem`` reader) are invisible to it; the process IO counters and the page-fault counts
still count them.
"""

from __future__ import annotations

import resource
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from harness.run import proc_io

MAX_INTERVALS = 5000
READ_CALLS = frozenset({"pread", "preadv", "readinto", "read", "readv"})


def profile_call(load: Callable[[], Any], *, barrier: Callable[[], None], label: dict) -> dict:
    """Run ``load()`` under the profiler; release its result; return the profile record."""
    origin = time.perf_counter_ns()
    stacks: dict[int, list[tuple[str, int]]] = {}
    calls: dict[str, list[float]] = {}
    call_intervals: list[dict] = []
    read_intervals: list[dict] = []
    read_starts: dict[int, int] = {}
    lock = threading.Lock()

    def hook(frame, event, arg):
        now = time.perf_counter_ns()
        tid = threading.get_ident()
        if event in ("c_call", "c_return", "c_exception"):
            name = getattr(arg, "__name__", "")
            if name not in READ_CALLS:
                return
            if event == "c_call":
                read_starts[tid] = now
            elif tid in read_starts:
                start = read_starts.pop(tid)
                with lock:
                    if len(read_intervals) < MAX_INTERVALS:
                        read_intervals.append(
                            {
                                "thread": tid,
                                "call": name,
                                "start": (start - origin) / 1e9,
                                "end": (now - origin) / 1e9,
                            }
                        )
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("quantem"):
            return
        stack = stacks.setdefault(tid, [])
        if event == "call":
            stack.append((f"{module}.{frame.f_code.co_name}", now))
        elif event == "return" and stack:
            name, start = stack.pop()
            with lock:
                entry = calls.setdefault(name, [0, 0.0])
                entry[0] += 1
                entry[1] += (now - start) / 1e9
                if len(call_intervals) < MAX_INTERVALS:
                    call_intervals.append(
                        {
                            "thread": tid,
                            "name": name,
                            "depth": len(stack),
                            "start": (start - origin) / 1e9,
                            "end": (now - origin) / 1e9,
                        }
                    )

    set_all = getattr(threading, "setprofile_all_threads", None)  # Python >= 3.12
    faults_before = resource.getrusage(resource.RUSAGE_SELF)
    before = proc_io.read_io_counters()
    barrier()
    start_ns = time.perf_counter_ns()
    if set_all is not None:
        set_all(hook)
    else:
        threading.setprofile(hook)
    sys.setprofile(hook)
    try:
        result = load()
        barrier()
    finally:
        sys.setprofile(None)
        if set_all is not None:
            set_all(None)
        else:
            threading.setprofile(None)
    seconds = (time.perf_counter_ns() - start_ns) / 1e9
    delta = proc_io.read_io_counters() - before
    faults_after = resource.getrusage(resource.RUSAGE_SELF)
    try:
        shape = [int(n) for n in result.shape]
    finally:
        result.close()
    threads = sorted({r["thread"] for r in read_intervals})
    thread_names = {t: f"worker-{i}" for i, t in enumerate(threads)}
    for record in read_intervals:
        record["thread"] = thread_names[record["thread"]]
    for record in call_intervals:
        record["thread"] = thread_names.get(record["thread"], "host")
    return {
        **label,
        "seconds_instrumented": seconds,
        "shape": shape,
        "io": delta.as_dict(),
        # memory-mapped readers (the CPU .qem reader) read by page faults, not read calls
        "page_faults": {
            "major": faults_after.ru_majflt - faults_before.ru_majflt,
            "minor": faults_after.ru_minflt - faults_before.ru_minflt,
        },
        "calls": {name: {"count": c, "seconds": s} for name, (c, s) in sorted(calls.items())},
        "call_intervals": call_intervals,
        "read_intervals": read_intervals,
        "read_threads": len(threads),
        "existing_threads_traced": set_all is not None,
        "note": "instrumented: slower than an untimed load; not part of any statistic",
    }
