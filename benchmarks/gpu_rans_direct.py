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

// One warp per block, SPL states per lane (state h of lane l decodes pixels SPL*l + h of
// each round of 32*SPL pixels); dynamic shared memory: tables u32[K][4096] | class u8[G] |
// mask bits u8[G].
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
        const u16* words = reinterpret_cast<const u16*>(block + 4 * 32 * SPL);
        const u16* esc = reinterpret_cast<const u16*>(block + ((4 * 32 * SPL + 2 * n_words + 3) & ~3u));
        u32 x[SPL];
#pragma unroll
        for (int h = 0; h < SPL; ++h) x[h] = reinterpret_cast<const u32*>(block)[SPL * lane + h];
        bool low = false;
#pragma unroll
        for (int h = 0; h < SPL; ++h) low |= x[h] < 65536u;
        int err = __any_sync(FULL, low) ? ERR_STATE : 0;
        u32 pos = 0, e = 0;
        const i64 f0 = out_frame[b];
        for (int t = 0; t < FRAMES && !err; ++t) {
#if REDUCE
            u64 tot = 0, rws = 0, cols = 0;
#else
            u16* row = out + (f0 + t) * (i64)P + SPL * lane;
#endif
            for (int p0 = 0; p0 < P; p0 += 32 * SPL) {
                const int p = p0 + SPL * lane;  // this lane's SPL pixels (within one group)
                const u32 c = (u32)cls[p >> 3] << 12;
                u32 s[SPL], need[SPL];
                bool any_esc = false;
#pragma unroll
                for (int h = 0; h < SPL; ++h) {
                    const u32 a = tab[c + (x[h] & 4095u)];
                    s[h] = a & 255u;
                    x[h] = (((a >> 8) & 4095u) + 1u) * (x[h] >> 12) + (a >> 20);
                    any_esc |= s[h] == 255u;
                }
                u32 count = 0, rank = pos;
#pragma unroll
                for (int h = 0; h < SPL; ++h) {
                    need[h] = __ballot_sync(FULL, x[h] < 65536u);
                    count += __popc(need[h]);
                    rank += __popc(need[h] & below);
                }
                if (pos + count > n_words) { err = ERR_WORDS; break; }
#pragma unroll
                for (int h = 0; h < SPL; ++h) {
                    if ((need[h] >> lane) & 1u) x[h] = (x[h] << 16) | (u32)__ldg(words + rank++);
                }
                pos += count;
                if (__any_sync(FULL, any_esc)) {
                    u32 ec = 0, er = e;
                    u32 em[SPL];
#pragma unroll
                    for (int h = 0; h < SPL; ++h) {
                        em[h] = __ballot_sync(FULL, s[h] == 255u);
                        ec += __popc(em[h]);
                        er += __popc(em[h] & below);
                    }
                    if (e + ec > n_esc) { err = ERR_ESCAPES; break; }
                    bool bad = false;
#pragma unroll
                    for (int h = 0; h < SPL; ++h) {
                        if ((em[h] >> lane) & 1u) {
                            s[h] = esc[er++];
                            bad |= s[h] < 255u;
                        }
                    }
                    if (__any_sync(FULL, bad)) { err = ERR_ESCAPE_VALUE; break; }
                    e += ec;
                }
#if REDUCE
                const u32 m = (u32)bits[p >> 3] >> (p & 7);
                if (m & ((1u << SPL) - 1u)) {
                    const u32 r = (u32)(p / DC), c0 = (u32)(p % DC);  // SPL pixels in one row
#pragma unroll
                    for (int h = 0; h < SPL; ++h) {
                        const u64 v = ((m >> h) & 1u) * s[h];
                        tot += v;
                        rws += v * r;
                        cols += v * (c0 + h);
                    }
                }
#else
#if SPL == 2
                *reinterpret_cast<u32*>(row + p0) = s[0] | (s[1] << 16);
#elif SPL == 4
                uint2 q;
                q.x = s[0] | (s[1] << 16);
                q.y = s[2] | (s[3] << 16);
                *reinterpret_cast<uint2*>(row + p0) = q;
#else
#pragma unroll
                for (int h = 0; h < SPL; ++h) row[p0 + h] = (u16)s[h];
#endif
#endif
            }
#if REDUCE
            if (!err) {
                tot = warp_sum64(tot); rws = warp_sum64(rws); cols = warp_sum64(cols);
                if (lane == 0) { total_out[f0 + t] = tot; row_out[f0 + t] = rws; col_out[f0 + t] = cols; }
            }
#endif
        }
        bool final_bad = false;
#pragma unroll
        for (int h = 0; h < SPL; ++h) final_bad |= x[h] != 65536u;
        if (!err && e != n_esc) err = ERR_UNUSED_ESCAPES;
        if (!err && pos != n_words) err = ERR_UNUSED_WORDS;
        if (!err && __any_sync(FULL, final_bad)) err = ERR_FINAL;
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
def _encode_block(frames, pixel_class, freq, cum, scratch, n_states):
    """One block into scratch: states u32[n_states] | words | pad to 4 | escapes u16.
    Returns (length, n_words, n_escapes)."""
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
    x = np.full(n_states, RANS_L, dtype=np.int64)
    words = np.empty(n + 8, dtype=np.int64)
    n_words = 0
    for i in range(n - 1, -1, -1):
        v = np.int64(flat[i])
        s = v if v < ESCAPE else ESCAPE
        c = pixel_class[i % P]
        f = freq[c, s]
        state = x[i % n_states]
        if state >= (f << 20):
            words[n_words] = state & 0xFFFF
            n_words += 1
            state >>= 16
        x[i % n_states] = ((state // f) << PROB_BITS) + (state % f) + cum[c, s]
    header = 4 * n_states
    for j in range(n_states):
        for b in range(4):
            scratch[4 * j + b] = (x[j] >> (8 * b)) & 0xFF
    for w in range(n_words):
        value = words[n_words - 1 - w]
        scratch[header + 2 * w] = value & 0xFF
        scratch[header + 2 * w + 1] = value >> 8
    at = header + 2 * n_words
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

    def __init__(self, frames, group_class, n_classes, block_frames, n_frames, spl):
        if frames.dtype != np.uint16 or frames.shape[0] % block_frames:
            raise SystemExit("the experiment covers uint16 frames in whole blocks")
        self.P = frames.shape[1] * frames.shape[2]
        self.spl = spl
        if self.P % (32 * spl) or frames.shape[2] % spl or spl not in (1, 2, 4, 8):
            raise SystemExit("the experiment needs frames of whole rounds and rows of whole lanes")
        self.freq, self.cum = fit_tables(frames, group_class, n_classes)
        self.tables = packed_tables(self.freq, self.cum)
        pixel_class = np.repeat(group_class.astype(np.int64), 8)[: self.P]
        nd = frames.shape[0] // block_frames
        parts, words, escapes = [], [], []
        scratch = np.zeros(block_frames * self.P * 4 + 4096, dtype=np.uint8)
        for b in range(nd):
            block = frames[b * block_frames : (b + 1) * block_frames].astype(np.int64)
            length, nw, ne = _encode_block(
                block, pixel_class, self.freq, self.cum, scratch, 32 * spl
            )
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
        "WARPS": 16, "MIN_CTAS": min_ctas, "REDUCE": reduce, "SPL": d.spl,
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
                bad[int(offsets[0]) + 128 * d.spl + 2 * (int(d.n_words[0]) // 2)] ^= 0x10
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
                say(
                    f"direct.spl{d.spl}.emulated_corrupt_word_refused",
                    refused,
                    "",
                    f"status {int(status[0])}",
                )
                ok &= refused
    return bool(ok)


def bench_gpu(args, d: DirectPayload, frames, mask, det) -> None:
    import cupy
    from _common import gpu_times

    def med(fn):
        return float(statistics.median(gpu_times(fn, args.reps, 2)))

    payload = cupy.tile(cupy.asarray(d.distinct), d.copies)
    tag = f"direct.spl{d.spl}"
    say(f"{tag}.resident_payload_bytes", int(payload.size), "B", f"{d.n_blocks} blocks")
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
            f"{tag}.dense_m{min_ctas}.registers",
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
        say(f"{tag}.dense_m{min_ctas}.decode_s", t, "s",
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
        say(f"{tag}.fused_m{min_ctas}.bf_masked_sum_kernel_s", t, "s",
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
    parser.add_argument("--spl", type=int, nargs="+", default=[4, 8, 2], help="states per lane")
    parser.add_argument("--cpu-only", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    args.dtype = "uint16"
    if args.json:
        from gpu_rans import JSON_PATH

        JSON_PATH.append(Path(args.json))
    from quantem.stem4d.io.qem.reader import QemFile

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
    for spl in args.spl:
        t0 = time.perf_counter()
        d = DirectPayload(frames, group_class, n_classes, bf, args.scan[0] * args.scan[1], spl)
        tag = f"direct.spl{spl}"
        say(f"{tag}.encode_s", time.perf_counter() - t0, "s", f"{frames.shape[0] // bf} blocks")
        say(f"{tag}.bytes_vs_format_1", d.distinct.size / v1_bytes, "",
            f"{d.distinct.size} direct bytes, {v1_bytes} format-1.0 block bytes, "
            f"{n_classes} classes, {int(d.n_escapes[: frames.shape[0] // bf].sum())} escapes")  # fmt: skip
        if args.cpu_only:
            say(f"{tag}.emulated_kernel_equals_counts", emulate(d, frames, mask, det))
        else:
            bench_gpu(args, d, frames, mask, det)
            import cupy

            cupy.get_default_memory_pool().free_all_blocks()
    return 0


if __name__ == "__main__":
    sys.exit(main())
