"""Benchmark: opening an ARINA acquisition whose frame index is already stored.

Every load starts with ``open_arina`` (shards from the master's links, frame counts,
frame shape and dtype, the frame index sidecar). This times that step alone, warm
(page cache and index sidecar present), for an acquisition with many shards, so the
per-shard cost shows.

Usage::

    python benchmarks/arina_open.py --dir /tmp/arina-open --shards 128 --reps 21
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--shards", type=int, default=128)
    parser.add_argument("--frames-per-shard", type=int, default=32)
    parser.add_argument("--reps", type=int, default=21)
    args = parser.parse_args(argv)

    from quantem.stem4d.io.arina import open_arina
    from quantem.stem4d.io.synthetic import write_synthetic_arina

    n = args.shards * args.frames_per_shard
    master = args.dir / "acq_master.h5"
    if not master.exists():
        write_synthetic_arina(
            args.dir, "acq", scan_shape=(args.shards, args.frames_per_shard),
            detector_shape=(32, 32), frames_per_shard=args.frames_per_shard,
            processes=1, dose=200.0,
        )  # fmt: skip
    index_dir = args.dir / "index"
    open_arina(master, index_dir=index_dir)  # builds the sidecar, warms the cache
    times = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        source = open_arina(master, index_dir=index_dir)
        times.append(time.perf_counter() - t0)
    assert len(source.shard_paths) == args.shards and source.n_frames == n
    print(f"shards {args.shards}, frames {n}")
    print(
        f"open_arina warm: median {statistics.median(times) * 1e3:.1f} ms, "
        f"min {min(times) * 1e3:.1f} ms, max {max(times) * 1e3:.1f} ms (n={args.reps})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
