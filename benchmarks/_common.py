"""Helpers the benchmark scripts share (imported as ``_common``: scripts run from this folder)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git_revision() -> str:
    """Short revision of the checkout these scripts belong to, or ``"unknown"``."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def gpu_times(fn, reps: int = 5, warmup: int = 1) -> list[float]:
    """Seconds of ``reps`` calls of ``fn`` by CUDA events on the current stream, after
    ``warmup`` calls and a device synchronisation."""
    import cupy

    for _ in range(warmup):
        fn()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(reps):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return times
