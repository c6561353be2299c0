"""Experiment: would a per-pixel ("direct") rANS block mode decode at 1.5 TB/s on the GPU?

Not a file format (nothing here is written to or read from a ``.qem`` file): a measured
prototype for the decision issue 14 asks for ("change the kernel, the block layout or the
format version if the current interleaving is what binds it"). Format 1.0 codes a block as
8-bit nonzero masks, then the nonzero values compacted (§12), so the GPU decoder pays per
32 groups for a prefix sum, an entry map and a scatter, and per round of 32 symbols for
the rotated word order. Here every pixel is one symbol (value 0..254, 255 = escape to a
16-bit value) with the context of its pixel group's class (the same class map), and the
block's 64 rANS states are interleaved two per lane: symbol ``i`` of the block on state
``i mod 64``, lane ``(i mod 64) / 2``, so a warp decodes 64 consecutive pixels per round
(two independent state chains per lane) and stores them as one 128-byte row segment.

It generates the same distinct frames as ``gpu_rans.py``, fits one frequency table per
class on them, encodes 8-frame blocks (numba), lays them out over the full scan, and on
the GPU times the dense decode of the first 4 GiB of frames and the fused BF
``masked_sum`` over the whole scan (CUDA events, median of ``--reps``), checks every
decoded frame against the generated counts and the sums against numpy, and prints the
payload size against format 1.0's. ``--cpu-only``: the kernel runs in the SIMT emulator
(``tests/cuda_simt.py``) on a small shape against the counts instead.

Usage::

    python benchmarks/gpu_rans_direct.py --json direct.json
    python benchmarks/gpu_rans_direct.py --cpu-only --scan 4 32 --det 16 16 --distinct 64
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np
from gpu_rans import generate, say, write_distinct

STATES = 64
PROB_BITS = 12
RANS_L = 1 << 16
ESCAPE = 255
DECODE_BYTES = 4 << 30

KERNEL = r"""
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;
#define FULL 0xffffffffu
#define ERR_STATE 1
#define ERR_WORDS 2
#define ERR_ESCAPES 5
#define ERR_ESCAPE_VALUE 6
#define ERR_UNUSED_ESCAPES 7
#define ERR_UNUSED_WORDS 8
#define ERR_FINAL 9

__device__ __forceinline__ u64 warp_sum64(u64 v) {
    for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(FULL, v, d);
    return v;
}

// One warp per block; dynamic shared memory: tables u32[K][4096] | class u8[G] | bits u8[G].
extern "C" __global__ void __launch_bounds__(WARPS * 32, MIN_CTAS)
decode_direct(const u8* __restrict__ payload, const i64* __restrict__ offsets,
              const u32* __restrict__ t_words, const u32* __restrict__ t_escapes,
              const i64* __restrict__ out_frame, int n_blocks, const u8* __restrict__ classes_g,
              const u32* __restrict__ tables_g, const u8* __restrict__ bits_g,
              u16* __restrict__ out, u64* __restrict__ total_out, u64* __restrict__ row_out,
              u64* __restrict__ col_out, int* __restrict__ status) {
    extern __shared__ __align__(16) u8 smem[];
    u32* tab = reinterpret_cast<u32*>(smem);
    u8* cls = smem + K * 4096 * 4;
    u8* bits = cls + ((G + 15) / 16) * 16;
    for (int i = threadIdx.x; i < K * 4096; i += blockDim.x) tab[i] = tables_g[i];
    for (int i = threadIdx.x; i < G; i += blockDim.x) {
        cls[i] = classes_g[i];
        bits[i] = bits_g[i];
    }
    __syncthreads();
    const int lane = threadIdx.x & 31;
    const u32 below = (1u << lane) - 1u;
    const int total_warps = gridDim.x * WARPS;
    for (int b = blockIdx.x * WARPS + (threadIdx.x >> 5); b < n_blocks; b += total_warps) {
        const u8* block = payload + offsets[b];
        const u32 n_words = t_words[b];
        const u32 n_esc = t_escapes[b];
        const u16* words = reinterpret_cast<const u16*>(block + 256);
        const u16* esc = reinterpret_cast<const u16*>(block + ((256 + 2 * n_words + 3) & ~3u));
        const uint2 st = reinterpret_cast<const uint2*>(block)[lane];
        u32 x0 = st.x, x1 = st.y;
        int err = __any_sync(FULL, x0 < 65536u || x1 < 65536u) ? ERR_STATE : 0;
        u32 pos = 0, e = 0;
        const i64 f0 = out_frame[b];
        for (int t = 0; t < FRAMES && !err; ++t) {
#if REDUCE
            u64 tot = 0, rws = 0, cls_sum = 0;
#else
            u32* row = reinterpret_cast<u32*>(out + (f0 + t) * (i64)P) + lane;
#endif
            for (int p0 = 0; p0 < P; p0 += 64) {
                const int p = p0 + 2 * lane;  // this lane's two pixels p, p + 1 (one group)
                const u32 c = (u32)cls[p >> 3] << 12;
                const u32 a0 = tab[c + (x0 & 4095u)];
                const u32 a1 = tab[c + (x1 & 4095u)];
                u32 s0 = a0 & 255u, s1 = a1 & 255u;
                x0 = (((a0 >> 8) & 4095u) + 1u) * (x0 >> 12) + (a0 >> 20);
                x1 = (((a1 >> 8) & 4095u) + 1u) * (x1 >> 12) + (a1 >> 20);
                const u32 n0 = __ballot_sync(FULL, x0 < 65536u);
                const u32 n1 = __ballot_sync(FULL, x1 < 65536u);
                const u32 e0 = __ballot_sync(FULL, s0 == 255u);
                const u32 e1 = __ballot_sync(FULL, s1 == 255u);
                const u32 count = __popc(n0) + __popc(n1);
                if (pos + count > n_words) { err = ERR_WORDS; break; }
                const u32 rank = pos + __popc(n0 & below) + __popc(n1 & below);
                const u32 b0 = (n0 >> lane) & 1u;
                if (b0) x0 = (x0 << 16) | (u32)__ldg(words + rank);
                if ((n1 >> lane) & 1u) x1 = (x1 << 16) | (u32)__ldg(words + rank + b0);
                pos += count;
                if (e0 | e1) {
                    const u32 ec = __popc(e0) + __popc(e1);
                    if (e + ec > n_esc) { err = ERR_ESCAPES; break; }
                    const u32 er = e + __popc(e0 & below) + __popc(e1 & below);
                    const u32 q0 = (e0 >> lane) & 1u;
                    if (q0) s0 = esc[er];
                    if ((e1 >> lane) & 1u) s1 = esc[er + q0];
                    if (__any_sync(FULL, (q0 && s0 < 255u) || (((e1 >> lane) & 1u) && s1 < 255u))) {
                        err = ERR_ESCAPE_VALUE;
                        break;
                    }
                    e += ec;
                }
#if REDUCE
                const u32 m = (u32)bits[p >> 3] >> (p & 7);
                if (m & 3u) {
                    const u32 v = (m & 1u) * s0 + ((m >> 1) & 1u) * s1;
                    tot += v;
                    rws += (u64)v * (u64)(p / DC);
                    cls_sum += (u64)((m & 1u) * s0) * (u64)(p % DC) + (u64)(((m >> 1) & 1u) * s1) * (u64)(p % DC + 1);
                }
#else
                row[p0 >> 1] = s0 | (s1 << 16);
#endif
            }
#if REDUCE
            if (!err) {
                tot = warp_sum64(tot); rws = warp_sum64(rws); cls_sum = warp_sum64(cls_sum);
                if (lane == 0) { total_out[f0 + t] = tot; row_out[f0 + t] = rws; col_out[f0 + t] = cls_sum; }
            }
#endif
        }
        if (!err && e != n_esc) err = ERR_UNUSED_ESCAPES;
        if (!err && pos != n_words) err = ERR_UNUSED_WORDS;
        if (!err && __any_sync(FULL, x0 != 65536u || x1 != 65536u)) err = ERR_FINAL;
        if (err && lane == 0) status[b] = err;
    }
}
"""

EMULATOR_DRIVER = r"""
extern "C" void run(const u8* payload, const i64* off, const u32* nw, const u32* ne,
                    const i64* of, int n, const u8* cls, const u32* tab, const u8* bits,
                    u16* out, u64* t, u64* r, u64* c, int* status, int grid) {
    simt_launch(grid, 32 * WARPS, [&] {
        decode_direct(payload, off, nw, ne, of, n, cls, tab, bits, out, t, r, c, status);
    });
}
"""


def fit_tables(frames: np.ndarray, group_class: np.ndarray, n_classes: int):
    """Per class: freq over symbols 0..255 (every symbol >= 1), summing to 4096."""
    det_pixels = frames.shape[1] * frames.shape[2]
    pixel_class = np.repeat(group_class.astype(np.int64), 8)[:det_pixels]
    symbols = np.minimum(frames.reshape(frames.shape[0], -1), ESCAPE).astype(np.int64)
    freq = np.zeros((n_classes, 256), dtype=np.int64)
    for k in range(n_classes):
        counts = np.bincount(symbols[:, pixel_class == k].ravel(), minlength=256)
        spare = 4096 - 256
        total = max(int(counts.sum()), 1)
        share = counts * spare
        f = 1 + share // total
        rest = 4096 - int(f.sum())
        order = np.lexsort((np.arange(256), -(share % total)))
        f[order[:rest]] += 1
        freq[k] = f
    cum = np.zeros_like(freq)
    cum[:, 1:] = np.cumsum(freq, axis=1)[:, :-1]
    return freq, cum


def packed_tables(freq: np.ndarray, cum: np.ndarray) -> np.ndarray:
    """u32 per (class, slot): symbol | (freq - 1) << 8 | (slot - cum) << 20."""
    out = np.empty((freq.shape[0], 4096), dtype=np.uint32)
    slots = np.arange(4096)
    for k in range(freq.shape[0]):
        sym = np.repeat(np.arange(256), freq[k])
        out[k] = sym | ((freq[k][sym] - 1) << 8) | ((slots - cum[k][sym]) << 20)
    return out


@numba.njit(cache=True)
def _encode_block(frames, pixel_class, freq, cum, scratch):
    """One block into scratch: states u32[64] | words | pad to 4 | escapes u16. Returns
    (length, n_words, n_escapes)."""
    n = frames.size
    flat = frames.ravel()
    P = pixel_class.size
    n_esc = 0
    for i in range(n):
        if flat[i] >= ESCAPE:
            n_esc += 1
    esc = np.empty(n_esc, dtype=np.int64)
    k = 0
    for i in range(n):
        if flat[i] >= ESCAPE:
            esc[k] = flat[i]
            k += 1
    x = np.full(STATES, RANS_L, dtype=np.int64)
    words = np.empty(n + 8, dtype=np.int64)
    n_words = 0
    for i in range(n - 1, -1, -1):
        v = np.int64(flat[i])
        s = v if v < ESCAPE else ESCAPE
        c = pixel_class[i % P]
        f = freq[c, s]
        state = x[i % STATES]
        if state >= (f << 20):
            words[n_words] = state & 0xFFFF
            n_words += 1
            state >>= 16
        x[i % STATES] = ((state // f) << PROB_BITS) + (state % f) + cum[c, s]
    for j in range(STATES):
        for b in range(4):
            scratch[4 * j + b] = (x[j] >> (8 * b)) & 0xFF
    for w in range(n_words):
        value = words[n_words - 1 - w]
        scratch[256 + 2 * w] = value & 0xFF
        scratch[256 + 2 * w + 1] = value >> 8
    at = 256 + 2 * n_words
    while at % 4:
        scratch[at] = 0
        at += 1
    for j in range(n_esc):
        scratch[at + 2 * j] = esc[j] & 0xFF
        scratch[at + 2 * j + 1] = (esc[j] >> 8) & 0xFF
    length = at + 2 * n_esc
    while length % 16:
        scratch[length] = 0
        length += 1
    return length, n_words, n_esc


class DirectPayload:
    """The distinct frames as direct blocks, laid out over ``n_frames`` like gpu_rans."""

    def __init__(self, frames, group_class, n_classes, block_frames, n_frames):
        if frames.dtype != np.uint16 or frames.shape[0] % block_frames:
            raise SystemExit("the experiment covers uint16 frames in whole blocks")
        self.P = frames.shape[1] * frames.shape[2]
        if self.P % 64:
            raise SystemExit("the experiment needs frames of a multiple of 64 pixels")
        self.freq, self.cum = fit_tables(frames, group_class, n_classes)
        self.tables = packed_tables(self.freq, self.cum)
        pixel_class = np.repeat(group_class.astype(np.int64), 8)[: self.P]
        nd = frames.shape[0] // block_frames
        parts, words, escapes = [], [], []
        scratch = np.zeros(block_frames * self.P * 4 + 4096, dtype=np.uint8)
        for b in range(nd):
            block = frames[b * block_frames : (b + 1) * block_frames].astype(np.int64)
            length, nw, ne = _encode_block(block, pixel_class, self.freq, self.cum, scratch)
            parts.append(scratch[:length].copy())
            words.append(nw)
            escapes.append(ne)
        sizes = np.array([p.size for p in parts], dtype=np.int64)
        local = np.zeros(nd, dtype=np.int64)
        np.cumsum(sizes[:-1], out=local[1:])
        self.distinct = np.concatenate(parts)
        self.block_frames = block_frames
        self.n_blocks = -(-n_frames // block_frames)
        self.copies = -(-self.n_blocks // nd)
        ids = np.arange(self.n_blocks)
        self.offsets = (ids // nd) * self.distinct.size + local[ids % nd]
        self.n_words = np.asarray(words, dtype=np.uint32)[ids % nd]
        self.n_escapes = np.asarray(escapes, dtype=np.uint32)[ids % nd]
        self.out_frames = ids * block_frames
        self.group_class = np.ascontiguousarray(group_class, dtype=np.uint8)
        self.n_classes = n_classes


def defines(d: DirectPayload, det, reduce: int, min_ctas: int = 3) -> str:
    values = {
        "K": d.n_classes, "G": d.P // 8, "P": d.P, "DC": det[1], "FRAMES": d.block_frames,
        "WARPS": 16, "MIN_CTAS": min_ctas, "REDUCE": reduce,
    }  # fmt: skip
    return "".join(f"#define {k} {v}\n" for k, v in values.items())


def shared_bytes(d: DirectPayload) -> int:
    g = d.P // 8
    return d.n_classes * 4096 * 4 + 2 * (-(-g // 16) * 16)


def reference_sums(frames, mask):
    rows, cols = np.nonzero(mask)
    values = frames[:, rows, cols].astype(np.uint64)
    return (
        values.sum(axis=1),
        (values * rows.astype(np.uint64)).sum(axis=1),
        (values * cols.astype(np.uint64)).sum(axis=1),
    )


def bf_mask(model, det) -> np.ndarray:
    rr, cc = np.mgrid[: det[0], : det[1]]
    mask = (rr - det[0] / 2) ** 2 + (cc - det[1] / 2) ** 2 <= (det[0] / 8) ** 2
    return mask & (np.asarray(model.pixel_mask) == 0)


def emulate(d: DirectPayload, frames, mask, det) -> bool:
    """Run the kernel in the SIMT emulator on the distinct blocks (small shapes)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from cuda_simt import build, pointer

    nd = frames.shape[0] // d.block_frames
    payload = d.distinct
    offsets = np.ascontiguousarray(d.offsets[:nd])
    bits = np.packbits(np.r_[mask.ravel(), np.zeros(-mask.size % 8, bool)], bitorder="little")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for reduce in (0, 1):
            source = defines(d, det, reduce).replace("#define WARPS 16", "#define WARPS 1")
            lib = build(Path(tmp), f"direct{reduce}", {}, source + KERNEL, EMULATOR_DRIVER)
            out = np.zeros(frames.shape, np.uint16)
            sums = [np.zeros(frames.shape[0], np.uint64) for _ in range(3)]
            status = np.zeros(nd, np.int32)
            lib.run(
                pointer(payload), pointer(offsets), pointer(np.ascontiguousarray(d.n_words[:nd])),
                pointer(np.ascontiguousarray(d.n_escapes[:nd])),
                pointer(np.ascontiguousarray(d.out_frames[:nd])), ctypes.c_int(nd),
                pointer(d.group_class), pointer(d.tables), pointer(bits), pointer(out),
                pointer(sums[0]), pointer(sums[1]), pointer(sums[2]), pointer(status),
                ctypes.c_int(2),
            )  # fmt: skip
            if reduce:
                ref = reference_sums(frames, mask)
                ok &= not status.any() and all(
                    np.array_equal(a, b) for a, b in zip(sums, ref, strict=True)
                )
            else:
                ok &= not status.any() and np.array_equal(out, frames)
            # A flipped word must be refused (status), never decoded silently wrong.
            if not reduce:
                bad = payload.copy()
                bad[int(offsets[0]) + 256 + 2 * (int(d.n_words[0]) // 2)] ^= 0x10
                status[:] = 0
                lib.run(
                    pointer(bad), pointer(offsets), pointer(np.ascontiguousarray(d.n_words[:nd])),
                    pointer(np.ascontiguousarray(d.n_escapes[:nd])),
                    pointer(np.ascontiguousarray(d.out_frames[:nd])), ctypes.c_int(nd),
                    pointer(d.group_class), pointer(d.tables), pointer(bits), pointer(out),
                    pointer(sums[0]), pointer(sums[1]), pointer(sums[2]), pointer(status),
                    ctypes.c_int(2),
                )  # fmt: skip
                refused = int(status[0]) != 0
                say("emulated_corrupt_word_refused", refused, "", f"status {int(status[0])}")
                ok &= refused
    return bool(ok)


def bench_gpu(args, d: DirectPayload, frames, mask, det) -> None:
    import cupy
    from _common import gpu_times

    def med(fn):
        return float(statistics.median(gpu_times(fn, args.reps, 2)))

    payload = cupy.tile(cupy.asarray(d.distinct), d.copies)
    say("direct.resident_payload_bytes", int(payload.size), "B", f"{d.n_blocks} blocks")
    dev = {k: cupy.asarray(np.ascontiguousarray(v)) for k, v in {
        "off": d.offsets.astype(np.int64), "nw": d.n_words, "ne": d.n_escapes,
        "of": d.out_frames.astype(np.int64)}.items()}  # fmt: skip
    cls = cupy.asarray(d.group_class)
    tab = cupy.asarray(d.tables)
    bits = cupy.asarray(
        np.packbits(np.r_[mask.ravel(), np.zeros(-mask.size % 8, bool)], bitorder="little")
    )
    kernels = {}
    for reduce in (0, 1):
        for min_ctas in (3, 2):
            module = cupy.RawModule(
                code=defines(d, det, reduce, min_ctas) + KERNEL, options=("-std=c++17",)
            )
            k = module.get_function("decode_direct")
            k.max_dynamic_shared_size_bytes = shared_bytes(d)
            kernels[reduce, min_ctas] = k
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    frame_bytes = d.P * 2
    batch = min(d.n_blocks, max(1, DECODE_BYTES // (d.block_frames * frame_bytes)))
    n_out = batch * d.block_frames
    out = cupy.empty((n_out, *det), dtype=cupy.uint16)
    status = cupy.zeros(d.n_blocks, dtype=cupy.int32)
    dummy = cupy.zeros(1, dtype=cupy.uint64)
    ref_dev = cupy.asarray(frames)
    for min_ctas in (3, 2):
        k = kernels[0, min_ctas]
        grid = (min(sms * min_ctas, -(-batch // 16)),)
        say(
            f"direct.dense_m{min_ctas}.registers",
            int(k.num_regs),
            "",
            f"grid {grid[0]} x 16 warps, shared {shared_bytes(d)} B",
        )
        args_ = (payload, dev["off"], dev["nw"], dev["ne"], dev["of"], np.int32(batch), cls, tab,
                 bits, out, dummy, dummy, dummy, status)  # fmt: skip
        out.fill(0xABAB)
        t = med(lambda k=k, g=grid, a=args_: k(g, (512,), a, shared_mem=shared_bytes(d)))
        n = frames.shape[0]
        same = int(status.max()) == 0 and all(
            bool(cupy.array_equal(out[a : a + n], ref_dev[: min(n, n_out - a)]))
            for a in range(0, n_out, n)
        )
        say(f"direct.dense_m{min_ctas}.decode_s", t, "s",
            f"{batch} blocks, {n_out * frame_bytes / t / 1e12:.3f} TB/s decoded, equals counts: {same}")  # fmt: skip
    out = None
    n_frames = d.n_blocks * d.block_frames
    ref = [np.resize(r, n_frames) for r in reference_sums(frames, mask)]
    for min_ctas in (3, 2):
        k = kernels[1, min_ctas]
        grid = (min(sms * min_ctas, -(-d.n_blocks // 16)),)
        sums = [cupy.zeros(n_frames, dtype=cupy.uint64) for _ in range(3)]
        status[:] = 0
        args_ = (payload, dev["off"], dev["nw"], dev["ne"], dev["of"], np.int32(d.n_blocks), cls,
                 tab, bits, cupy.zeros(1, dtype=cupy.uint16), *sums, status)  # fmt: skip
        t = med(lambda k=k, g=grid, a=args_: k(g, (512,), a, shared_mem=shared_bytes(d)))
        same = int(status.max()) == 0 and all(
            np.array_equal(s.get(), r) for s, r in zip(sums, ref, strict=True)
        )
        say(f"direct.fused_m{min_ctas}.bf_masked_sum_kernel_s", t, "s",
            f"registers {int(k.num_regs)}, {n_frames} frames, moments equal numpy: {same}")  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scan", type=int, nargs=2, default=[512, 512])
    parser.add_argument("--det", type=int, nargs=2, default=[192, 192])
    parser.add_argument("--dose", type=float, default=40000.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--distinct", type=int, default=2048)
    parser.add_argument("--processes", type=int, default=os.cpu_count())
    parser.add_argument("--reps", type=int, default=11)
    parser.add_argument("--cpu-only", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    args.dtype = "uint16"
    if args.json:
        from gpu_rans import JSON_PATH

        JSON_PATH.append(Path(args.json))
    from quantem.io.qem.reader import QemFile

    model, frames = generate(args)
    det = tuple(args.det)
    mask = bf_mask(model, det)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_distinct(model, frames, args.scan[1], Path(tmp) / "d.qem")
        with QemFile(path) as qem:
            group_class = np.asarray(qem.model.group_class)
            n_classes = int(qem.model.n_classes)
            bf = int(qem.block_frames)
            v1_bytes = int(qem.block_index["length"].sum())
    t0 = time.perf_counter()
    d = DirectPayload(frames, group_class, n_classes, bf, args.scan[0] * args.scan[1])
    say(
        "direct.encode_s", time.perf_counter() - t0, "s", f"{frames.shape[0] // bf} distinct blocks"
    )
    say("direct.bytes_vs_format_1", d.distinct.size / v1_bytes, "",
        f"{d.distinct.size} direct bytes, {v1_bytes} format-1.0 block bytes, {n_classes} classes, "
        f"{int(d.n_escapes[: frames.shape[0] // bf].sum())} escapes")  # fmt: skip
    if args.cpu_only:
        say("direct.emulated_kernel_equals_counts", emulate(d, frames, mask, det))
        return 0
    bench_gpu(args, d, frames, mask, det)
    return 0


if __name__ == "__main__":
    sys.exit(main())
