"""rANS decode of a resident ``.qem`` payload on the GPU: kernel v1 against v2, one run.

Self-contained. It writes a ``.qem`` of ``--distinct`` synthetic frames of the full-size
model (``quantem.stem4d.io.synthetic``: 512 x 512 scan, 192 x 192 uint16, dose 40000 by default,
the generator ``benchmarks/gpu_load.py`` uses, its first ``--distinct`` frames, in
parallel processes), then lays its blocks out cyclically over the whole scan on the device,
as ``gpu_load.py``'s layouts repeat their distinct frames: a resident payload of the full
size (every copy of a block its own bytes, so no read is served by a smaller working set)
and a block table of ``scan / block_frames`` blocks. On it, with CUDA events (median of
``--reps`` after warm-up):

* the rANS decode of the first 4 GiB of frames (7,281 blocks at the defaults, as
  ``gpu_load.py --qem`` times it) by each kernel, in TB/s of decoded output, against the
  one-read floor of those bytes (a device-to-device copy of as many bytes);
* the encoded BF ``masked_sum`` (fused decode + reduction over the whole scan, disk of
  radius det/8 on the valid pixels, as ``gpu_load.py``), kernel alone and the whole query
  (mask packing, output allocation, launch, status check), by each kernel;
* checks in the same run: every decoded frame equals the CPU decoder's (and the generated
  counts), the kernels' outputs are equal, the BF sums equal numpy's on the CPU frames.

Kernel variants (``--variants``, on by default): v2 with its register allocation held to 2
thread blocks per SM instead of 3 (``V2_MIN_CTAS=2``; compiled by NVRTC).

``--cpu-only`` stops before the GPU: generation, the file, the CPU decode, and the tiled
payload and block table checked by the CPU decoder (what a machine without a GPU can run).

Usage::

    python benchmarks/gpu_rans.py --json out.json
    python benchmarks/gpu_rans.py --cpu-only --scan 4 64 --det 32 32 --distinct 64
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from _common import git_revision

RESULTS: dict = {}
JSON_PATH: list[Path] = []
DECODE_BYTES = 4 << 30  # decoded output of the timed dense decode (gpu_load.py's batch)


def say(key: str, value, unit: str = "", note: str = "") -> None:
    """Print one figure and keep it (rewritten to --json at once, so a cut run keeps it)."""
    RESULTS[key] = value
    shown = f"{value:.5f}" if isinstance(value, float) else str(value)
    print(f"{key:<44} {shown:>14} {unit:<4} {note}", flush=True)
    if JSON_PATH:
        JSON_PATH[0].write_text(json.dumps(RESULTS, sort_keys=True, indent=1, default=str) + "\n")


def _frames(model, start: int, stop: int) -> np.ndarray:
    return model.make_frames(start, stop)


def generate(args) -> tuple[object, np.ndarray]:
    """The model and its first ``--distinct`` frames (``(distinct, det_r, det_c)``)."""
    from quantem.stem4d.io import synthetic

    model = synthetic.SyntheticModel(
        tuple(args.scan), tuple(args.det), args.dtype, args.dose, args.seed
    )
    distinct = args.distinct
    step = -(-distinct // max(1, args.processes))
    starts = list(range(0, distinct, step))
    with ProcessPoolExecutor(max(1, min(args.processes, len(starts)))) as pool:
        parts = pool.map(
            _frames, [model] * len(starts), starts, [min(a + step, distinct) for a in starts]
        )
        frames = np.concatenate([p.reshape(-1, *args.det) for p in parts])
    return model, frames


def write_distinct(model, frames: np.ndarray, scan_c: int, path: Path) -> Path:
    from quantem.stem4d.acquisition import Acquisition
    from quantem.stem4d.io.qem.writer import save_qem

    det = frames.shape[1:]
    mask = np.asarray(model.pixel_mask)
    data = frames.reshape(-1, scan_c, *det)
    save_qem(Acquisition(data, {"pixel_mask": mask}, mask == 0, "cpu"), path, overwrite=True)
    return path


class Layout:
    """The distinct blocks laid out cyclically over the full scan (host side)."""

    def __init__(self, qem, n_frames: int):
        from quantem.stem4d.cuda import qem_pipeline

        index = qem.block_index
        bf = int(qem.block_frames)
        if int(qem.n_frames) % bf:
            raise SystemExit("--distinct must be a multiple of the block frames")
        _, extents = qem_pipeline.block_extents(index)
        buffer = np.asarray(qem.buffer)
        self.distinct = np.concatenate(
            [
                buffer[int(o) : int(o) + int(e)]
                for o, e in zip(index["offset"], extents, strict=True)
            ]
        )
        local = np.zeros(extents.size, dtype=np.int64)
        np.cumsum(extents[:-1], out=local[1:])
        nd = int(qem.n_blocks)
        self.n_blocks = -(-n_frames // bf)
        self.copies = -(-self.n_blocks // nd)
        b = np.arange(self.n_blocks)
        self.index = index[b % nd].copy()
        self.offsets = (b // nd) * self.distinct.size + local[b % nd]
        self.out_frames = b * bf
        self.block_frames = bf
        self.n_distinct_blocks = nd

    def host_payload(self) -> np.ndarray:
        return np.tile(self.distinct, self.copies)


def cpu_check_layout(qem, layout: Layout, cpu_frames: np.ndarray, blocks: int) -> bool:
    """Decode the first and last ``blocks`` blocks of the tiled layout with the CPU codec."""
    from quantem.stem4d.io.qem import rans

    payload = layout.host_payload()
    n = layout.n_blocks
    ids = np.unique(np.r_[np.arange(min(blocks, n)), np.arange(max(0, n - blocks), n)])
    index = layout.index[ids]
    counts = index["n_frames"].astype(np.int64)
    rows = np.zeros(ids.size, dtype=np.int64)
    np.cumsum(counts[:-1], out=rows[1:])
    out = np.zeros((int(counts.sum()), cpu_frames.shape[1] * cpu_frames.shape[2]), qem.dtype)
    status = np.zeros(ids.size, dtype=np.int64)
    rans.decode_blocks(
        payload, payload[: payload.size - payload.size % 2].view("<u2"),
        layout.offsets[ids], index["mode"].astype(np.int64), counts,
        index["n_words"].astype(np.int64), index["n_nonzero"].astype(np.int64),
        index["n_escapes"].astype(np.int64), rows, qem.header.stored_itemsize,
        qem.header.frame_pixels, qem.model.group_class, qem.decode_table, out, status, 0, ids.size,
    )  # fmt: skip
    frames = np.concatenate(
        [
            np.arange(int(layout.out_frames[i]), int(layout.out_frames[i]) + int(c))
            for i, c in zip(ids, counts, strict=True)
        ]
    )
    expected = cpu_frames.reshape(cpu_frames.shape[0], -1)[frames % cpu_frames.shape[0]]
    return bool(not status.any() and np.array_equal(out, expected))


def gpu_median(fn, reps: int, warmup: int = 2) -> float:
    from _common import gpu_times

    return float(statistics.median(gpu_times(fn, reps, warmup)))


def bench_gpu(args, qem, layout: Layout, cpu_frames: np.ndarray, bf_mask: np.ndarray) -> None:
    import cupy

    from quantem.stem4d.cuda.rans_decode import DeviceBlockTable, QemBlockDecoder, pack_mask_bits

    det = tuple(args.det)
    itemsize = np.dtype(qem.dtype).itemsize
    frame_bytes = det[0] * det[1] * itemsize
    payload = cupy.tile(cupy.asarray(layout.distinct), layout.copies)
    say("resident_payload_bytes", int(payload.size), "B", f"{layout.n_blocks} blocks")
    table = DeviceBlockTable.from_index(layout.index, layout.offsets, layout.out_frames)
    cpu_dev = cupy.asarray(cpu_frames)
    distinct = cpu_frames.shape[0]

    decoders = {"v1": QemBlockDecoder(qem, "v1"), "v2": QemBlockDecoder(qem, "v2")}
    if args.variants:
        decoders["v2_minctas2"] = QemBlockDecoder(qem, "v2", {"V2_MIN_CTAS": 2})
    for name, d in decoders.items():
        regs = d.registers
        say(f"{name}.launch", f"dense {d.ctas[0]} CTAs, fused {d.ctas[1]} CTAs x {16} warps",
            "", f"registers dense {regs[0]} fused {regs[1]}, shared {d.shared_bytes} B/CTA")  # fmt: skip

    # Dense decode of the first 4 GiB of frames.
    batch = min(layout.n_blocks, max(1, DECODE_BYTES // (layout.block_frames * frame_bytes)))
    sub = table.slice(0, batch)
    n_out = batch * layout.block_frames
    out_bytes = n_out * frame_bytes
    outs = {}
    status = cupy.zeros(batch, dtype=cupy.int32)
    out = cupy.empty((n_out, *det), dtype=qem.dtype)
    floor_dst = cupy.empty_like(out)
    floor = gpu_median(
        lambda: cupy.cuda.runtime.memcpyAsync(
            floor_dst.data.ptr, out.data.ptr, out_bytes, 3, cupy.cuda.get_current_stream().ptr
        ),
        args.reps,
    )
    floor_dst = None
    say(
        "floor_d2d_copy_s",
        floor,
        "s",
        f"{out_bytes / 1e9:.2f} GB copied, {out_bytes / floor / 1e12:.3f} TB/s of output bytes",
    )
    for name, d in decoders.items():
        out.fill(0xAB if itemsize == 1 else 0xABAB)
        t = gpu_median(lambda d=d: d.decode_dense(payload, sub, out, status), args.reps)
        ok_status = int(status.max()) == 0
        same = ok_status and all(
            bool(cupy.array_equal(out[a : a + distinct], cpu_dev[: min(distinct, n_out - a)]))
            for a in range(0, n_out, distinct)
        )
        outs[name] = cupy.asnumpy(out[:: max(1, n_out // 4096)])  # a sample for v1 == v2
        say(f"{name}.decode_s", t, "s",
            f"{batch} blocks, {out_bytes / t / 1e12:.3f} TB/s decoded, x{t / floor:.2f} the copy floor, equals CPU: {same}")  # fmt: skip
    base = outs["v1"]
    say("dense_outputs_equal", all(np.array_equal(base, o) for o in outs.values()))
    out = None
    cupy.get_default_memory_pool().free_all_blocks()

    # Encoded BF masked_sum over the whole scan (fused decode + reduction).
    n_frames = layout.n_blocks * layout.block_frames
    rows, cols = np.nonzero(bf_mask)
    ref = cpu_frames[:, rows, cols].astype(np.uint64).sum(axis=1)
    ref = np.resize(ref, n_frames)
    bits_host = pack_mask_bits(bf_mask, decoders["v1"].n_groups)
    sums_by = {}
    for name, d in decoders.items():
        sums = tuple(cupy.zeros(n_frames, dtype=cupy.uint64) for _ in range(3))
        st = cupy.zeros(layout.n_blocks, dtype=cupy.int32)
        bits = cupy.asarray(bits_host)
        t_kernel = gpu_median(
            lambda d=d, b=bits, s=sums, st=st: d.reduce_moments(payload, table, b, s, st),
            args.reps,
        )

        def query(d=d):  # what EncodedPayload.masked_sum does around the kernel
            b = cupy.asarray(pack_mask_bits(bf_mask, d.n_groups))
            s3 = tuple(cupy.zeros(n_frames, dtype=cupy.uint64) for _ in range(3))
            s = cupy.zeros(layout.n_blocks, dtype=cupy.int32)
            d.reduce_moments(payload, table, b, s3, s)
            if int(s.max()) != 0:
                raise RuntimeError("block decode failed")
            return s3[0]

        t_query = gpu_median(query, args.reps)
        total = query().get()
        sums_by[name] = total
        say(f"{name}.bf_masked_sum_s", t_query, "s",
            f"kernel {t_kernel * 1e3:.2f} ms, {n_frames} frames, {len(rows)} px, equals CPU: {bool(np.array_equal(total, ref))}")  # fmt: skip
    say("bf_sums_equal", all(np.array_equal(sums_by["v1"], s) for s in sums_by.values()))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scan", type=int, nargs=2, default=[512, 512])
    parser.add_argument("--det", type=int, nargs=2, default=[192, 192])
    parser.add_argument("--dtype", default="uint16")
    parser.add_argument("--dose", type=float, default=40000.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--distinct", type=int, default=2048)
    parser.add_argument("--processes", type=int, default=os.cpu_count())
    parser.add_argument("--reps", type=int, default=11)
    parser.add_argument("--no-variants", dest="variants", action="store_false")
    parser.add_argument("--cpu-only", action="store_true", help="stop before the GPU")
    parser.add_argument("--revision", default=None, help="revision to print (default: git)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    scan_c = args.scan[1]
    if args.distinct % scan_c or args.distinct > args.scan[0] * scan_c:
        parser.error("--distinct must be a multiple of the scan's columns, at most the scan")
    if args.json:
        JSON_PATH.append(Path(args.json))
    say("revision", args.revision or git_revision())
    say("host_cores", os.cpu_count())

    from quantem.stem4d.io.qem.reader import QemFile

    t0 = time.perf_counter()
    model, frames = generate(args)
    say("generate_s", time.perf_counter() - t0, "s", f"{args.distinct} distinct frames")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path = write_distinct(model, frames, scan_c, Path(tmp) / "distinct.qem")
        say("write_qem_s", time.perf_counter() - t0, "s", f"{path.stat().st_size} bytes")
        with QemFile(path) as qem:
            cpu_frames = qem.decode_blocks(np.arange(qem.n_blocks))
            say("cpu_decode_equals_counts", bool(np.array_equal(cpu_frames, frames)))
            index = qem.block_index
            modes = np.bincount(index["mode"].astype(np.int64), minlength=3)
            say(
                "distinct_blocks",
                int(qem.n_blocks),
                "",
                f"modes ZERO/RAW/RANS {modes.tolist()}, {int(qem.block_frames)} frames each",
            )
            nz = int(index["n_nonzero"].sum())
            say(
                "nonzero_fraction", nz / frames.size, "", f"escapes {int(index['n_escapes'].sum())}"
            )
            layout = Layout(qem, args.scan[0] * scan_c)
            say(
                "layout_blocks",
                layout.n_blocks,
                "",
                f"{layout.copies} copies of the distinct blocks, {layout.copies * layout.distinct.size} payload bytes",
            )
            say("cpu_decodes_tiled_layout", cpu_check_layout(qem, layout, cpu_frames, 4))
            rr, cc = np.mgrid[: args.det[0], : args.det[1]]
            radius = args.det[0] / 8
            bf_mask = (rr - args.det[0] / 2) ** 2 + (cc - args.det[1] / 2) ** 2 <= radius**2
            bf_mask &= np.asarray(model.pixel_mask) == 0
            if args.cpu_only:
                return 0
            import cupy

            props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
            say("device", props["name"].decode())
            bench_gpu(args, qem, layout, cpu_frames, bf_mask)
    return 0


if __name__ == "__main__":
    sys.exit(main())
