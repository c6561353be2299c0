"""Compute products (CoM, mean DP, virtual detectors, iDPC, parallax) against the memory floor.

CPU (the 2-core check of issue 13)::

    PYTHONPATH=$PWD python benchmarks/compute_products.py --backend cpu --scan 64 --detector 192

CUDA, dense resident (the H200 goals)::

    PYTHONPATH=$PWD python benchmarks/compute_products.py --backend cuda --scan 512 --detector 192

The data are uint16 frames with a bright-field disk (radius 0.12 of the detector) and
random counts, made in memory (CPU) or on the device (CUDA). The floor is reading every
byte once, measured in the same run: on the CPU the fastest of a sweep of uint64 sums of
the data (numpy and numba, one thread or one per CPU, one piece per thread or pieces of
1 to 64 MiB; :func:`cpu_floor`); on CUDA a CUB sum of the data viewed as uint64. Each
product reports its first call and the median/p90 of ``--reps`` warm calls (CUDA: events
on the stream, after a synchronisation). On the CPU each warm call follows a call of the
floor's best candidate, so ``x_floor_interleaved`` compares the two under the same
competing load (the host may be shared), and ``x_floor_cpu_time`` compares their process
CPU times; ``x_floor`` divides by the sweep's best median.
One JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numba as nb
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import git_revision

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.detector import prepare
from quantem.stem4d.dpc import dpc
from quantem.stem4d.parallax import parallax
from quantem.stem4d.virtual import Annulus, Calibration, virtual_images


def base_pattern(det: int) -> np.ndarray:
    rows, cols = np.mgrid[:det, :det]
    d = np.hypot(rows - (det - 1) / 2, cols - (det - 1) / 2)
    radius = 0.12 * det
    return np.where(d <= radius, 40, 2).astype(np.uint16)


def make_cpu(scan: int, det: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = base_pattern(det)
    data = np.empty((scan, scan, det, det), dtype=np.uint16)
    for r in range(scan):
        data[r] = base + rng.integers(0, 8, (scan, det, det), dtype=np.uint16)
    return data


def make_cuda(scan: int, det: int, seed: int = 0):
    import cupy

    cupy.random.seed(seed)
    base = cupy.asarray(base_pattern(det))
    data = cupy.empty((scan, scan, det, det), dtype=cupy.uint16)
    for r in range(scan):
        data[r] = base + cupy.random.randint(0, 8, (scan, det, det), dtype=cupy.uint16)
    cupy.cuda.Device().synchronize()
    return data


def _clock(fn, backend: str):
    """A function that runs ``fn`` once and returns its seconds (CUDA: by events)."""
    if backend == "cuda":
        import cupy

        def once() -> float:
            cupy.cuda.Device().synchronize()
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            return cupy.cuda.get_elapsed_time(start, stop) / 1e3

        return once

    def once() -> float:
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t

    return once


def _summary(first: float | None, warm: list[float]) -> dict:
    warm = sorted(warm)
    p90 = warm[min(len(warm) - 1, round(0.9 * (len(warm) - 1)))]
    return {"first_s": first, "median_s": statistics.median(warm), "p90_s": p90, "min_s": warm[0]}


def timed(fn, reps: int, backend: str, floor_fn=None) -> dict:
    """First call and warm statistics of ``reps`` calls of ``fn``.

    With ``floor_fn`` (CPU), each warm call of ``fn`` follows a call of ``floor_fn``, so
    the two see the same competing load; their statistics come back as
    ``floor_interleaved``. The process CPU time of each call (all threads) is recorded
    too: on a shared host it counts the work done, not the time spent waiting for a core.
    """
    once = _clock(fn, backend)
    first = once()
    if floor_fn is None:
        return _summary(first, [once() for _ in range(reps)])
    floor_once = _clock(floor_fn, backend)
    warm, floor_warm, cpu, floor_cpu = [], [], [], []
    for _ in range(reps):
        start = time.process_time()
        floor_warm.append(floor_once())
        middle = time.process_time()
        warm.append(once())
        floor_cpu.append(middle - start)
        cpu.append(time.process_time() - middle)
    out = _summary(first, warm)
    out["cpu_median_s"] = statistics.median(cpu)
    out["floor_interleaved"] = _summary(None, floor_warm)
    out["floor_interleaved"]["cpu_median_s"] = statistics.median(floor_cpu)
    out["x_floor_interleaved"] = out["median_s"] / out["floor_interleaved"]["median_s"]
    out["x_floor_cpu_time"] = out["cpu_median_s"] / statistics.median(floor_cpu)
    return out


#: Piece sizes (MiB) the CPU floor sweeps, besides one piece per thread.
FLOOR_PIECES_MIB = (1, 4, 16, 64)


@nb.njit(nogil=True, cache=True)
def _sum_uint64(flat):  # pragma: no cover - compiled
    acc = np.uint64(0)
    for k in range(flat.shape[0]):
        acc += flat[k]
    return acc


def cpu_floor(data: np.ndarray, reps: int) -> dict:
    """Reading every byte once, at its best: a sweep of methods, threads and piece sizes.

    Each candidate sums the data viewed as uint64 (numpy ``sum`` or a numba loop, both
    release the GIL): in one thread, and on a pool of one thread per CPU given either one
    piece per thread or pieces of ``FLOOR_PIECES_MIB``. The floor is the fastest median.
    """
    flat = data.reshape(-1).view(np.uint64)
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    expected = int(flat.sum())
    _sum_uint64(flat[:8])  # compile outside the timings
    methods = {"numpy": np.sum, "numba": _sum_uint64}
    candidates = []
    for method, fn in methods.items():
        candidates.append((method, 1, flat.nbytes, lambda fn=fn: int(fn(flat))))
    with ThreadPoolExecutor(threads) as pool:
        piece_options = [("per_thread", np.array_split(flat, threads))]
        for mib in FLOOR_PIECES_MIB:
            n = max(1, flat.nbytes // (mib << 20))
            if n > threads:
                piece_options.append((f"{mib}MiB", np.array_split(flat, n)))
        for method, fn in methods.items():
            for _label, parts in piece_options:

                def run(fn=fn, parts=parts) -> int:
                    return sum(int(v) for v in pool.map(fn, parts)) % 2**64  # uint64 wraps

                candidates.append((method, threads, parts[0].nbytes, run))
        results = []
        for method, n_threads, piece, fn in candidates:
            if fn() != expected:  # a floor that does not read everything is no floor
                raise AssertionError(f"floor candidate {method} x{n_threads} summed wrong")
            timing = timed(fn, reps, "cpu")
            results.append({"method": method, "threads": n_threads, "piece_bytes": piece, **timing})
    best = min(results, key=lambda r: r["median_s"])
    return {"candidates": results, "best": best, "best_median_s": best["median_s"]}


def cpu_floor_function(data: np.ndarray, best: dict, pool: ThreadPoolExecutor):
    """The floor's best candidate as a callable, for timings interleaved with products."""
    flat = data.reshape(-1).view(np.uint64)
    fn = np.sum if best["method"] == "numpy" else _sum_uint64
    if best["threads"] == 1:
        return lambda: fn(flat)
    parts = np.array_split(flat, max(1, round(flat.nbytes / best["piece_bytes"])))
    return lambda: sum(int(v) for v in pool.map(fn, parts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--scan", type=int, default=64)
    parser.add_argument("--detector", type=int, default=192)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--skip", default="", help="comma-separated products to leave out")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    load_before = os.getloadavg()
    scan, det = args.scan, args.detector
    shape = (scan, scan, det, det)
    if args.backend == "cuda":
        import cupy

        data = make_cuda(scan, det)
        flat = data.reshape(-1).view(cupy.uint64)
        floor_fn = None  # events time each call on the device: no interleaving needed
        floor = {"cub_sum_uint64": timed(lambda: flat.sum(), args.reps, "cuda")}
        floor["best_median_s"] = floor["cub_sum_uint64"]["median_s"]
        device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    else:
        data = make_cpu(scan, det)
        floor = cpu_floor(data, args.reps)
        floor_pool = ThreadPoolExecutor(floor["best"]["threads"])
        floor_fn = cpu_floor_function(data, floor["best"], floor_pool)
        device = f"cpu x{len(os.sched_getaffinity(0))}"
    meta = {"scan_shape": (scan, scan), "detector_shape": (det, det), "dtype": "uint16"}
    acq = Acquisition(data, meta, np.ones((det, det), dtype=bool), args.backend)
    session = prepare(acq)
    disk = session.bright_field_disk()  # cached: products below reuse the disk
    cal = Calibration(energy_ev=300e3, convergence_mrad=20.0, scan_step_angstrom=0.5)
    products = {
        "com": lambda: session.center_of_mass(),
        "mean_dp": lambda: prepare(acq).mean_dp_exact(),  # a fresh session: no cached sum
        "bf": lambda: session.bf(disk.radius, disk.center),
        # The session knows each frame's total from the CoM above, so a detector covering
        # most of the frame is read as total minus its complement (docs/detector.md).
        "adf": lambda: session.adf(disk.radius, None, disk.center),
        # A fresh session: the totals are read first (every pixel once), then the complement.
        "adf_fresh_session": lambda: prepare(acq).adf(disk.radius, None, disk.center),
        "df_annulus": lambda: virtual_images(
            acq, {"df": Annulus(disk.radius * 1.2, disk.radius * 2.5, center=disk.center)}
        ),
        "idpc": lambda: dpc(acq),
        "parallax_fit": lambda: parallax(acq, calibration=cal, max_shift=8.0),
        "parallax_fit_bin2": lambda: parallax(acq, calibration=cal, max_shift=8.0, bin_factor=2),
    }
    results = {}
    for name, fn in products.items():
        if name in skip:
            continue
        reps = args.reps if not name.startswith("parallax") else 3
        results[name] = timed(fn, reps, args.backend, floor_fn)
        results[name]["x_floor"] = results[name]["median_s"] / floor["best_median_s"]
        print(f"{name}: {results[name]}", file=sys.stderr, flush=True)
    document = {
        "benchmark": "compute_products",
        "revision": git_revision(),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": device,
        "backend": args.backend,
        "shape": list(shape),
        "dtype": "uint16",
        "bytes": int(np.prod(shape)) * 2,
        "layout": "dense resident, C order (scan_r, scan_c, det_r, det_c)",
        "floor": floor,
        "floor_GBps": int(np.prod(shape)) * 2 / floor["best_median_s"] / 1e9,
        "products": results,
        "reps": args.reps,
        "load_average_before": list(load_before),
        "load_average_after": list(os.getloadavg()),
    }
    print(json.dumps(document, indent=2))


if __name__ == "__main__":
    main()
