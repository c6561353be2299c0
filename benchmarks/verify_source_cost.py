"""Benchmark: what ``verify_source=True`` adds to a warm CPU load of an ARINA acquisition.

Loads the same acquisition (page cache warm, frame index built) with verification off
and on, alternately in pairs (off, on, on, off, ...) so drift and neighbours' load hit
both alike, and prints the median of the per-pair ratios on/off as the cost in percent
with its spread (interquartile range), both medians, and the floor: hashing every
chunk already in memory on one thread, as a share of the unverified load. Decides io.load's default:
verification is on by default where the cost is at most 5% (docs/arina.md).

Usage (one command; the acquisition is written once under --dir)::

    python benchmarks/verify_source_cost.py [--dir /tmp/verify-cost] [--scan 32 64]
        [--det 192 192] [--pairs 15] [--threads N] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import xxhash

from quantem.stem4d.io.arina import load_arina, open_arina, read_compressed
from quantem.stem4d.io.synthetic import write_synthetic_arina


def timed_load(master: Path, index_dir: Path, threads: int | None, verify: bool) -> float:
    start = time.perf_counter()
    load_arina(master, index_dir=index_dir, threads=threads, verify_source=verify).close()
    return time.perf_counter() - start


def quartiles(values: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/verify-cost"))
    parser.add_argument("--scan", type=int, nargs=2, default=(32, 64))
    parser.add_argument("--det", type=int, nargs=2, default=(192, 192))
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = parser.parse_args(argv)
    folder = args.dir / f"scan{args.scan[0]}x{args.scan[1]}-det{args.det[0]}x{args.det[1]}"
    master = folder / "synthetic_master.h5"
    if not master.exists():
        write_synthetic_arina(
            folder, scan_shape=tuple(args.scan), detector_shape=tuple(args.det), processes=1
        )
    index_dir = folder / "index"
    for verify in (False, True, False, True):  # compile, build the index, warm the cache
        timed_load(master, index_dir, args.threads, verify)
    off, on, ratios = [], [], []
    for i in range(args.pairs):
        order = (False, True) if i % 2 == 0 else (True, False)
        times = {verify: timed_load(master, index_dir, args.threads, verify) for verify in order}
        off.append(times[False])
        on.append(times[True])
        ratios.append(times[True] / times[False])
    low, high = quartiles(ratios)
    # The floor: XXH3-64 of every raw chunk already in memory, one thread (what the
    # verification adds, without the noise of two whole loads).
    buffer, offsets = read_compressed(open_arina(master, index_dir=index_dir))
    view = memoryview(buffer)
    floors = []
    for _ in range(max(5, args.pairs)):
        start = time.perf_counter()
        for i in range(len(offsets) - 1):
            xxhash.xxh3_64_intdigest(view[offsets[i] : offsets[i + 1]])
        floors.append(time.perf_counter() - start)
    result = {
        "acquisition": {"scan": list(args.scan), "detector": list(args.det), "dtype": "uint16"},
        "threads": args.threads,
        "cpu_count": os.cpu_count(),
        "loadavg_after": os.getloadavg(),
        "pairs": args.pairs,
        "off_median_s": statistics.median(off),
        "on_median_s": statistics.median(on),
        "cost_percent_median": 100 * (statistics.median(ratios) - 1),
        "cost_percent_iqr": [100 * (low - 1), 100 * (high - 1)],
        "compressed_bytes": int(offsets[-1]),
        "hash_floor_median_s": statistics.median(floors),
        "hash_floor_percent_of_off": 100 * statistics.median(floors) / statistics.median(off),
    }
    json.dump(result, sys.stdout, indent=2)
    print()
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
