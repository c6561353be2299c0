"""Benchmark: CoM + BF of a whole ARINA acquisition streamed onto the GPU, against the
resident path (load, then the products), in one process.

``quantem.stem4d.virtual.open_frames(MASTER, backend="cuda", batch_frames=N)`` for each
``--batch-frames`` (median of ``--reps``; the CuPy pool's reserved bytes after, from an
emptied pool), then ``load_hdf5`` + the same products; the streamed CoM and BF image are
checked equal to the resident ones. The BF disk: radius ``--radius`` pixels at the
detector's centre. Page cache warm (the shards are read once first)::

    python benchmarks/gpu_stream_products.py /var/tmp/bench/fps10000_dose40000_rows512/full_master.h5
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("master", help="an ARINA *_master.h5")
    parser.add_argument("--batch-frames", type=int, nargs="+", default=[8192, 32768])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--radius", type=float, default=23.0)
    args = parser.parse_args(argv)

    import cupy

    from quantem.stem4d.cuda import loaders
    from quantem.stem4d.io.arina import open_arina
    from quantem.stem4d.virtual import open_frames

    source = open_arina(args.master)
    for path in source.shard_paths:  # warm page cache
        with open(path, "rb") as handle:
            while handle.read(64 << 20):
                pass
    rows, cols = source.detector_shape
    yy, xx = np.mgrid[:rows, :cols]
    mask = (yy - rows / 2) ** 2 + (xx - cols / 2) ** 2 <= args.radius**2
    pool = cupy.get_default_memory_pool()

    def sync() -> None:
        cupy.cuda.Device().synchronize()

    for batch in args.batch_frames:
        pool.free_all_blocks()
        base = pool.total_bytes()
        times = []
        for _ in range(args.reps):
            sync()
            t0 = time.perf_counter()
            frames = open_frames(args.master, backend="cuda", batch_frames=batch)
            com = frames.center_of_mass()
            bf = frames.masked_sums([mask])[0]
            sync()
            times.append(time.perf_counter() - t0)
        reserved = (pool.total_bytes() - base) / 2**30
        print(
            f"stream batch {batch}: CoM + BF in {statistics.median(times):.3f} s "
            f"(min {min(times):.3f}); pool reserved {reserved:.2f} GiB; last rep "
            f"{getattr(frames, 'pipeline_runs', '?')} pipeline runs, "
            f"{getattr(frames, 'consume_seconds', float('nan')):.3f} s in their consume hooks"
        )
    pool.free_all_blocks()
    times = []
    for _ in range(args.reps):
        sync()
        t0 = time.perf_counter()
        acq = loaders.load_hdf5(args.master, apply_mask=False)
        dense = open_frames(acq)
        dense_com = dense.center_of_mass()
        dense_bf = dense.masked_sums([mask])[0]
        sync()
        times.append(time.perf_counter() - t0)
        acq.close()
    print(
        f"resident: load + CoM + BF {statistics.median(times):.3f} s; pool reserved "
        f"{pool.total_bytes() / 2**30:.2f} GiB"
    )
    equal = all(bool(cupy.array_equal(a, b, equal_nan=True)) for a, b in zip(com, dense_com))
    print("CoM equal:", equal, "BF equal:", bool(cupy.array_equal(bf, dense_bf)))
    return 0 if equal and bool(cupy.array_equal(bf, dense_bf)) else 1


if __name__ == "__main__":
    raise SystemExit(main())
