"""Kernel variants of the bitshuffle-LZ4 decoder on device-resident chunks (no HDF5 layer).

The chunks are those of ``gpu_load.py``'s synthetic layouts (``quantem.stem4d.io.synthetic``,
192 x 192 uint16 frames at a given dose, one chunk a frame, bitshuffle blocks of 8 KB):
``--distinct`` frames are generated and encoded on the host, copied to the device once and
tiled there to ``--frames`` chunks (262,144 = a 512 x 512 scan, as the load benchmark),
packed one after the other with their offsets. Each variant (``lz4_bitshuffle.cu``'s
``LZ4_SCHEDULE``, ``LZ4_WIDE_MIN`` and ``LZ4_TRANSPOSE``, compiled by NVRTC; ``default`` is
the shipped kernel and may come from the fatbins) decodes all chunks with one ``ChunkDecoder.decode`` call;
its time is CUDA events around that call (both kernels: the chunk walk and the block
decode). Variants are interleaved in rotating order, ``--reps`` rounds after a warm-up;
every variant's output is compared on the device with the first variant's, and the first
variant's first frames with the generated frames, so a wrong variant fails the run.

Usage::

    python benchmarks/gpu_lz4.py --dose 1000 40000 10000000 --variants default s1_t1 s0_t1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor

import numpy as np

#: name -> extra defines (None: the shipped kernel, fatbin where one matches); ``s`` the
#: parse (LZ4_SCHEDULE), ``t`` the bit transpose (LZ4_TRANSPOSE), ``w`` LZ4_WIDE_MIN;
#: ``_c100`` also asks for the largest shared-memory carveout (a launch attribute);
#: ``_ctaN`` N warps a thread block (shipped: 1 for 8 KB blocks, 25 an SM; 4 until
#: 2026-12-02: 6 blocks of 33 KB, 24 warps an SM)
VARIANTS = {
    "default": None,
    "s0_t1": {"LZ4_SCHEDULE": 0, "LZ4_TRANSPOSE": 1},
    "s1_t1": {"LZ4_SCHEDULE": 1, "LZ4_TRANSPOSE": 1},
    "s2_t1": {"LZ4_SCHEDULE": 2, "LZ4_TRANSPOSE": 1},
    "s1_t2": {"LZ4_SCHEDULE": 1, "LZ4_TRANSPOSE": 2},
    "s2_t2": {"LZ4_SCHEDULE": 2, "LZ4_TRANSPOSE": 2},
    "s2_t2_w32": {"LZ4_SCHEDULE": 2, "LZ4_TRANSPOSE": 2, "LZ4_WIDE_MIN": 32},
    "s2_t2_w128": {"LZ4_SCHEDULE": 2, "LZ4_TRANSPOSE": 2, "LZ4_WIDE_MIN": 128},
    "s2_t2_short": {"LZ4_SCHEDULE": 2, "LZ4_TRANSPOSE": 2, "LZ4_SHORT": 1},
    "s2_t2_nofast": {"LZ4_SCHEDULE": 2, "LZ4_TRANSPOSE": 2, "LZ4_FAST": 0},  # until 2026-12-03
    "s2_t2_noshort": {"LZ4_SCHEDULE": 2, "LZ4_TRANSPOSE": 2, "LZ4_SHORT": 0},  # until 2026-12-02
    "default_c100": None,
    "default_cta1": {"WARPS_PER_CTA": 1},
    "default_cta2": {"WARPS_PER_CTA": 2},
    "default_cta3": {"WARPS_PER_CTA": 3},
    "default_cta4": {"WARPS_PER_CTA": 4},
    "default_cta7": {"WARPS_PER_CTA": 7},
}

DETECTOR = (192, 192)
SCAN_COLUMNS = 512


def encode_range(args: tuple[float, int, int]) -> tuple[list[bytes], np.ndarray]:
    from quantem.stem4d.io import synthetic

    dose, start, stop = args
    # the scan of gpu_load.py's layouts (512 x 512), whose first frames these are
    model = synthetic.SyntheticModel((SCAN_COLUMNS, SCAN_COLUMNS), DETECTOR, "uint16", dose, 0)
    frames = np.stack(list(model.make_frames(start, stop)))
    return [synthetic.encode_chunk(f) for f in frames], frames[:4]


def resident_chunks(dose: float, distinct: int, frames: int, processes: int):
    """(device buffer, device offsets, the first generated frames, compressed bytes)."""
    import cupy

    os.environ["OMP_NUM_THREADS"] = "1"
    step = -(-distinct // processes)
    ranges = [(dose, a, min(a + step, distinct)) for a in range(0, distinct, step)]
    with ProcessPoolExecutor(processes) as pool:
        parts = list(pool.map(encode_range, ranges))
    chunks = [c for part, _ in parts for c in part]
    first = parts[0][1]
    sizes = np.array([len(c) for c in chunks], np.int64)
    packed = np.frombuffer(b"".join(chunks), np.uint8)
    copies = -(-frames // distinct)
    device = cupy.tile(cupy.asarray(packed), copies)
    starts = np.zeros(distinct, np.int64)
    starts[1:] = np.cumsum(sizes)[:-1]
    offsets = (starts[None, :] + packed.size * np.arange(copies, dtype=np.int64)[:, None]).ravel()
    offsets = np.append(offsets[:frames], offsets[frames] if frames < offsets.size else device.size)
    compressed = int(offsets[-1] - offsets[0])
    return device, cupy.asarray(offsets), first, compressed


def main(argv: list[str] | None = None) -> int:
    import cupy
    from _common import git_revision

    from quantem.stem4d.cuda import lz4_bitshuffle as lz4

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dose", type=float, nargs="+", default=[1000.0, 40000.0, 10000000.0])
    p.add_argument("--frames", type=int, default=262144)
    p.add_argument("--distinct", type=int, default=2048)
    p.add_argument(
        "--variants", nargs="+", default=["default", "s1_t1", "s0_t1"], choices=sorted(VARIANTS)
    )
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--processes", type=int, default=os.cpu_count())
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    frame_elems = DETECTOR[0] * DETECTOR[1]
    frame_bytes = frame_elems * 2
    results = {"revision": git_revision(), "frames": args.frames, "doses": {}}
    print(f"revision {results['revision']}, {args.frames} frames of {DETECTOR} uint16, "
          f"{args.distinct} distinct, variants {args.variants}", flush=True)  # fmt: skip
    for dose in args.dose:
        buf, offsets, first, compressed = resident_chunks(
            dose, args.distinct, args.frames, args.processes
        )
        n = args.frames
        decoders = {
            name: lz4.ChunkDecoder(2, frame_elems, 8192, extra_defines=VARIANTS[name])
            for name in args.variants
        }
        for name, decoder in decoders.items():
            if name.endswith("_c100"):
                decoder._decode.preferred_shared_memory_carveout = 100
        bpf = decoders[args.variants[0]].blocks_per_frame
        scratch = (cupy.empty(n * bpf, cupy.int64), cupy.empty(n * bpf, cupy.uint32))
        reference = cupy.empty(n * frame_bytes, cupy.uint8)
        out = cupy.empty(n * frame_bytes, cupy.uint8)
        errors = cupy.zeros(n, cupy.int32)
        times: dict[str, list[float]] = {name: [] for name in args.variants}
        for rep in range(args.reps + 1):  # round 0: warm-up and the equality checks
            k = rep % len(args.variants)
            for name in args.variants[k:] + args.variants[:k]:
                target = reference if name == args.variants[0] and rep == 0 else out
                errors.fill(0)
                start, stop = cupy.cuda.Event(), cupy.cuda.Event()
                start.record()
                decoders[name].decode(buf, offsets, n, target, errors, scratch)
                stop.record()
                stop.synchronize()
                if int(cupy.count_nonzero(errors)):
                    print(f"error: variant {name} flagged chunks at dose {dose:g}", file=sys.stderr)
                    return 1
                if rep == 0:
                    if name == args.variants[0]:
                        got = reference[: 4 * frame_bytes].get().view(np.uint16)
                        if not np.array_equal(got, first.ravel()):
                            print(f"error: {name} differs from the frames", file=sys.stderr)
                            return 1
                    elif not bool(cupy.array_equal(out, reference)):
                        print(f"error: {name} differs from {args.variants[0]}", file=sys.stderr)
                        return 1
                    continue
                times[name].append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
        print(f"dose {dose:g}: {compressed / n / 1e3:.2f} KB a chunk, "
              f"{compressed / 1e9:.3f} GB compressed, {n * frame_bytes / 1e9:.2f} GB decoded, "
              "every variant equal", flush=True)  # fmt: skip
        base = statistics.median(times[args.variants[0]])
        row = {}
        for name in args.variants:
            t = statistics.median(times[name])
            row[name] = {"median_s": t, "min_s": min(times[name]), "max_s": max(times[name])}
            print(f"  {name:<9} {t:.5f} s  ({min(times[name]):.5f}-{max(times[name]):.5f})  "
                  f"{n * frame_bytes / t / 1e9:6.1f} GB/s decoded  "
                  f"{100 * (t / base - 1):+6.1f}% vs {args.variants[0]}", flush=True)  # fmt: skip
        results["doses"][f"{dose:g}"] = {"compressed_bytes": compressed, "variants": row}
        del buf, offsets, scratch, reference, out, errors, decoders
        cupy.get_default_memory_pool().free_all_blocks()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
