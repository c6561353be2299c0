"""CPU decode throughput: the native C++ reader (qem-native-load) vs the Python CPU
decoder (numba) on the same .qem file, same machine, back to back.

Makes one synthetic acquisition (``quantem.stem4d.io.synthetic.make_frames``, the ARINA
model), writes it as .qem (outside all timings), reads the file once so the page
cache is warm for every trial, compiles numba with one untimed load, then alternates,
for each thread count and repetition:

* Python ``load_qem(path, threads=T)`` (open, verify checksums, decode, in-process);
* native ``qem-native-load --json --threads T`` in a new process: its own stage times
  (open, read, verify, decode), the launch overhead measured by the harness, and the
  CPU seconds of each stage (all threads; robust when the host is busy).

Before timing, the native sample-frame hashes are checked against the Python frames.
Wall seconds and CPU seconds are both reported because the development machine is
shared. Usage::

    python benchmarks/native_decode.py [--scan 64 64] [--det 192 192] [--reps 7]
        [--threads 1 2] [--binary PATH] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import git_revision

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.native import (
    ensure_native_binary,
    find_native_binary,
    hash_frame_u32_le,
    run_native_load,
)
from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.io.qem.reader import load_qem
from quantem.stem4d.io.qem.writer import save_qem
from quantem.stem4d.io.synthetic import make_frames


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed(fn):
    wall0, cpu0 = time.perf_counter(), cpu_seconds()
    result = fn()
    return result, time.perf_counter() - wall0, cpu_seconds() - cpu0


def python_load(path: Path, threads: int) -> np.ndarray:
    with load_qem(path, threads=threads) as acq:
        return np.asarray(acq.data)


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scan", type=int, nargs=2, default=(64, 64))
    parser.add_argument("--det", type=int, nargs=2, default=(192, 192))
    parser.add_argument("--dtype", default="uint16", choices=("uint8", "uint16", "uint32"))
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, os.cpu_count() or 1])
    parser.add_argument("--binary", default=None, help="qem-native-load (default: build/cache)")
    parser.add_argument("--workdir", default=None, help="folder for the temporary .qem")
    parser.add_argument("--json-out", default=None, help="also write the results as JSON")
    args = parser.parse_args(argv)
    scan, det = tuple(args.scan), tuple(args.det)
    binary = find_native_binary(args.binary) if args.binary else ensure_native_binary()
    revision = git_revision()
    load_before = os.getloadavg()

    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        path = Path(tmp) / "bench.qem"
        n = scan[0] * scan[1]
        frames = make_frames(0, n, scan_shape=scan, detector_shape=det, dtype=args.dtype, seed=0)
        data = frames.reshape(*scan, *det)
        acq = Acquisition(
            data, {"scan_shape": scan, "detector_shape": det}, np.ones(det, bool), "cpu"
        )
        save_qem(acq, path, keep_source_dtype=True)
        del acq, frames
        file_bytes = path.stat().st_size
        path.read_bytes()  # warm the page cache: every trial reads cached pages

        # Correctness first: both decoders agree with the source on every frame, and
        # the native sample hashes are those of the Python frames.
        decoded = python_load(path, max(args.threads))
        if not np.array_equal(decoded, data):
            raise SystemExit("the Python decoder does not reproduce the source")
        check = run_native_load(binary, path, sample_frames=[0, n // 2, n - 1])
        want = [hash_frame_u32_le(data.reshape(n, *det)[f]) for f in (0, n // 2, n - 1)]
        if check["sample_hashes_u32_le"] != want:
            raise SystemExit("native sample hashes differ from the Python frames")
        decoded_bytes = int(check["decoded_bytes"])
        del decoded

        results: dict[str, dict[str, list[float]]] = {}
        for threads in args.threads:
            cell = {
                key: []
                for key in (
                    "python_load_wall",
                    "python_load_cpu",
                    "native_decode_wall",
                    "native_decode_cpu",
                    "native_total_wall",
                    "native_total_cpu",
                    "native_process_wall",
                    "native_launch",
                    "native_verify_wall",
                )
            }
            python_load(path, threads)  # warm numba's thread pool at this width
            for _ in range(args.reps):
                _, wall, cpu = timed(lambda threads=threads: python_load(path, threads))
                cell["python_load_wall"].append(wall)
                cell["python_load_cpu"].append(cpu)
                doc = run_native_load(binary, path, threads=threads)
                cell["native_decode_wall"].append(doc["stages"]["decode"])
                cell["native_decode_cpu"].append(doc["stages_cpu"]["decode"])
                cell["native_total_wall"].append(doc["stages"]["total"])
                cell["native_total_cpu"].append(doc["stages_cpu"]["total"])
                cell["native_process_wall"].append(doc["wall_seconds"])
                cell["native_launch"].append(doc["launch_seconds"])
                cell["native_verify_wall"].append(doc["stages"]["verify"])
            results[str(threads)] = cell

    load_after = os.getloadavg()
    report = {
        "benchmark": "native_decode",
        "revision": revision,
        "binary": str(binary),
        "shape": [*scan, *det],
        "dtype": args.dtype,
        "file_bytes": file_bytes,
        "decoded_bytes": decoded_bytes,
        "reps": args.reps,
        "cache_state": "cached (file read once before timing)",
        "load_average_before": load_before,
        "load_average_after": load_after,
        "cells": {t: {k: summary(v) for k, v in cell.items()} for t, cell in results.items()},
        "raw": results,
    }
    print(
        f"revision {revision}; {scan[0]}x{scan[1]}x{det[0]}x{det[1]} {args.dtype}; "
        f".qem {file_bytes} bytes, {decoded_bytes} decoded; reps {args.reps}; "
        f"load average {load_before[0]:.1f} -> {load_after[0]:.1f}"
    )
    print("| threads | measurement | median s | min s | decoded GB/s (median) | GB/s per CPU-s |")
    print("|---:|---|---:|---:|---:|---:|")
    rows = (
        ("Python load_qem (open+verify+decode)", "python_load_wall", "python_load_cpu"),
        ("native decode stage", "native_decode_wall", "native_decode_cpu"),
        ("native in-process total (open..hash)", "native_total_wall", "native_total_cpu"),
        ("native process incl. launch", "native_process_wall", None),
        ("native launch overhead", "native_launch", None),
    )
    for threads, cell in report["cells"].items():
        for label, wall_key, cpu_key in rows:
            wall = cell[wall_key]
            rate = (
                decoded_bytes / wall["median"] / 1e9
                if wall_key != "native_launch"
                else float("nan")
            )
            per_cpu = f"{decoded_bytes / cell[cpu_key]['median'] / 1e9:.3f}" if cpu_key else "-"
            rate_text = f"{rate:.3f}" if wall_key != "native_launch" else "-"
            print(
                f"| {threads} | {label} | {wall['median']:.4f} | {wall['min']:.4f} | {rate_text} | {per_cpu} |"
            )
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, sort_keys=True, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
