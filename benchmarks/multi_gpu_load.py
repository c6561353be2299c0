"""Benchmark of sharded loads: 1 GPU against N GPUs of one host, with the shared floor.

For one ARINA acquisition (``--data DIR``, or ``--dir DIR`` with a synthetic layout of the
512 x 512 x 192 x 192 uint16 model written by ``gpu_load.py``'s layout writer) it
measures, page cache warm:

* the host floor with every GPU working at once: each GPU's share of the chunk spans
  (the rows ``quantem.stem4d.cuda.sharded.split_rows`` gives it) pread into its own pinned
  buffer, all GPUs' reads concurrent through one pool (the host's read bandwidth is
  shared); all GPUs' host-to-device copies of those buffers at once; and our staging
  engine with an empty launch on every GPU at once (read and copy overlapped);
* the one-GPU warm load (``io.load(..., backend="cuda")``) and the sharded warm load
  (``devices=[...]``), medians of ``--reps``, their ratio against the issue's goal
  (at most 0.6x with two GPUs), each GPU's bytes and pipeline seconds (stage timeline
  with ``--profile``);
* correctness in the same run: every GPU's block equals the one-GPU load's rows, and BF,
  ADF, the summed pattern, centre of mass and a frame are bit-identical to the one-GPU
  products; ``--qem FILE`` repeats loads and checks for a ``.qem`` file, dense and
  encoded.

Usage::

    python benchmarks/multi_gpu_load.py --data /data/acq --devices all --json out.json
    python benchmarks/multi_gpu_load.py --dir /var/tmp/bench --layout 10000:40000 \
        --devices 0,1 --qem /var/tmp/bench/full.qem --json out.json
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

import numpy as np
from _common import git_revision

RESULTS: dict = {}
JSON_PATH: list[Path] = []


def say(key: str, value, unit: str = "", note: str = "") -> None:
    """Print one figure and keep it (rewritten to --json at once, so a cut run keeps it)."""
    RESULTS[key] = value
    shown = f"{value:.4f}" if isinstance(value, float) else str(value)
    print(f"{key:<52} {shown:>14} {unit:<4} {note}", flush=True)
    if JSON_PATH:
        JSON_PATH[0].write_text(json.dumps(RESULTS, sort_keys=True, indent=1, default=str) + "\n")


def median(values) -> float:
    return float(statistics.median(values))


def synchronize_all(devices) -> None:
    import cupy

    for d in devices:
        with cupy.cuda.Device(d):
            cupy.cuda.runtime.deviceSynchronize()


def device_shares(source, devices):
    """Each GPU's frames ``(first, last)``: the rows the sharded loader gives it."""
    from quantem.stem4d.cuda.sharded import split_rows

    scan_c = int(source.scan_shape[1])
    rows = split_rows(int(source.scan_shape[0]), len(devices))
    return [(r0 * scan_c, r1 * scan_c) for r0, r1 in rows]


def floors(source, devices, threads: int, reps: int) -> None:
    """Read, copy and staging floors with every GPU working at once (best of ``reps``)."""
    import cupy

    from quantem.stem4d.cuda import hdf5_pipeline, staging
    from quantem.stem4d.errors import ArinaFormatError

    index = source.index
    shard = np.asarray(index.frame_shard)
    offset = np.asarray(index.frame_offset, dtype=np.int64)
    nbytes = np.asarray(index.frame_nbytes, dtype=np.int64)
    plans = []
    for d, (a, b) in zip(devices, device_shares(source, devices)):
        reads, _, size = hdf5_pipeline.plan_span_reads(
            shard[a:b], offset[a:b], nbytes[a:b], staging.READ_PIECE_BYTES
        )
        with cupy.cuda.Device(d):
            host = np.frombuffer(cupy.cuda.alloc_pinned_memory(size), dtype=np.uint8, count=size)
            device_buffer = cupy.empty(size, dtype=cupy.uint8)
        plans.append((d, reads, host, device_buffer, (a, b)))
    total = sum(p[2].size for p in plans)
    say("floor_span_bytes", total, "B", f"{len(devices)} shares")
    pool = ThreadPoolExecutor(threads)
    with staging.OpenFiles(source.shard_paths, ArinaFormatError) as files:

        def read_share(plan) -> None:
            _, reads, host, _, _ = plan
            view = memoryview(host)
            list(pool.map(lambda r: files.read_into(view[r[2] : r[2] + r[3]], r[0], r[1]), reads))

        def copy_share(plan) -> None:
            d, _, host, device_buffer, _ = plan
            with cupy.cuda.Device(d):
                stream = cupy.cuda.Stream(non_blocking=True)
                cupy.cuda.runtime.memcpyAsync(
                    device_buffer.data.ptr, host.ctypes.data, host.size, 1, stream.ptr
                )
                stream.synchronize()

        def staged_batches(a: int, b: int) -> list:
            batches = []
            for x, y in staging.plan_batches(nbytes[a:b], hdf5_pipeline.DEFAULT_BATCH_BYTES):
                reads, _, size = hdf5_pipeline.plan_span_reads(
                    shard[a + x : a + y], offset[a + x : a + y], nbytes[a + x : a + y],
                    staging.READ_PIECE_BYTES,
                )  # fmt: skip
                batches.append(staging.Batch(reads, size))
            return batches

        staged = {plan[0]: staged_batches(*plan[4]) for plan in plans}

        def staged_share(plan) -> None:
            d = plan[0]
            with cupy.cuda.Device(d):
                staging.run_staged(files, staged[d], lambda i, buf, s: None, threads=threads)

        for name, work in (("read", read_share), ("h2d", copy_share), ("staged", staged_share)):
            times = []
            for _ in range(reps):
                synchronize_all(devices)
                with ThreadPoolExecutor(len(plans)) as per_gpu:
                    t0 = time.perf_counter()
                    list(per_gpu.map(work, plans))
                    times.append(time.perf_counter() - t0)
            best = min(times)
            say(f"floor_{name}_all_gpus_s", best, "s", f"{total / best / 1e9:.1f} GB/s, best")
    pool.shutdown()
    del plans


def timed_loads(load, devices, reps: int):
    times, stats = [], None
    for _ in range(reps):
        synchronize_all(devices)
        t0 = time.perf_counter()
        acq = load()
        synchronize_all(devices)
        times.append(time.perf_counter() - t0)
        stats = acq.metadata.get("load_stats")
        acq.close()
        del acq
    return times, stats


def products(session):
    import cupy

    disk = session.bright_field_disk()
    com = session.center_of_mass()
    return {
        "bf": cupy.asnumpy(session.bf()),
        "adf": cupy.asnumpy(session.adf(disk.radius, None)),
        "mean_dp_exact": session.mean_dp_exact(),
        "com_row": cupy.asnumpy(com.row),
        "com_col": cupy.asnumpy(com.col),
        "frame": cupy.asnumpy(session.frame((257, 129))),
    }


def check(path, devices, options, tag: str) -> None:
    """Blocks equal the one-GPU rows, products bit-identical to the one-GPU products."""
    import cupy

    from quantem.stem4d import io
    from quantem.stem4d.cuda.sharded import _copy_to
    from quantem.stem4d.detector import prepare

    with io.load(path, backend="cuda", **options) as one:
        reference = products(prepare(one))
        with io.load(path, backend="cuda", devices=devices, **options) as many:
            if one.representation == "dense":
                for block in many.data:
                    part = _copy_to(one.data[block.rows[0] : block.rows[1]], 0, block.device)
                    with cupy.cuda.Device(block.device):
                        if not bool(cupy.array_equal(part, block.data)):
                            raise SystemExit(f"{tag}: GPU {block.device}'s block differs")
                    del part
            got = products(prepare(many))
    for name, value in reference.items():
        if got[name].dtype != value.dtype or got[name].tobytes() != value.tobytes():
            raise SystemExit(f"{tag}: {name} differs from the one-GPU product")
    say(f"{tag}_check", "blocks and products bit-identical to one GPU")


def bench(path, devices, options, reps: int, tag: str) -> None:
    from quantem.stem4d import io

    timed_loads(lambda: io.load(path, backend="cuda", **options), [0], 1)  # warm-up
    one, one_stats = timed_loads(lambda: io.load(path, backend="cuda", **options), [0], reps)
    timed_loads(lambda: io.load(path, backend="cuda", devices=devices, **options), devices, 1)
    many, many_stats = timed_loads(
        lambda: io.load(path, backend="cuda", devices=devices, **options), devices, reps
    )
    say(f"{tag}_1gpu_warm_s", median(one), "s", f"median of {reps}, min {min(one):.4f}")
    say(
        f"{tag}_{len(devices)}gpu_warm_s", median(many), "s",
        f"median of {reps}, min {min(many):.4f}",
    )  # fmt: skip
    say(f"{tag}_ratio", median(many) / median(one), "x", "goal <= 0.6 with 2 GPUs")
    say(f"{tag}_1gpu_stats", one_stats)
    for entry in many_stats["devices"]:
        say(f"{tag}_gpu{entry['device']}_stats", entry)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, help="an ARINA acquisition's folder")
    parser.add_argument("--dir", type=Path, help="where synthetic layouts are written")
    parser.add_argument("--layout", default="10000:40000", help="FRAMES_PER_SHARD:DOSE (--dir)")
    parser.add_argument("--devices", default="all", help="'all' or ids such as 0,1")
    parser.add_argument("--qem", type=Path, default=None, help="also a .qem file, dense+encoded")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=min(32, os.cpu_count() or 4))
    parser.add_argument("--profile", action="store_true", help="per-GPU staging timelines")
    parser.add_argument("--json", default=None)
    # What gpu_load.py's layout writer reads.
    parser.add_argument("--scan", type=int, nargs=2, default=[512, 512])
    parser.add_argument("--det", type=int, nargs=2, default=[192, 192])
    parser.add_argument("--dtype", default="uint16")
    parser.add_argument("--distinct", type=int, default=2048)
    parser.add_argument("--processes", type=int, default=os.cpu_count())
    args = parser.parse_args(argv)
    if args.json:
        JSON_PATH.append(Path(args.json))
    if (args.data is None) == (args.dir is None):
        parser.error("give exactly one of --data DIR and --dir DIR")

    import cupy
    import gpu_load

    from quantem.stem4d.cuda import sharded, staging
    from quantem.stem4d.io.arina import open_arina

    staging.PROFILE = args.profile
    count = sharded.device_count()
    spec = args.devices if args.devices == "all" else [int(v) for v in args.devices.split(",")]
    devices = sharded.parse_devices(spec, count)
    for d in devices:
        props = cupy.cuda.runtime.getDeviceProperties(d)
        say(f"device_{d}", props["name"].decode())
    say("devices", devices)
    say("host_cores", os.cpu_count())
    say("revision", git_revision())
    if args.data is not None:
        master = gpu_load.find_master(args.data)
    else:
        per, dose = args.layout.split(":")
        master = gpu_load.write_layout(args.dir, int(per), float(dose), args.scan[0], args)
    source = open_arina(master)
    gpu_load.warm_cache(source.shard_paths, args.threads)
    say("shape", [*source.scan_shape, *source.detector_shape, str(source.dtype)])
    floors(source, devices, args.threads, args.reps)
    check(master, devices, {}, "hdf5")
    bench(master, devices, {}, args.reps, "hdf5")
    if args.qem is not None:
        gpu_load.warm_cache([args.qem], args.threads)
        for representation in ("dense", "encoded"):
            options = {"representation": representation}
            check(args.qem, devices, options, f"qem_{representation}")
            bench(args.qem, devices, options, args.reps, f"qem_{representation}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
