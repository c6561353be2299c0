"""rANS decode of a resident ``.qem`` payload on the GPU: format 1.0 (kernel v2) against
format 2.0 (per-pixel symbols in row bands), one run.

Like ``gpu_rans.py``: ``--distinct`` synthetic full-size frames (512 x 512 scan, 192 x 192
uint16, dose 40000: the ``gpu_load.py`` generator) are written as real ``.qem`` files, one
per format variant, and each file's blocks are laid out cyclically over the whole scan on
the device (every copy its own bytes). On each, with CUDA events (median of ``--reps``):

* ``decode_4gib_s``: the dense decode of the first 4 GiB of frames (as ``gpu_load.py``);
* ``decode_all_s``: the dense decode of the whole resident payload (every frame of the
  scan, 19.3 GB of uint16 at full size);
* ``bf_masked_sum_s``: the encoded BF query over the whole scan (disk of radius det/8 on
  the valid pixels; mask map, sums, launch, status check: what ``EncodedPayload.moments``
  does), and its kernel alone. Format 2.0 decodes only the bands the disk touches.

Checks in the same run: every decoded frame equals the CPU decoder's frames of the same
file (which equal the generated counts), the BF sums equal numpy's, the tiled layouts
decode on the CPU too. Sizes: each variant's block bytes against format 1.0's.

Usage::

    python benchmarks/gpu_rans2.py --json out.json
    python benchmarks/gpu_rans2.py --cpu-only --scan 4 64 --det 32 32 --distinct 64
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import git_revision
from gpu_rans import JSON_PATH, generate, gpu_median, say

DECODE_BYTES = 4 << 30

#: (name, writer options, decoder extra defines): 1.0 with the default kernel (v2), 2.0
#: with the writer's and the kernel's defaults (``f2``: 16-row bands and 64 frames a block
#: at 192 x 192, registers held to 2 CTAs per SM), and 2.0 variants (band rows, frames per
#: block, registers held to 3 CTAs per SM: ``_m3``).
#: Tuning variants of the 2.0 decoder on the default 2.0 file (``rans_decode.cu``,
#: "Tuning"; one file written, every variant checked against the CPU decode; ``f2`` is the
#: shipped kernel: L1 prefetch every second round, whole rounds unrolled twice): ``_u1`` /
#: ``_u4`` unrolled once / 4 times; ``_pfl2`` prefetch into L2 (QEM2_PREFETCH 1), ``_pf0``
#: none; ``_d128`` 128 words ahead; ``_pe1`` a prefetch every round (the default until
#: 2026-12-02), ``_pe2`` every second round (the default, named); ``_shfl`` the
#: round's words loaded one a lane at the round's start and taken by shuffle (QEM2_SHFL 1);
#: ``_m3`` registers held to 3 CTAs per SM.
VARIANTS = [
    ("f1_v2", {"version": 1}, None),
    ("f2", {"version": 2}, None),
    ("f2_b16_f128", {"version": 2, "band_rows": 16, "block_frames": 128}, None),
    ("f2_b8_f128", {"version": 2, "band_rows": 8, "block_frames": 128}, None),
    ("f2_u1", {"version": 2}, {"QEM2_UNROLL": 1}),
    ("f2_u4", {"version": 2}, {"QEM2_UNROLL": 4}),
    ("f2_pfl2", {"version": 2}, {"QEM2_PREFETCH": 1}),
    ("f2_pf0", {"version": 2}, {"QEM2_PREFETCH": 0}),
    ("f2_d128", {"version": 2}, {"QEM2_PREFETCH_WORDS": 128}),
    ("f2_pe1", {"version": 2}, {"QEM2_PREFETCH_EVERY": 1}),
    ("f2_pe2", {"version": 2}, {"QEM2_PREFETCH_EVERY": 2}),
    ("f2_m3", {"version": 2}, {"QEM2_MIN_CTAS": 3}),
    ("f2_shfl", {"version": 2}, {"QEM2_SHFL": 1}),
    ("f2_shfl_u4", {"version": 2}, {"QEM2_SHFL": 1, "QEM2_UNROLL": 4}),
    ("f2_shfl_pf0", {"version": 2}, {"QEM2_SHFL": 1, "QEM2_PREFETCH": 0}),
    ("f2_shfl_pfl2", {"version": 2}, {"QEM2_SHFL": 1, "QEM2_PREFETCH": 1}),
    ("f2_shfl_pe2", {"version": 2}, {"QEM2_SHFL": 1, "QEM2_PREFETCH_EVERY": 2}),
]


def kernel_defines(extra: dict | None) -> dict | None:
    """A variant's extra defines; the 2.0 kernel's variants are compiled alone (QEM2_ONLY:
    the 1.0 kernels left out of the module, which NVRTC then builds about 3x faster)."""
    if not extra or not any(k.startswith("QEM2_") for k in extra):
        return extra
    return {**extra, "QEM2_ONLY": 1}


def precompile(qem, extras: list[dict | None]) -> None:
    """Build every variant's modules (dense and fused) at once in threads (NVRTC runs
    without the GIL), so the timed loop only looks them up."""
    from concurrent.futures import ThreadPoolExecutor

    from quantem.stem4d.cuda.module_loader import load_module
    from quantem.stem4d.cuda.rans_decode import SOURCE_FILE, decoder_defines

    det = tuple(int(v) for v in qem.detector_shape)
    jobs = []
    for extra in extras:
        for reduce in (0, 1):
            d = decoder_defines(
                int(qem.header.stored_itemsize), det, 2 * int(qem.model.n_classes), reduce
            )
            d.update(extra or {})
            jobs.append(d)
    with ThreadPoolExecutor(min(16, len(jobs))) as pool:
        list(pool.map(lambda d: load_module(SOURCE_FILE, d), jobs))


def write(model, frames, scan_c, path: Path, options: dict) -> Path:
    from quantem.stem4d.acquisition import Acquisition
    from quantem.stem4d.io.qem.writer import save_qem

    mask = np.asarray(model.pixel_mask)
    data = frames.reshape(-1, scan_c, *frames.shape[1:])
    acq = Acquisition(data, {"pixel_mask": mask}, mask == 0, "cpu")
    return save_qem(acq, path, overwrite=True, **options)


class Layout:
    """A file's entries laid out cyclically over ``n_frames`` (frame blocks repeat)."""

    def __init__(self, qem, n_frames: int):
        from quantem.stem4d.cuda import qem_pipeline

        index = qem.block_index
        bf = int(qem.block_frames)
        bands = int(qem.n_bands)
        if int(qem.n_frames) % bf:
            raise SystemExit("--distinct must be a multiple of the block frames")
        _, extents = qem_pipeline.block_extents(index)
        buffer = np.asarray(qem.buffer)
        self.distinct = np.concatenate(
            [buffer[int(o) : int(o) + int(e)] for o, e in zip(index["offset"], extents)]
        )
        local = np.zeros(extents.size, dtype=np.int64)
        np.cumsum(extents[:-1], out=local[1:])
        nd = int(qem.n_frame_blocks)
        self.n_frame_blocks = -(-n_frames // bf)
        self.copies = -(-self.n_frame_blocks // nd)
        e = np.arange(self.n_frame_blocks * bands)
        fb = e // bands
        src = (fb % nd) * bands + e % bands
        self.index = index[src].copy()
        self.offsets = (fb // nd) * self.distinct.size + local[src]
        self.out_frames = fb * bf
        self.block_frames = bf
        self.bands = bands


def bench(args, name, qem, layout, cpu_frames, bf_mask, extra, floor_note) -> dict:
    import cupy

    from quantem.stem4d.cuda.rans_decode import DeviceBlockTable, QemBlockDecoder, pack_mask_bits

    det = tuple(args.det)
    frame_bytes = det[0] * det[1] * 2
    distinct = cpu_frames.shape[0]
    payload = cupy.tile(cupy.asarray(layout.distinct), layout.copies)
    table = DeviceBlockTable.from_index(layout.index, layout.offsets, layout.out_frames)
    decoder = QemBlockDecoder(qem, extra_defines=kernel_defines(extra))
    say(f"{name}.launch", f"{decoder.kernel}: dense {decoder.ctas[0]} / fused {decoder.ctas[1]} CTAs",
        "", f"registers {decoder.registers}, shared {decoder.shared_bytes} B/CTA, "
        f"{len(table)} entries, {int(payload.size)} resident bytes, defines {extra}")  # fmt: skip
    if args.once:  # one launch of the whole-scan decode (for a profiler), nothing checked
        out = cupy.empty((layout.n_frame_blocks * layout.block_frames, *det), dtype=cupy.uint16)
        status = cupy.zeros(len(table), dtype=cupy.int32)
        decoder.decode_dense(payload, table, out, status)
        cupy.cuda.Device().synchronize()
        say(f"{name}.once_status_max", int(status.max()))
        return {}
    cpu_dev = cupy.asarray(cpu_frames)
    result = {}
    n_total = layout.n_frame_blocks * layout.block_frames
    out = cupy.empty((n_total, *det), dtype=cupy.uint16)
    for what, frames_wanted in (
        ("decode_4gib", DECODE_BYTES // frame_bytes),
        ("decode_all", n_total),
    ):
        blocks = min(layout.n_frame_blocks, -(-frames_wanted // layout.block_frames))
        if what == "decode_4gib":
            blocks = min(layout.n_frame_blocks, max(1, frames_wanted // layout.block_frames))
        sub = table.slice(0, blocks * layout.bands)
        n_out = blocks * layout.block_frames
        status = cupy.zeros(len(sub), dtype=cupy.int32)
        out[:n_out].fill(0xABAB)
        t = gpu_median(
            lambda s=sub, st=status: decoder.decode_dense(payload, s, out, st), args.reps
        )
        same = int(status.max()) == 0 and all(
            bool(cupy.array_equal(out[a : min(a + distinct, n_out)], cpu_dev[: n_out - a]))
            for a in range(0, n_out, distinct)
        )
        tb = n_out * frame_bytes / t / 1e12
        result[what] = (t, tb, same)
        say(f"{name}.{what}_s", t, "s",
            f"{n_out} frames ({n_out * frame_bytes / 1e9:.2f} GB), {tb:.3f} TB/s decoded, equals CPU: {same}")  # fmt: skip
    out = None
    cupy.get_default_memory_pool().free_all_blocks()
    n_frames = n_total
    rows, cols = np.nonzero(bf_mask)
    ref = np.resize(cpu_frames[:, rows, cols].astype(np.uint64).sum(axis=1), n_frames)
    if decoder.version_2:
        quad_map, bands = decoder.quad_mask_map(bf_mask)
        positions = np.flatnonzero(np.isin(layout.index["band"].astype(np.int64), bands))
        sub = DeviceBlockTable.from_index(
            layout.index[positions], layout.offsets[positions], layout.out_frames[positions]
        )
        note = f"{bands.size} of {layout.bands} bands, {positions.size} of {len(table)} entries"
    else:
        sub, note = table, "every block"

    def query():
        if decoder.version_2:
            bits = cupy.asarray(decoder.quad_mask_map(bf_mask)[0])
        else:
            bits = cupy.asarray(pack_mask_bits(bf_mask, decoder.n_groups))
        sums = tuple(cupy.zeros(n_frames, dtype=cupy.uint64) for _ in range(3))
        status = cupy.zeros(len(sub), dtype=cupy.int32)
        decoder.reduce_moments(payload, sub, bits, sums, status)
        if int(status.max()) != 0:
            raise RuntimeError("block decode failed")
        return sums[0]

    bits = cupy.asarray(
        quad_map if decoder.version_2 else pack_mask_bits(bf_mask, decoder.n_groups)
    )
    sums = tuple(cupy.zeros(n_frames, dtype=cupy.uint64) for _ in range(3))
    st = cupy.zeros(len(sub), dtype=cupy.int32)
    t_kernel = gpu_median(lambda: decoder.reduce_moments(payload, sub, bits, sums, st), args.reps)
    t_query = gpu_median(query, args.reps)
    equal = bool(np.array_equal(query().get(), ref))
    result["bf"] = (t_query, t_kernel, equal)
    say(f"{name}.bf_masked_sum_s", t_query, "s",
        f"kernel {t_kernel * 1e3:.2f} ms, {note}, {len(rows)} px, equals numpy: {equal}")  # fmt: skip
    payload = None
    cupy.get_default_memory_pool().free_all_blocks()
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scan", type=int, nargs=2, default=[512, 512])
    parser.add_argument("--det", type=int, nargs=2, default=[192, 192])
    parser.add_argument("--dose", type=float, default=40000.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--distinct", type=int, default=2048)
    parser.add_argument("--processes", type=int, default=os.cpu_count())
    parser.add_argument("--reps", type=int, default=11)
    parser.add_argument("--variants", nargs="+", default=[v[0] for v in VARIANTS])
    parser.add_argument("--cpu-only", action="store_true")
    parser.add_argument(
        "--once", action="store_true", help="one dense launch per variant, no timing (profiling)"
    )
    parser.add_argument("--revision", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    args.dtype = "uint16"
    if args.json:
        JSON_PATH.append(Path(args.json))
    say("revision", args.revision or git_revision())
    from quantem.stem4d.io.qem.reader import QemFile

    t0 = time.perf_counter()
    model, frames = generate(args)
    say("generate_s", time.perf_counter() - t0, "s", f"{args.distinct} distinct frames")
    rr, cc = np.mgrid[: args.det[0], : args.det[1]]
    bf_mask = (rr - args.det[0] / 2) ** 2 + (cc - args.det[1] / 2) ** 2 <= (args.det[0] / 8) ** 2
    bf_mask &= np.asarray(model.pixel_mask) == 0
    n_frames = args.scan[0] * args.scan[1]
    sizes = {}
    summary = {}
    if not args.cpu_only:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        say("device", props["name"].decode())
    written: dict[str, tuple] = {}  # layout -> (path, write s[, CPU frames, equal])
    with tempfile.TemporaryDirectory() as tmp:
        known = {v[0]: v for v in VARIANTS}
        unknown = [n for n in args.variants if n not in known]
        if unknown:
            raise SystemExit(f"unknown variants {unknown}; known: {sorted(known)}")
        for name, options, extra in (known[n] for n in args.variants):  # in the order given
            t0 = time.perf_counter()
            key = repr(sorted(options.items()))
            if key not in written:  # kernel variants of one layout share its file
                path = write(model, frames, args.scan[1], Path(tmp) / f"{name}.qem", options)
                written[key] = (path, time.perf_counter() - t0)
            path = written[key][0]
            with QemFile(path) as qem:
                if (
                    len(written[key]) == 2
                    and not args.cpu_only
                    and getattr(qem, "version_2", False)
                ):
                    t1 = time.perf_counter()
                    group = [kernel_defines(e) for n, o, e in VARIANTS
                             if n in args.variants and repr(sorted(o.items())) == key]  # fmt: skip
                    try:
                        precompile(qem, group)
                    except Exception as exc:  # each variant then reports it
                        say("precompile_error", f"{type(exc).__name__}: {exc}"[:300])
                    say("precompile_s", time.perf_counter() - t1, "s",
                        f"{len(group)} variants x 2 modules, threads")  # fmt: skip
                sizes[name] = int(qem.header.sections[5].length)
                if len(written[key]) == 2:  # the CPU decode once per file
                    cpu = qem.read_frames()
                    written[key] = (*written[key], cpu, bool(np.array_equal(cpu, frames)))
                cpu, ok = written[key][2], written[key][3]
                modes = np.bincount(qem.block_index["mode"].astype(np.int64), minlength=3)
                base = sizes.get("f1_v2")
                ratio = f", x{sizes[name] / base:.4f} the 1.0 payload" if base else ""
                say(f"{name}.payload_bytes", sizes[name], "B",
                    f"write {written[key][1]:.1f} s, {qem.n_blocks} entries "
                    f"(modes {modes.tolist()}), {qem.block_frames} frames x {qem.n_bands} bands"
                    f"{ratio}; CPU decode equals counts: {ok}")  # fmt: skip
                if args.cpu_only:
                    continue
                layout = Layout(qem, n_frames)
                try:  # one broken variant must not end a device run
                    summary[name] = bench(args, name, qem, layout, cpu, bf_mask, extra, "")
                except Exception as exc:  # reported, the run goes on
                    say(f"{name}.error", f"{type(exc).__name__}: {exc}"[:300])
                    import cupy

                    cupy.get_default_memory_pool().free_all_blocks()
    for name, r in summary.items():
        if not r:
            continue
        say(f"summary.{name}", f"all {r['decode_all'][1]:.3f} TB/s, 4GiB {r['decode_4gib'][1]:.3f} TB/s, "
            f"BF {r['bf'][0] * 1e3:.2f} ms (kernel {r['bf'][1] * 1e3:.2f})",
            "", f"equal: {r['decode_all'][2] and r['decode_4gib'][2] and r['bf'][2]}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
