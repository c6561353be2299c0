"""CPU load of a synthetic ARINA acquisition: quantem vs a single-threaded h5py read.

Writes (or reuses) a synthetic acquisition, warms the page cache, then alternates
timed runs of

* ``h5py``: h5py + hdf5plugin reading every shard's ``/entry/data/data`` into one
  preallocated ``(n, det_r, det_c)`` array (``read_direct``), one thread;
* ``quantem``: ``quantem.stem4d.io.arina.load_arina(master)`` end to end (master hash, index
  sidecar, parallel ``preadv``, parallel decode), returning the 4D array;

checks that both arrays are identical, and prints the median, min and max wall time
and the median process CPU time of each, the speed-up of the medians, and the 1-minute
load average before and after (the development machine is shared). Example::

    python benchmarks/cpu_load.py --scan 64 64 --det 192 192 --runs 7
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import git_revision


def read_with_h5py(master: Path) -> np.ndarray:
    import h5py
    import hdf5plugin  # noqa: F401

    with h5py.File(master, "r") as f:
        group = f["/entry/data"]
        names = sorted(k for k in group if k.startswith("data_"))
        shapes = [group[k].shape for k in names]
        total = sum(s[0] for s in shapes)
        out = np.empty((total, *shapes[0][1:]), dtype=group[names[0]].dtype)
        first = 0
        for name, shape in zip(names, shapes):
            group[name].read_direct(out, dest_sel=np.s_[first : first + shape[0]])
            first += shape[0]
    return out


def read_with_quantem(master: Path, index_dir: Path, threads: int | None) -> np.ndarray:
    from quantem.stem4d.io.arina import load_arina

    acq = load_arina(master, index_dir=index_dir, threads=threads)
    data = acq.data
    return data.reshape(-1, *data.shape[-2:])


def warm(path: Path) -> None:
    for file in sorted(path.parent.glob(path.name.replace("_master.h5", "*"))):
        with open(file, "rb") as f:
            while f.read(1 << 24):
                pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scan", nargs=2, type=int, default=(64, 64))
    parser.add_argument("--det", nargs=2, type=int, default=(192, 192))
    parser.add_argument("--dtype", default="uint16")
    parser.add_argument("--frames-per-shard", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None, help="quantem threads")
    parser.add_argument("--data-dir", default=None, help="reuse/keep the acquisition here")
    args = parser.parse_args()

    from quantem.stem4d.io.synthetic import write_synthetic_arina

    tmp = tempfile.TemporaryDirectory(prefix="quantem-cpu-load-")
    data_dir = Path(args.data_dir) if args.data_dir else Path(tmp.name) / "acq"
    master = data_dir / "bench_master.h5"
    if not master.exists():
        t0 = time.perf_counter()
        write_synthetic_arina(
            data_dir,
            name="bench",
            scan_shape=tuple(args.scan),
            detector_shape=tuple(args.det),
            dtype=args.dtype,
            frames_per_shard=args.frames_per_shard,
            progress=False,
        )
        print(f"wrote {master} in {time.perf_counter() - t0:.1f} s")
    index_dir = Path(tmp.name) / "index"

    warm(master)
    reference = read_with_h5py(master)
    ours = read_with_quantem(master, index_dir, args.threads)  # builds the index, compiles
    if not np.array_equal(reference, ours):
        raise SystemExit("MISMATCH: quantem and h5py arrays differ")
    del ours

    times: dict[str, list[float]] = {"h5py": [], "quantem": []}
    cpu: dict[str, list[float]] = {"h5py": [], "quantem": []}
    load_before = os.getloadavg()[0]
    for _ in range(args.runs):
        for name in ("h5py", "quantem"):
            c0, t0 = time.process_time(), time.perf_counter()
            if name == "h5py":
                result = read_with_h5py(master)
            else:
                result = read_with_quantem(master, index_dir, args.threads)
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
            del result

    logical = reference.nbytes
    on_disk = sum(p.stat().st_size for p in data_dir.glob("bench_data_*.h5"))
    summary = {
        "shape": [*args.scan, *args.det],
        "dtype": args.dtype,
        "logical_bytes": logical,
        "shard_bytes": on_disk,
        "runs": args.runs,
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "revision": git_revision(),
    }
    for name, values in times.items():
        summary[name] = {
            "median_s": statistics.median(values),
            "min_s": min(values),
            "max_s": max(values),
            "GBps_logical": logical / statistics.median(values) / 1e9,
            "cpu_seconds_median": statistics.median(cpu[name]),
        }
    summary["load_average_1min"] = [load_before, os.getloadavg()[0]]
    summary["speedup_median"] = summary["h5py"]["median_s"] / summary["quantem"]["median_s"]
    print(json.dumps(summary, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
