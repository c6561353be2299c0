"""SSB timings: preparation, complex object, phase + loss, and the 200-trial fit.

    python benchmarks/ssb_bench.py --backend cuda                      # 512x512x192x192 uint16
    python benchmarks/ssb_bench.py --backend cpu --scan 64 --detector-bin 4

The data are synthetic counts (uint16, Poisson) of a BF disk of ``--bf-radius`` pixels
whose position and brightness follow a smooth object, made on the benchmark's device; only
the shapes matter for the timings (the fit's accuracy is tested on abTEM data in
tests/test_ssb_abtem.py). Stages, each first and warm median/p90 (``--reps``):

* ``prepare``: scan Fourier transform of the BF disk and the region masks;
* ``object``: sideband sums + inverse transform (the complex object), after preparation;
* ``phase_loss``: object, its phase and the loss;
* ``fit``: ``--trials`` TPE trials + Nelder-Mead (once: it is seconds long);
* ``floor_read``: one reduction over the prepared G (the memory floor of ``object``).

Prints one JSON document; add ``--output FILE`` to write it too.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import git_revision

from quantem.stem4d.ssb import (
    Aberrations,
    BrightFieldDisk,
    Calibration,
    fit_aberrations,
    loss,
    prepare,
    reconstruct,
)
from quantem.stem4d.ssb.reconstruct import object_from_sums, select_sums


def make_data(xp, scan: int, det: int, radius: float, dose: float, seed: int):
    # numpy's Generator; CuPy's RandomState (its poisson draws on the device).
    rng = np.random.default_rng(seed) if xp is np else xp.random.RandomState(seed)
    u = xp.arange(scan, dtype=xp.float32)[:, None] / scan
    v = xp.arange(scan, dtype=xp.float32)[None, :] / scan
    potential = xp.cos(2 * math.pi * 7 * u) * xp.cos(2 * math.pi * 5 * v)
    shift_r = 0.05 * radius * xp.sin(2 * math.pi * 7 * u) * xp.ones_like(v)
    shift_c = 0.05 * radius * xp.sin(2 * math.pi * 5 * v) * xp.ones_like(u)
    rows = xp.arange(det, dtype=xp.float32) - (det - 1) / 2
    data = xp.empty((scan, scan, det, det), dtype=xp.uint16)
    per_pixel = dose / (math.pi * radius * radius)
    for i in range(scan):
        dr = rows[None, :, None] - shift_r[i][:, None, None]
        dc = rows[None, None, :] - shift_c[i][:, None, None]
        disk = xp.clip(radius + 0.5 - xp.sqrt(dr * dr + dc * dc), 0, 1)
        mean = per_pixel * disk * (1 + 0.1 * potential[i][:, None, None])
        data[i] = rng.poisson(mean).astype(xp.uint16)
    return data


def summary(times: list[float]) -> dict:
    warm = times[1:] or times
    return {
        "first_s": times[0],
        "warm_median_s": statistics.median(warm),
        "warm_p90_s": float(np.percentile(warm, 90)),
        "reps": len(times),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--scan", type=int, default=512)
    parser.add_argument("--detector", type=int, default=192)
    parser.add_argument("--bf-radius", type=float, default=48.0)
    parser.add_argument("--detector-bin", type=int, default=1)
    parser.add_argument("--dose", type=float, default=20000.0)
    parser.add_argument("--voltage-kv", type=float, default=200.0)
    parser.add_argument("--semiangle-mrad", type=float, default=25.0)
    parser.add_argument("--scan-step-a", type=float, default=0.25)
    parser.add_argument("--rotation-deg", type=float, default=0.0)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--engine", choices=("auto", "array", "fused"), default="auto")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()

    if args.backend == "cuda":
        import cupy as xp

        def sync() -> None:
            xp.cuda.Device().synchronize()

        device = xp.cuda.runtime.getDeviceProperties(xp.cuda.Device().id)["name"].decode()
    else:
        xp = np

        def sync() -> None:
            return None

        device = platform.processor() or platform.machine()

    def timed(fn, reps: int) -> list[float]:
        times = []
        for _ in range(reps):
            sync()
            start = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - start)
        return times

    t0 = time.perf_counter()
    data = make_data(xp, args.scan, args.detector, args.bf_radius, args.dose, seed=0)
    sync()
    make_s = time.perf_counter() - t0
    calibration = Calibration(
        energy_ev=args.voltage_kv * 1e3,
        semiangle_mrad=args.semiangle_mrad,
        scan_step_a=args.scan_step_a,
        rotation_deg=args.rotation_deg,
    )
    disk = BrightFieldDisk(center=((args.detector - 1) / 2,) * 2, radius=args.bf_radius)
    holder = {"data": data}
    del data

    def do_prepare() -> None:
        holder.pop("p", None)
        holder["p"] = prepare(
            holder["data"], calibration, disk=disk, detector_bin=args.detector_bin
        )

    prepare_times = timed(do_prepare, 2)
    p = holder["p"]
    del holder["data"]  # only the prepared G stays resident
    sums_fn = select_sums(p, args.engine)
    guess = Aberrations(C10=30.0, C12a=5.0, C12b=-3.0)

    def do_object() -> None:
        object_from_sums(p, sums_fn(p, guess))

    def do_phase_loss() -> None:
        result = reconstruct(p, guess, engine=args.engine)
        float(result.phase[0, 0])

    def do_floor() -> None:
        # One read of G's bytes as floats, no temporary the size of G.
        float(p.G.view(p.G.real.dtype).sum())

    stages = {
        "prepare": summary(prepare_times),
        "object": summary(timed(do_object, args.reps)),
        "phase_loss": summary(timed(do_phase_loss, args.reps)),
        "floor_read": summary(timed(do_floor, args.reps)),
    }
    t0 = time.perf_counter()
    fit = fit_aberrations(p, n_trials=args.trials, seed=0, engine=args.engine)
    sync()
    stages["fit"] = {"first_s": time.perf_counter() - t0, "reps": 1}
    loss_value = loss(p, fit.aberrations, engine=args.engine)
    report = {
        "benchmark": "ssb",
        "revision": git_revision(),
        "device": device,
        "backend": args.backend,
        "engine": sums_fn.__name__,
        "data": {
            "shape": [args.scan, args.scan, args.detector, args.detector],
            "dtype": "uint16",
            "layout": "dense C order, resident on the benchmark's device",
            "bf_radius_px": args.bf_radius,
            "detector_bin": args.detector_bin,
            "make_s": make_s,
        },
        "prepared": {
            "frequencies": int(p.G.shape[0]),
            "pixels": int(p.G.shape[1]),
            "G_bytes": p.nbytes,
        },
        "calibration": calibration.to_dict(),
        "stages": stages,
        "fit": {
            "n_trials": fit.n_trials,
            "n_evaluations": fit.n_evaluations,
            "refine": fit.refine,
            "loss": loss_value,
            "aberrations_polar": fit.aberrations.to_polar(),
            "trajectory_sha256": fit.trajectory_sha256(),
        },
        "goals_h200_512": {"object_s": 0.005, "phase_loss_s": 0.010, "fit_s": 3.0},
        "command": " ".join(sys.argv),
    }
    text = json.dumps(report, indent=1, sort_keys=True)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")


if __name__ == "__main__":
    main()
