"""Kernel-level benchmark of the CUDA backend on generated chunks (no HDF5 layer).

Frames resembling the synthetic acquisition (a bright-field disk of ~7 counts per pixel
over a ~0.8-count background, Poisson) are compressed with the bitshuffle library into
HDF5-filter chunks and concatenated into one raw file. Measured, each against its byte
count: the LZ4+bitshuffle kernels on device-resident chunks (both staging variants), the
full staged pipeline (pread -> pinned -> H2D -> decode) from that file with a warm page
cache, the rANS decode kernel (dense and fused masked sum) on a resident ``.qem`` payload
of the same frames, and the dense masked-sum kernel.

Usage::

    python benchmarks/gpu_kernels.py --frames 16384 --det 192 192 --dir /tmp/k
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from _common import gpu_times

RESULTS: dict = {}


def say(key, value, unit="", note=""):
    RESULTS[key] = value
    shown = f"{value:.5f}" if isinstance(value, float) else str(value)
    print(f"{key:<40} {shown:>14} {unit:<5} {note}", flush=True)


def make_chunks(args_tuple):
    start, stop, det, seed = args_tuple
    import bitshuffle

    rng = np.random.default_rng([seed, start])
    rr, cc = np.mgrid[: det[0], : det[1]]
    disk = (rr - det[0] / 2) ** 2 + (cc - det[1] / 2) ** 2 <= (0.12 * min(det)) ** 2
    n_disk = int(disk.sum())
    out = []
    frames = []
    for _ in range(start, stop):
        frame = rng.poisson(0.8, det).astype(np.uint16)
        frame[disk] += rng.poisson(6.2, n_disk).astype(np.uint16)
        frames.append(frame)
        body = bitshuffle.compress_lz4(frame.ravel(), 4096).tobytes()
        out.append(struct.pack(">QI", frame.nbytes, 8192) + body)
    return out, np.stack(frames)


def gpu_time(fn, reps=5, warmup=1):
    return statistics.median(gpu_times(fn, reps, warmup))


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--frames", type=int, default=32768)
    p.add_argument("--distinct", type=int, default=2048, help="distinct frames, tiled to --frames")
    p.add_argument("--det", type=int, nargs=2, default=[192, 192])
    p.add_argument("--dir", default="/tmp/gpu_kernels")
    p.add_argument("--processes", type=int, default=os.cpu_count())
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    import cupy

    from quantem.stem4d.acquisition import Acquisition
    from quantem.stem4d.cuda import detector_kernels as dk
    from quantem.stem4d.cuda import hdf5_pipeline
    from quantem.stem4d.cuda import lz4_bitshuffle as lz4

    det = tuple(args.det)
    n = args.frames
    distinct = min(args.distinct, n)
    step = max(1, distinct // (2 * args.processes))
    os.environ["OMP_NUM_THREADS"] = "1"  # bitshuffle's OpenMP teams oversubscribe the workers
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.processes) as pool:
        tasks = [(a, min(a + step, distinct), det, 1) for a in range(0, distinct, step)]
        parts = list(pool.map(make_chunks, tasks))
    base_chunks = [c for part, _ in parts for c in part]
    base_frames = np.concatenate([f for _, f in parts])
    repeats = -(-n // distinct)
    chunks = (base_chunks * repeats)[:n]
    frames = np.tile(base_frames, (repeats, 1, 1))[:n]
    say("make_chunks_s", time.perf_counter() - t0, "s")
    sizes = np.array([len(c) for c in chunks], dtype=np.int64)
    compressed = int(sizes.sum())
    decoded = frames.nbytes
    say("frames", n, "", f"{distinct} distinct, tiled")
    say("compressed_bytes", compressed, "B", f"ratio {decoded / compressed:.2f}")
    blob = b"".join(chunks)
    offsets = np.zeros(n + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(sizes)

    dbuf = cupy.asarray(np.frombuffer(blob, dtype=np.uint8))
    doff = cupy.asarray(offsets)
    expected = cupy.asarray(frames)
    for stage in (True, False):
        dec = lz4.ChunkDecoder(2, det[0] * det[1], 8192, stage_compressed=stage)
        scratch = (
            cupy.empty(n * dec.blocks_per_frame, cupy.int64),
            cupy.empty(n * dec.blocks_per_frame, cupy.uint32),
        )
        out = cupy.empty((n, *det), dtype=cupy.uint16)
        errors = cupy.zeros(n, dtype=cupy.int32)
        t = gpu_time(lambda: dec.decode(dbuf, doff, n, out, errors, scratch))  # noqa: B023
        ok = bool(cupy.array_equal(out, expected)) and int(errors.max()) == 0
        say(
            f"lz4_kernel_stage{int(stage)}_s",
            t,
            "s",
            f"{decoded / t / 1e9:.1f} GB/s decoded, correct={ok}",
        )
    out = None

    # The staged pipeline from a raw file holding the chunks back to back.
    path = Path(args.dir)
    path.mkdir(parents=True, exist_ok=True)
    raw = path / "chunks.bin"
    raw.write_bytes(blob)
    raw.read_bytes()
    index = SimpleNamespace(
        frame_shard=np.zeros(n, np.int32), frame_offset=offsets[:-1].copy(), frame_nbytes=sizes
    )
    source = SimpleNamespace(
        index=index,
        shard_paths=[str(raw)],
        detector_shape=det,
        dtype=np.dtype(np.uint16),
        n_frames=n,
    )
    for batch in (16 << 20, 64 << 20, 256 << 20):
        hdf5_pipeline.decode_source_to_device(source, batch_bytes=batch)  # warm
        times = []
        for _ in range(5):
            cupy.cuda.Device().synchronize()
            t0 = time.perf_counter()
            res, stats = hdf5_pipeline.decode_source_to_device(source, batch_bytes=batch)
            times.append(time.perf_counter() - t0)
        ok = bool(cupy.array_equal(res, expected))
        res = None
        t = statistics.median(times)
        say(
            f"pipeline_batch{batch >> 20}MiB_s",
            t,
            "s",
            f"{compressed / t / 1e9:.2f} GB/s compressed, read {stats.read_seconds:.3f}s, correct={ok}",
        )

    # QEM: encode the same frames, resident payload, decode kernels.
    from quantem.stem4d.io.qem.writer import save_qem

    qem = path / "k.qem"
    side = int(np.sqrt(n))
    scan = (n // side, side) if n % side == 0 else (1, n)
    t0 = time.perf_counter()
    save_qem(Acquisition(frames.reshape(*scan, *det), {}, np.ones(det, bool), "cpu"), qem)
    say("qem_encode_s", time.perf_counter() - t0, "s")
    say("qem_bytes", qem.stat().st_size, "B")
    from quantem.stem4d import io

    enc = io.load(qem, backend="cuda", representation="encoded")
    ids = np.arange(enc.encoded.n_blocks)
    res = enc.encoded.decode_blocks(ids)
    ok = bool(cupy.array_equal(res.reshape(-1)[: expected.size], expected.reshape(-1)))
    res = None
    t = gpu_time(lambda: enc.encoded.decode_blocks(ids))
    say("qem_decode_kernel_s", t, "s", f"{decoded / t / 1e12:.3f} TB/s decoded, correct={ok}")
    rr, cc = np.mgrid[: det[0], : det[1]]
    bf = (rr - det[0] / 2) ** 2 + (cc - det[1] / 2) ** 2 <= (0.12 * min(det)) ** 2
    t = gpu_time(lambda: enc.encoded.masked_sum(bf))
    ref = dk.masked_sum(expected.reshape(*scan, *det), bf)
    ok = bool(cupy.array_equal(enc.encoded.masked_sum(bf), ref))
    say("qem_fused_bf_sum_s", t, "s", f"correct={ok}")
    t = gpu_time(lambda: dk.masked_sum(expected.reshape(*scan, *det), bf), 20, 3)
    say(
        "dense_bf_sum_s",
        t,
        "s",
        f"{n} frames; x{262144 / n:.1f} -> {t * 262144 / n * 1e3:.3f} ms at 512x512",
    )
    t = gpu_time(lambda: dk.sum_frames(expected.reshape(*scan, *det)))
    say("dense_sum_frames_s", t, "s", f"{decoded / t / 1e12:.2f} TB/s")
    ql = []
    for _ in range(5):
        t0 = time.perf_counter()
        a = io.load(qem, backend="cuda")
        cupy.cuda.Device().synchronize()
        ql.append(time.perf_counter() - t0)
        a.close()
    say("qem_warm_load_s", statistics.median(ql), "s")
    enc.close()
    if args.json:
        Path(args.json).write_text(
            json.dumps(RESULTS, sort_keys=True, indent=1, default=str) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
