"""Benchmark: CPU HDF5 load with each chunk decoder engine (``numba`` and ``bitshuffle``).

For back-to-back checks of a change to the chunk decoders: run it once with the
checkout before the change on ``sys.path`` and once with the one after, on the same data.

Usage::

    python benchmarks/cpu_engines.py [--source-root CHECKOUT] [--dir /tmp/engdata] [--reps 9]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-root", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("--dir", type=Path, default=Path("/tmp/engdata"))
    parser.add_argument("--scan", type=int, nargs=2, default=(32, 64))
    parser.add_argument("--reps", type=int, default=9)
    args = parser.parse_args(argv)
    sys.path.insert(0, args.source_root)
    from quantem.stem4d.io.arina import load_arina
    from quantem.stem4d.io.synthetic import write_synthetic_arina

    master = args.dir / "e_master.h5"
    if not master.exists():
        write_synthetic_arina(
            args.dir, "e", scan_shape=tuple(args.scan), detector_shape=(192, 192),
            frames_per_shard=500, processes=2, dose=40000.0,
        )  # fmt: skip
    index_dir = args.dir / "index"
    for engine in ("numba", "bitshuffle"):
        load_arina(master, engine=engine, index_dir=index_dir).close()  # compile, warm
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            load_arina(master, engine=engine, index_dir=index_dir).close()
            times.append(time.perf_counter() - t0)
        print(
            f"{args.source_root}: {engine} median {statistics.median(times):.4f} s, "
            f"min {min(times):.4f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
