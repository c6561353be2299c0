"""Benchmark: the GPU cost of ``verify_source`` on the warm ``backend="cuda"`` HDF5 load.

On one ARINA acquisition (``--data DIR`` with one ``*_master.h5``, or a synthetic layout
written under ``--dir`` by ``benchmarks/gpu_load.py``'s generator: 512 x 512 x 192 x 192
uint16 by default, ``--distinct`` generated frames laid out cyclically), it times, back to
back in one process (kernels compiled, pinned staging and the CuPy pool populated by a
first load of each, page cache warm), ``io.load(master, backend="cuda")`` without and with
``verify_source=True``, alternating the two ``--rounds`` times, ``--reps`` loads each
(wall clock with device synchronisation), and prints the medians and their ratio (goal:
at most 1.10). Before timing, the verified load is checked equal to the unverified one
(that a changed chunk is caught is ``tests/hardware/test_cuda_verify_source.py``).

Usage::

    python benchmarks/gpu_verify_source.py --dir /var/tmp/bench [--layout 2048:40000]
    python benchmarks/gpu_verify_source.py --data /data/acq
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_load


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="an ARINA acquisition's folder")
    parser.add_argument("--dir", type=Path, help="where the synthetic layout is written")
    parser.add_argument("--layout", default="2048:40000",
                        help="FRAMES_PER_SHARD:DOSE[:SCAN_ROWS] of the synthetic layout")  # fmt: skip
    parser.add_argument("--scan", type=int, nargs=2, default=[512, 512])
    parser.add_argument("--det", type=int, nargs=2, default=[192, 192])
    parser.add_argument("--dtype", default="uint16")
    parser.add_argument("--distinct", type=int, default=2048)
    parser.add_argument("--processes", type=int, default=os.cpu_count())
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--staging", default="pread", choices=["pread", "mapped"])
    args = parser.parse_args(argv)
    if (args.data is None) == (args.dir is None):
        parser.error("give one of --data DIR or --dir DIR")

    import cupy

    from quantem.stem4d import io
    from quantem.stem4d.io.arina import open_arina

    if args.data is not None:
        master = gpu_load.find_master(args.data)
    else:
        parts = args.layout.split(":")
        per_shard, dose = int(parts[0]), float(parts[1])
        rows = int(parts[2]) if len(parts) > 2 else args.scan[0]
        master = gpu_load.write_layout(args.dir, per_shard, dose, rows, args)
    index_dir = master.parent / "index"
    source = open_arina(master, index_dir=index_dir)  # records the chunk checksums once
    gpu_load.warm_cache([master, *source.shard_paths], 16)
    options = {"backend": "cuda", "index_dir": str(index_dir), "apply_mask": False,
               "staging": args.staging}  # fmt: skip
    if args.threads is not None:
        options["threads"] = args.threads

    plain = io.load(master, **options)
    checked = io.load(master, **options, verify_source=True)
    if not bool(cupy.array_equal(plain.data, checked.data)):
        raise SystemExit("error: the verified load differs from the unverified one")
    del plain, checked
    times: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(args.rounds):
        for name, verify in (("off", False), ("on", True)):
            runs, _stats = gpu_load.wall_time(
                lambda v=verify: io.load(master, **options, verify_source=v), args.reps
            )
            times[name] += runs
    off, on = statistics.median(times["off"]), statistics.median(times["on"])
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(
        f"{source.n_frames} frames {tuple(source.detector_shape)} {source.dtype}, "
        f"{source.index.compressed_bytes / 1e9:.3f} GB compressed, {len(source.shard_paths)} "
        f"shards, staging {args.staging}, device {device}"
    )
    print(f"warm load, verify_source off: {off:.4f} s median (min {min(times['off']):.4f})")
    print(f"warm load, verify_source on:  {on:.4f} s median (min {min(times['on']):.4f})")
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"ratio on/off: {on / off:.3f} (goal <= 1.10)  [{stamp}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
