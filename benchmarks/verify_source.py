"""Benchmark: the CPU cost of source integrity on an ARINA acquisition.

Times, back to back on the same data (warm page cache, median of ``--reps``):
``load_arina`` without and with ``verify_source=True``; ``open_arina`` with a fresh
index (the first observation, which now hashes every raw chunk with XXH3-64) against
hashing switched off; and the floor: XXH3-64 of every chunk alone.

Usage::

    python benchmarks/verify_source.py [--dir /tmp/verifydata] [--scan 32 64] [--reps 7]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import xxhash

from quantem.stem4d.io import frame_index
from quantem.stem4d.io.arina import load_arina, open_arina, read_compressed
from quantem.stem4d.io.synthetic import write_synthetic_arina


def median_time(work, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/verifydata"))
    parser.add_argument("--scan", type=int, nargs=2, default=(32, 64))
    parser.add_argument("--det", type=int, nargs=2, default=(192, 192))
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args(argv)
    master = args.dir / "synthetic_master.h5"
    if not master.exists():
        write_synthetic_arina(args.dir, scan_shape=tuple(args.scan), detector_shape=tuple(args.det))
    index_dir = args.dir / "index"
    source = open_arina(master, index_dir=index_dir)
    load_arina(master, index_dir=index_dir).close()  # compile, warm the page cache
    load_arina(master, index_dir=index_dir, verify_source=True).close()
    rows = {}
    for _ in range(2):  # alternate, twice
        rows.setdefault("load", []).append(
            median_time(lambda: load_arina(master, index_dir=index_dir).close(), args.reps)
        )
        rows.setdefault("load verify_source", []).append(
            median_time(
                lambda: load_arina(master, index_dir=index_dir, verify_source=True).close(),
                args.reps,
            )
        )
    buffer, offsets = read_compressed(source)

    def hash_all() -> None:
        view = memoryview(buffer)
        for i in range(len(offsets) - 1):
            xxhash.xxh3_64_intdigest(view[offsets[i] : offsets[i + 1]])

    rows["floor: xxh3 of every chunk, in memory"] = [median_time(hash_all, args.reps)]
    rows["open fresh index (hashes chunks)"] = [
        median_time(lambda: open_arina(master, index_dir=index_dir, fresh_index=True), 3)
    ]
    real = frame_index.hash_chunks
    frame_index.hash_chunks = lambda path, o, s: np.zeros(len(o), dtype=np.uint64)
    try:
        rows["open fresh index (hashing off)"] = [
            median_time(lambda: open_arina(master, index_dir=index_dir, fresh_index=True), 3)
        ]
    finally:
        frame_index.hash_chunks = real
    print(
        f"{source.n_frames} frames {source.detector_shape} {source.dtype}, "
        f"{source.index.compressed_bytes / 1e6:.1f} MB compressed"
    )
    for name, values in rows.items():
        print(f"{name:45s} " + " / ".join(f"{v:.3f} s" for v in values))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
