"""Benchmark: CPU detector products (numba kernels) against plain-numpy equivalents.

Data: an in-memory 4D array with a bright disk plus Poisson background (seeded), so the
timings are of the reductions only (no IO). Every numba result is checked for equality
with its numpy counterpart before any timing is reported.

Usage::

    python benchmarks/cpu_products.py [--scan 64 64] [--det 192 192] [--dtype uint16]
                                      [--reps 5] [--threads N]

``--threads`` applies to the kernel rows; the session row uses the default (all CPUs).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable

import numpy as np
from _common import git_revision

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.detector import cpu_kernels, prepare
from quantem.stem4d.detector.masks import annulus_mask, disk_mask


def make_data(scan: tuple[int, int], det: tuple[int, int], dtype: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    data = rng.poisson(1.0, size=(*scan, *det)).astype(dtype)
    bright = disk_mask(det, ((det[0] - 1) / 2, (det[1] - 1) / 2), 0.12 * min(det))
    data[..., bright] += rng.poisson(20.0, size=(*scan, int(bright.sum()))).astype(dtype)
    return data


def time_seconds(fn: Callable[[], object], reps: int) -> tuple[float, float]:
    """(median, min) seconds of ``reps`` calls after one warm-up call."""
    fn()  # warm-up: compilation and first touch are not part of the timing
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def numpy_masked_sum(data: np.ndarray, mask: np.ndarray) -> np.ndarray:
    flat = data.reshape(data.shape[0] * data.shape[1], -1)
    return flat[:, mask.ravel()].sum(axis=1, dtype=np.uint64).reshape(data.shape[:2])


def numpy_moments(data: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, ...]:
    flat = data.reshape(data.shape[0] * data.shape[1], -1)
    rows, cols = np.nonzero(mask)
    picked = flat[:, mask.ravel()].astype(np.uint64)
    shape = data.shape[:2]
    return (
        picked.sum(axis=1).reshape(shape),
        (picked @ rows.astype(np.uint64)).reshape(shape),
        (picked @ cols.astype(np.uint64)).reshape(shape),
    )


def numpy_sum_frames(data: np.ndarray) -> np.ndarray:
    return data.reshape(-1, *data.shape[2:]).sum(axis=0, dtype=np.uint64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scan", type=int, nargs=2, default=(64, 64))
    parser.add_argument("--det", type=int, nargs=2, default=(192, 192))
    parser.add_argument("--dtype", default="uint16", choices=["uint8", "uint16", "uint32"])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="kernel threads (default: all)")
    args = parser.parse_args()
    scan, det = tuple(args.scan), tuple(args.det)

    data = make_data(scan, det, args.dtype, args.seed)
    validity = np.ones(det, dtype=bool)
    acq = Acquisition(data, {"scan_shape": scan, "detector_shape": det}, validity, "cpu")
    center = ((det[0] - 1) / 2, (det[1] - 1) / 2)
    radius = 0.12 * min(det)
    masks = {
        "bf": disk_mask(det, center, radius),
        "adf": annulus_mask(det, center, 1.5 * radius, 4 * radius),
        "full": np.ones(det, dtype=bool),
    }

    rows = []

    def record(name: str, ours: Callable[[], object], theirs: Callable[[], object] | None):
        ours_result, theirs_result = ours(), theirs() if theirs else None
        if theirs_result is not None:
            pairs = (
                zip(ours_result, theirs_result)
                if isinstance(ours_result, tuple)
                else [(ours_result, theirs_result)]
            )
            for a, b in pairs:
                if not np.array_equal(a, b):
                    raise SystemExit(f"{name}: numba and numpy results differ")
        t_ours, t_ours_min = time_seconds(ours, args.reps)
        t_theirs = time_seconds(theirs, args.reps)[0] if theirs else None
        rows.append(
            {
                "product": name,
                "numba_s": round(t_ours, 4),
                "numba_min_s": round(t_ours_min, 4),
                "numba_GBps": round(data.nbytes / t_ours / 1e9, 2),
                "numpy_s": None if t_theirs is None else round(t_theirs, 4),
                "speedup": None if t_theirs is None else round(t_theirs / t_ours, 1),
            }
        )

    for label, mask in masks.items():
        record(
            f"masked_sum[{label}]",
            lambda m=mask: cpu_kernels.masked_sum(data, m, threads=args.threads),
            lambda m=mask: numpy_masked_sum(data, m),
        )
    record(
        "moments[full]",
        lambda: cpu_kernels.moments(data, masks["full"], threads=args.threads),
        lambda: numpy_moments(data, masks["full"]),
    )
    record(
        "sum_frames",
        lambda: cpu_kernels.sum_frames(data, threads=args.threads),
        lambda: numpy_sum_frames(data),
    )
    record("session: prepare + bf() (auto disk)", lambda: prepare(acq).bf(), None)

    meta = {
        "shape": [*scan, *det],
        "dtype": args.dtype,
        "data_bytes": data.nbytes,
        "threads": args.threads or cpu_kernels.default_threads(),
        "cpu_count": os.cpu_count(),
        "cpu": platform.processor() or platform.machine(),
        "revision": git_revision(),
        "reps": args.reps,
        "statistic": "median seconds after one warm-up call (min too); data in RAM",
        "loadavg_1min_at_end": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(meta, sort_keys=True))
    header = f"{'product':40s} {'numba s':>9s} {'min s':>8s} {'GB/s':>7s} {'numpy s':>9s} {'speedup':>8s}"
    print(header)
    for row in rows:
        numpy_s = "-" if row["numpy_s"] is None else f"{row['numpy_s']:.4f}"
        speedup = "-" if row["speedup"] is None else f"{row['speedup']:.1f}x"
        print(
            f"{row['product']:40s} {row['numba_s']:9.4f} {row['numba_min_s']:8.4f} "
            f"{row['numba_GBps']:7.2f} "
            f"{numpy_s:>9s} {speedup:>8s}"
        )


if __name__ == "__main__":
    main()
