"""Memory of a full-size io-scale run: baseline and peak host RSS, CUDA pool peak, medians.

Writes (or reuses) the campaign data with ``io_scale_campaign.prepare``, then runs
io-scale in this process (conversion workflow included unless ``--load-only``) and
prints the process's RSS before the run, its peak RSS, the CUDA pool peaks the report
recorded, the decoded size of the largest acquisition, and the median seconds of every
cell (warm = cached). Run it before and after a change, back to back, on the same data:

    python benchmarks/io_scale_memory.py /var/tmp/io-scale-data --backend cuda --out /var/tmp/mem-a
    python benchmarks/io_scale_memory.py /var/tmp/io-scale-data --backend cuda --out /var/tmp/mem-b

Write the data first (``python benchmarks/io_scale_campaign.py DATA_DIR``): the peak RSS is
the process's lifetime peak, so writing data in the same process would hide the run's.
Targets (issue 10): peak RSS at most 4 GiB above the baseline; CUDA pool peak at most
1.1x one decoded array.

The report samples the pool after each load; ``--trace-pool`` (CUDA) also wraps CuPy's
allocator to record the true in-use peak, whenever it happens, and prints every
allocation of 1 GiB or more with its caller and what the pool held then (the wrapper costs
a Python call per allocation, so keep it off when timing).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
from pathlib import Path

import numpy as np
from _common import git_revision
from io_scale_campaign import CAMPAIGN_DTYPES, prepare

from harness.run.io_scale import run_io_scale
from harness.run.io_scale_config import IoScaleConfig

GIB = 1 << 30


class PoolTrace:
    """CuPy's default pool behind a wrapper that keeps the true in-use peak."""

    def __init__(self) -> None:
        import cupy

        self.cupy = cupy
        self.pool = cupy.get_default_memory_pool()
        self.peak = 0
        self.large: list[str] = []
        cupy.cuda.set_allocator(self.malloc)

    def malloc(self, size: int):
        import traceback

        memory = self.pool.malloc(size)
        used = self.pool.used_bytes()
        self.peak = max(self.peak, used)
        if size >= GIB:
            stack = traceback.extract_stack()[-8:-1]
            where = " < ".join(f"{Path(f.filename).name}:{f.lineno}" for f in reversed(stack))
            self.large.append(
                f"{size / GIB:.2f} GiB (in use then {used / GIB:.2f}, reserved "
                f"{self.pool.total_bytes() / GIB:.2f}) from {where}"
            )
        return memory

    def close(self) -> None:
        self.cupy.cuda.set_allocator(self.pool.malloc)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="a new --output-dir")
    parser.add_argument("--backend", default="cuda", choices=("cpu", "cuda"))
    parser.add_argument("--scan", type=int, nargs=2, default=(512, 512))
    parser.add_argument("--detector", type=int, nargs=2, default=(192, 192))
    parser.add_argument("--dtypes", nargs="+", default=list(CAMPAIGN_DTYPES))
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--load-only", action="store_true", help="skip the timed conversion")
    parser.add_argument("--trace-pool", action="store_true", help="record the true pool peak")
    args = parser.parse_args(argv)
    manifest = prepare(args.data_dir, tuple(args.scan), tuple(args.detector), args.dtypes, None)
    baseline_rss = _rss_bytes()
    trace = PoolTrace() if args.trace_pool and args.backend == "cuda" else None
    outcome = run_io_scale(
        IoScaleConfig(
            root=args.data_dir,
            manifest=manifest,
            backend=args.backend,
            storage_id="io-scale-memory",
            output_dir=args.out,
            reps=args.reps,
            load_only=args.load_only,
            progress=False,
            command=["benchmarks/io_scale_memory.py", *(argv or sys.argv[1:])],
        )
    )
    doc = outcome.report
    memory = doc["memory"]
    decoded = max(
        int(np.prod(a["shape"])) * np.dtype(a["dtype"]).itemsize for a in doc["acquisitions"]
    )
    pool = memory["gpu_reserved_peak_bytes"]
    print(f"revision {git_revision()}  backend {args.backend}  exit {outcome.exit_code}")
    print(f"baseline RSS        {baseline_rss / GIB:8.2f} GiB")
    peak = memory["peak_rss_bytes"]
    print(f"peak RSS            {peak / GIB:8.2f} GiB  (+{(peak - baseline_rss) / GIB:.2f})")
    print(f"largest decoded     {decoded / GIB:8.2f} GiB")
    if pool is not None:
        used = memory["gpu_allocated_peak_bytes"]
        print(f"CUDA pool reserved  {pool / GIB:8.2f} GiB  ({pool / decoded:.2f}x one array)")
        print(f"CUDA pool in use    {used / GIB:8.2f} GiB  ({used / decoded:.2f}x one array)")
    if trace is not None:
        trace.close()
        print(f"CUDA pool true peak {trace.peak / GIB:8.2f} GiB  ({trace.peak / decoded:.2f}x one"
              " array, every allocation)")  # fmt: skip
        for line in trace.large:
            print(f"  allocation {line}")
    for s in doc["summaries"]:
        median = "-" if s["median"] is None else f"{s['median']:.3f} s"
        print(f"  {s['acquisition']:40s} {s['format']:5s} {s['cache_state']:7s} {median}")
    for failure in doc["status"]["failures"]:
        print(f"failure: {failure}")
    extra = {"gpu_true_in_use_peak_bytes": trace.peak} if trace is not None else {}
    print(json.dumps({"baseline_rss_bytes": baseline_rss, **memory, **extra}, sort_keys=True))
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
