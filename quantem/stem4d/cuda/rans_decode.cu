// GPU decoder for .qem payload blocks (docs/qem-format.md §10-§12): one warp per block.
// Two kernels with the same arguments, checks and status codes: decode_qem_blocks (v1,
// described here) and decode_qem_blocks_v2 (the default; its notes are further down).
//
// The 32 lanes hold the block's 32 rANS lane states. Phase A decodes the 8-bit nonzero
// masks of every pixel group (symbol a on lane a % 32) into a per-warp scratch area in
// global memory; phase B walks the groups of each frame 32 at a time (lane = group): an
// exclusive prefix sum of the masks' popcounts numbers the chunk's nonzero pixels, the
// value symbols are decoded 32 per round (symbol v on lane v % 32, so the rounds rotate
// with the running symbol count), staged in shared memory and gathered back by the lanes
// that own the groups, which then write 8 pixels each (or, in the fused reduction, add the
// masked pixels to per-frame sums). Word reads follow the symbol order exactly: in each
// round the lanes that renormalise take consecutive words in symbol order (ballot, rotate,
// popcount). Every check of §12 is made; the first failure sets the block's status.
//
// Decode tables (shared by every block; one copy per thread block in shared memory):
//   sym[c][slot]   u8,  slot -> symbol
//   fc[c][s]       u32, freq | cum << 16
//
// Dynamic shared memory per thread block: N_CONTEXTS * (4096 + 1024) + WARPS_PER_CTA * 1536
// (+ N_GROUPS rounded up to 16 when SHARED_CLASSES).
//
#ifndef QEM2_ONLY  // 1: only the 2.0 kernel (benchmark variants, compiled by NVRTC)
#define QEM2_ONLY 0
#endif

// Constants injected as #defines by quantem/cuda/module_loader.py:
//   ELEM_SIZE      stored itemsize, 1, 2 or 4
//   FRAME_PIXELS   P = det_r * det_c
//   N_GROUPS       G = ceil(P / 8)
//   DET_C          detector columns
//   N_CONTEXTS     C = 2 * n_classes
//   WARPS_PER_CTA  warps per thread block
//   REDUCE         0: write dense frames; 1: fused masked moments per frame
//   VECTOR_STORES  1 when each group's 8 output pixels are 8 * ELEM_SIZE aligned
//   SHARED_CLASSES 1 to keep the group class map in shared memory (small detectors)

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

#if ELEM_SIZE == 1
typedef unsigned char elem_t;
#elif ELEM_SIZE == 2
typedef unsigned short elem_t;
#else
typedef unsigned int elem_t;
#endif

#define LANES 32
#define LANE_STATES_BYTES 128
#define PROB_BITS 12
#define PROB_MASK 4095u
#define RANS_L 65536u
#define ESCAPE_SYMBOL 255
#define ESCAPE_MIN_VALUE 256
#define TAIL_BITS (FRAME_PIXELS % 8)

#define MODE_ZERO 0
#define MODE_RAW 1
#define MODE_RANS 2

// Status codes: the same numbers as quantem/io/qem/rans.py.
#define ERR_STATE_RANGE 1
#define ERR_WORDS_EXHAUSTED 2
#define ERR_MASK_PADDING 3
#define ERR_NONZERO_COUNT 4
#define ERR_ESCAPES_EXHAUSTED 5
#define ERR_ESCAPE_VALUE 6
#define ERR_UNUSED_ESCAPES 7
#define ERR_UNUSED_WORDS 8
#define ERR_FINAL_STATE 9
#define ERR_PADDING 10
#define ERR_MODE 11

#define FULL 0xffffffffu

struct BlockTable {
    const i64* offset;     // byte offset of the block in the payload buffer
    const u32* mode;
    const u32* n_frames;
    const u32* n_words;
    const u32* n_nonzero;
    const u32* n_escapes;
    const i64* out_frame;  // frame index of the block's first frame in the output
};

__device__ __forceinline__ u32 rotate_right(u32 x, u32 r) {
    return __funnelshift_r(x, x, r);
}

// Words are consumed sequentially; asking L2 for the line PREFETCH_WORDS ahead hides most of
// the memory latency of the dependent word reads.
#define PREFETCH_WORDS 256
__device__ __forceinline__ void prefetch_words(const u16* words, u32 pos, u32 n_words) {
#ifdef __CUDA_ARCH__
    if (pos + PREFETCH_WORDS < n_words)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(words + pos + PREFETCH_WORDS));
#endif
}

// Index of the n-th (0-based) set bit of mask; mask has more than n set bits.
__device__ __forceinline__ u32 nth_set_bit(u32 mask, u32 n) {
    for (u32 i = 0; i < n; ++i) mask &= mask - 1u;
    return (u32)(__ffs(mask) - 1);
}

__device__ __forceinline__ u64 warp_sum64(u64 v) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(FULL, v, d);
    return v;
}

// Per-frame accumulation of the fused reduction (lane partials, reduced per frame).
struct Moments {
    u64 total, rows, cols;
};

__device__ __forceinline__ void add_pixel(Moments& acc, u32 value, int pixel) {
    acc.total += value;
    acc.rows += (u64)value * (u64)(pixel / DET_C);
    acc.cols += (u64)value * (u64)(pixel % DET_C);
}

__device__ __forceinline__ void flush_frame(Moments& acc, int lane, i64 frame, u64* total_out,
                                            u64* row_out, u64* col_out) {
    const u64 t = warp_sum64(acc.total);
    const u64 r = warp_sum64(acc.rows);
    const u64 c = warp_sum64(acc.cols);
    if (lane == 0) {
        total_out[frame] = t;
        row_out[frame] = r;
        col_out[frame] = c;
    }
    acc.total = acc.rows = acc.cols = 0;
}

__device__ __forceinline__ void store_group(elem_t* row, int group, const u32 (&px)[8]) {
    elem_t* dst = row + 8 * group;
#if VECTOR_STORES && ELEM_SIZE == 1
    uint2 q;
    q.x = px[0] | (px[1] << 8) | (px[2] << 16) | (px[3] << 24);
    q.y = px[4] | (px[5] << 8) | (px[6] << 16) | (px[7] << 24);
    *reinterpret_cast<uint2*>(dst) = q;
#elif VECTOR_STORES && ELEM_SIZE == 2
    uint4 q;
    q.x = px[0] | (px[1] << 16);
    q.y = px[2] | (px[3] << 16);
    q.z = px[4] | (px[5] << 16);
    q.w = px[6] | (px[7] << 16);
    *reinterpret_cast<uint4*>(dst) = q;
#elif VECTOR_STORES && ELEM_SIZE == 4
    reinterpret_cast<uint4*>(dst)[0] = make_uint4(px[0], px[1], px[2], px[3]);
    reinterpret_cast<uint4*>(dst)[1] = make_uint4(px[4], px[5], px[6], px[7]);
#else
#pragma unroll
    for (int i = 0; i < 8; ++i)
        if (8 * group + i < FRAME_PIXELS) dst[i] = (elem_t)px[i];
#endif
}

__device__ __forceinline__ u32 load_le(const u8* p) {
    u32 v = 0;
#pragma unroll
    for (int k = 0; k < ELEM_SIZE; ++k) v |= (u32)p[k] << (8 * k);
    return v;
}

#if !QEM2_ONLY  // benchmarks of the 2.0 kernel compile it alone
extern "C" __global__ void __launch_bounds__(WARPS_PER_CTA * 32)
decode_qem_blocks(const u8* __restrict__ payload, const i64* __restrict__ t_offset,
                  const u32* __restrict__ t_mode, const u32* __restrict__ t_frames,
                  const u32* __restrict__ t_words, const u32* __restrict__ t_nonzero,
                  const u32* __restrict__ t_escapes, const i64* __restrict__ t_out_frame,
                  int n_blocks,
                  const u8* __restrict__ group_class, const u8* __restrict__ sym_global,
                  const u32* __restrict__ fc_global, u8* __restrict__ mask_scratch,
                  i64 scratch_per_warp, elem_t* __restrict__ out,
                  const u8* __restrict__ reduce_mask,  // REDUCE: mask bits per group
                  u64* __restrict__ total_out, u64* __restrict__ row_out,
                  u64* __restrict__ col_out, int* __restrict__ status) {
    const BlockTable table = {t_offset, t_mode, t_frames, t_words, t_nonzero, t_escapes,
                              t_out_frame};
    // Dynamic shared memory: sym | fc | per-warp values | per-warp owners | group classes.
    extern __shared__ __align__(16) u8 smem[];
    u8* sym = smem;
    u32* fc = reinterpret_cast<u32*>(smem + N_CONTEXTS * 4096);
    u32* staged_values = fc + N_CONTEXTS * 256;
    u16* value_owner = reinterpret_cast<u16*>(staged_values + WARPS_PER_CTA * 256);
    for (int i = threadIdx.x; i < N_CONTEXTS * 4096 / 4; i += blockDim.x)
        reinterpret_cast<u32*>(sym)[i] = reinterpret_cast<const u32*>(sym_global)[i];
    for (int i = threadIdx.x; i < N_CONTEXTS * 256; i += blockDim.x) fc[i] = fc_global[i];
#if SHARED_CLASSES
    u8* classes = reinterpret_cast<u8*>(value_owner + WARPS_PER_CTA * 256);
    for (int i = threadIdx.x; i < N_GROUPS; i += blockDim.x) classes[i] = group_class[i];
#else
    const u8* classes = group_class;
#endif
    __syncthreads();

    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const u32 lanes_below = (1u << lane) - 1u;
    const int global_warp = blockIdx.x * WARPS_PER_CTA + warp;
    const int total_warps = gridDim.x * WARPS_PER_CTA;
    u8* masks = mask_scratch + (i64)global_warp * scratch_per_warp;
    u32* vals = staged_values + warp * 256;
    u16* owners = value_owner + warp * 256;  // lane | context << 8 of each value symbol

    for (int b = global_warp; b < n_blocks; b += total_warps) {
        const u8* block = payload + table.offset[b];
        const int mode = (int)table.mode[b];
        const int n = (int)table.n_frames[b];
        const i64 frame0 = table.out_frame[b];
#if REDUCE
        Moments acc = {0, 0, 0};
#endif

        if (mode == MODE_ZERO) {
#if REDUCE
            for (int t = 0; t < n; ++t) flush_frame(acc, lane, frame0 + t, total_out, row_out, col_out);
#else
            elem_t* dst = out + frame0 * (i64)FRAME_PIXELS;
            for (i64 i = lane; i < (i64)n * FRAME_PIXELS; i += 32) dst[i] = 0;
#endif
            continue;
        }
        if (mode == MODE_RAW) {
            for (int t = 0; t < n; ++t) {
                const u8* src = block + (i64)t * FRAME_PIXELS * ELEM_SIZE;
#if REDUCE
                for (int j = lane; j < N_GROUPS; j += 32) {
                    const u32 bits = reduce_mask[j];
                    for (int i = 0; i < 8; ++i) {
                        const int p = 8 * j + i;
                        if (((bits >> i) & 1u) && p < FRAME_PIXELS)
                            add_pixel(acc, load_le(src + (i64)p * ELEM_SIZE), p);
                    }
                }
                flush_frame(acc, lane, frame0 + t, total_out, row_out, col_out);
#else
                elem_t* dst = out + (frame0 + t) * (i64)FRAME_PIXELS;
                for (int p = lane; p < FRAME_PIXELS; p += 32) dst[p] = (elem_t)load_le(src + (i64)p * ELEM_SIZE);
#endif
            }
            continue;
        }
        if (mode != MODE_RANS) {
            if (lane == 0) status[b] = ERR_MODE;
            continue;
        }

        const u32 n_words = table.n_words[b];
        const u32 n_nonzero = table.n_nonzero[b];
        const u32 n_escapes = table.n_escapes[b];
        const u16* words = reinterpret_cast<const u16*>(block + LANE_STATES_BYTES);
        const u32 escapes_at = (LANE_STATES_BYTES + 2 * n_words + 3) & ~3u;
        const u8* escapes = block + escapes_at;
        u32 x = reinterpret_cast<const u32*>(block)[lane];
        int err = 0;
        if (__any_sync(FULL, x < RANS_L)) err = ERR_STATE_RANGE;
        u32 pos = 0;

        // Phase A: masks. Symbol a = a0 + lane is group j of frame a / G; j advances by 32
        // (mod G) per step instead of being divided out.
        const int n_masks = n * N_GROUPS;
        u32 popcount_sum = 0;
        int j = lane % N_GROUPS;
        for (int a0 = 0; a0 < n_masks && !err; a0 += 32) {
            const int a = a0 + lane;
            const bool active = a < n_masks;
            u32 s = 0;
            if (active) {
                const int c = 2 * classes[j];
                const u32 slot = x & PROB_MASK;
                s = sym[c * 4096 + slot];
                const u32 f = fc[c * 256 + s];
                x = (f & 0xffffu) * (x >> PROB_BITS) + slot - (f >> 16);
            }
            const u32 need = __ballot_sync(FULL, active && x < RANS_L);
            // Errors are reported for the first failing symbol in decode order, as the
            // sequential reference does: a missing word (during the symbol's decode) before a
            // padding bit (checked after it).
#if TAIL_BITS
            const u32 bad_pad = __ballot_sync(FULL, active && j == N_GROUPS - 1 && (s >> TAIL_BITS) != 0);
#else
            const u32 bad_pad = 0;
#endif
            if (pos + (u32)__popc(need) > n_words || bad_pad) {
                const u32 k_word = pos + (u32)__popc(need) > n_words ? nth_set_bit(need, n_words - pos) : 32u;
                const u32 k_pad = bad_pad ? (u32)(__ffs(bad_pad) - 1) : 32u;
                err = k_word <= k_pad ? ERR_WORDS_EXHAUSTED : ERR_MASK_PADDING;
                break;
            }
            if ((need >> lane) & 1u) x = (x << 16) | words[pos + __popc(need & lanes_below)];
            pos += __popc(need);
            if (lane == 0) prefetch_words(words, pos, n_words);
            if (active) masks[a] = (u8)s;
            popcount_sum += __popc(s);
            j += 32;
            while (j >= N_GROUPS) j -= N_GROUPS;
        }
        if (!err) {
            u64 total_nz = warp_sum64(popcount_sum);
            total_nz = __shfl_sync(FULL, total_nz, 0);
            if (total_nz != n_nonzero) err = ERR_NONZERO_COUNT;
        }
        if (!err) {
            // The bytes between the words and the escapes must be zero (checked before phase B).
            int pad = 0;
            if (lane == 0)
                for (u32 k = LANE_STATES_BYTES + 2 * n_words; k < escapes_at; ++k) pad |= block[k];
            if (__shfl_sync(FULL, pad, 0)) err = ERR_PADDING;
        }
        __syncwarp();

        // Phase B: values, frame by frame, 32 groups at a time.
        u32 vbase = 0;
        u32 e = 0;
        // The next chunk's mask byte is loaded one chunk ahead (software pipelining).
        u32 m_next = (!err && lane < N_GROUPS) ? masks[lane] : 0u;
        for (int t = 0; t < n && !err; ++t) {
#if !REDUCE
            elem_t* row = out + (frame0 + t) * (i64)FRAME_PIXELS;
#endif
            for (int j0 = 0; j0 < N_GROUPS; j0 += 32) {
                const int j = j0 + lane;
                const u32 m = m_next;
                {
                    const int jn = j0 + 32 < N_GROUPS ? j0 + 32 + lane : lane;
                    const int tn = j0 + 32 < N_GROUPS ? t : t + 1;
                    m_next = (tn < n && jn < N_GROUPS) ? masks[(i64)tn * N_GROUPS + jn] : 0u;
                }
                if (lane == 0) prefetch_words(words, pos, n_words);
                const u32 count = __popc(m);
                u32 incl = count;
#pragma unroll
                for (int d = 1; d < 32; d <<= 1) {
                    const u32 y = __shfl_up_sync(FULL, incl, d);
                    if (lane >= d) incl += y;
                }
                const u32 excl = incl - count;
                const u32 chunk_total = __shfl_sync(FULL, incl, 31);
                // owners[k] = the lane (group of this chunk) holding the chunk's k-th value,
                // with the value context of that group in the high byte.
                if (count) {
                    const u16 info = (u16)(lane | ((2 * classes[j] + 1) << 8));
                    for (u32 i = 0; i < count; ++i) owners[excl + i] = info;
                }
                __syncwarp();
                const u32 rot = vbase & 31u;
                const u32 k_lane = (lane - rot) & 31u;  // this lane's symbol index in a round
                const u32 below = (1u << k_lane) - 1u;
                for (u32 r0 = 0; r0 < chunk_total; r0 += 32) {
                    const u32 k = r0 + k_lane;
                    const bool active = k < chunk_total;
                    u32 s = 0;
                    if (active) {
                        const int c = owners[k & 255u] >> 8;
                        const u32 slot = x & PROB_MASK;
                        s = sym[c * 4096 + slot];
                        const u32 f = fc[c * 256 + s];
                        x = (f & 0xffffu) * (x >> PROB_BITS) + slot - (f >> 16);
                    }
                    const u32 need = __ballot_sync(FULL, active && x < RANS_L);
                    const u32 order = rotate_right(need, rot);  // bit k = symbol k of the round
                    const u32 esc = __ballot_sync(FULL, active && s == ESCAPE_SYMBOL);
                    u32 value = s + 1;
                    const bool short_words = pos + (u32)__popc(need) > n_words;
                    if (esc || short_words) {
                        // Rare path: escapes, or a stream that runs out. The first failing
                        // symbol in decode order decides the error, as in the sequential
                        // reference: its missing word, or else its escape.
                        const u32 esc_order = rotate_right(esc, rot);
                        const u32 escapes_left = n_escapes - e;
                        bool has_escape = false;
                        if (active && s == ESCAPE_SYMBOL) {
                            const u32 rank = __popc(esc_order & below);
                            if (rank < escapes_left) {
                                value = load_le(escapes + (i64)(e + rank) * ELEM_SIZE);
                                has_escape = true;
                            }
                        }
                        const u32 low =
                            rotate_right(__ballot_sync(FULL, has_escape && value < ESCAPE_MIN_VALUE), rot);
                        const u32 k_word = short_words ? nth_set_bit(order, n_words - pos) : 32u;
                        const u32 k_esc = (u32)__popc(esc) > escapes_left ? nth_set_bit(esc_order, escapes_left) : 32u;
                        const u32 k_low = low ? (u32)(__ffs(low) - 1) : 32u;
                        if (k_word < 32u || k_esc < 32u || k_low < 32u) {
                            err = (k_word <= k_esc && k_word <= k_low) ? ERR_WORDS_EXHAUSTED
                                  : (k_esc < k_low ? ERR_ESCAPES_EXHAUSTED : ERR_ESCAPE_VALUE);
                            break;
                        }
                        e += __popc(esc);
                    }
                    if ((need >> lane) & 1u) x = (x << 16) | words[pos + __popc(order & below)];
                    pos += __popc(need);
                    if (active) vals[k & 255u] = value;
                }
                if (err) break;
                __syncwarp();
                u32 px[8];
                u32 rank = excl;
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    px[i] = ((m >> i) & 1u) ? vals[(rank++) & 255u] : 0u;
                }
#if REDUCE
                if (j < N_GROUPS) {
                    const u32 bits = reduce_mask[j] & m;
#pragma unroll
                    for (int i = 0; i < 8; ++i)
                        if ((bits >> i) & 1u) add_pixel(acc, px[i], 8 * j + i);
                }
#else
                if (j < N_GROUPS) store_group(row, j, px);
#endif
                __syncwarp();
                vbase += chunk_total;
            }
#if REDUCE
            if (!err) flush_frame(acc, lane, frame0 + t, total_out, row_out, col_out);
#endif
        }
        if (!err && e != n_escapes) err = ERR_UNUSED_ESCAPES;
        if (!err && pos != n_words) err = ERR_UNUSED_WORDS;
        if (!err && __any_sync(FULL, x != RANS_L)) err = ERR_FINAL_STATE;
        if (err && lane == 0) status[b] = err;
    }
}
#endif  // !QEM2_ONLY

// ---------------------------------------------------------------------------------------
// decode_qem_blocks_v2: the same blocks, the same checks and status codes, leaner phase B.
//
// What changed against decode_qem_blocks (the reasoning is in docs/performance/results.md,
// "rANS decode kernel v2"):
// * every shared-memory access goes through a 32-bit shared-window address computed once
//   (ld/st.shared), not a generic pointer the compiler rebuilds from SR_CgaCtaId inside the
//   loops;
// * a chunk's value entries carry the pixel (0..255 within the 32 groups) and the value
//   context, written by 8 unrolled predicated stores instead of a divergent per-lane loop;
// * dense: each decoded value is stored straight to its pixel of a per-warp, zeroed chunk
//   buffer (u16, or u32 for 4-byte counts), which each lane then reads back as one vector
//   (its 8 pixels), stores to the frame and re-zeroes: no per-pixel gather;
// * fused reduction: the entry also carries the detector-mask bit of its pixel, so the lane
//   that decodes a value adds it to the moments at once; no buffer, no gather;
// * the next group's class (phase A) and the next chunk's masks are loaded a step ahead.
//
// Dynamic shared memory per thread block:
//   N_CONTEXTS * (4096 + 1024) + WARPS_PER_CTA * (256 * PIX_BYTES + 512)
//   (+ N_GROUPS rounded up to 16 when SHARED_CLASSES), PIX_BYTES = 4 if ELEM_SIZE == 4 else 2.
// ---------------------------------------------------------------------------------------

#if ELEM_SIZE == 4
typedef u32 pix_t;
#define PIX_BYTES 4
#else
typedef u16 pix_t;
#define PIX_BYTES 2
#endif

#ifdef __CUDACC__  // nvcc (both passes) and NVRTC
// Accesses to the per-warp buffers that lanes exchange through (entries, pixels) carry a
// "memory" clobber, so neither compiler moves them across __syncwarp; the read-only tables
// (sym, fc, classes) do not need one.
typedef u32 saddr_t;  // address in the shared-memory window
__device__ __forceinline__ saddr_t shared_address(const void* p) {
    return (saddr_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ u32 lds_u8(saddr_t a) {
    u32 v;
    asm volatile("ld.shared.u8 %0, [%1];" : "=r"(v) : "r"(a));
    return v;
}
__device__ __forceinline__ u32 lds_u16(saddr_t a) {
    u32 v;
    asm volatile("ld.shared.u16 %0, [%1];" : "=r"(v) : "r"(a) : "memory");
    return v;
}
__device__ __forceinline__ u32 lds_u32(saddr_t a) {
    u32 v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a));
    return v;
}
__device__ __forceinline__ uint4 lds_v4(saddr_t a) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(a)
                 : "memory");
    return v;
}
__device__ __forceinline__ void sts_u16(saddr_t a, u32 v) {
    asm volatile("st.shared.u16 [%0], %1;" ::"r"(a), "h"((unsigned short)v) : "memory");
}
__device__ __forceinline__ void sts_u32(saddr_t a, u32 v) {
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(a), "r"(v) : "memory");
}
__device__ __forceinline__ void sts_v4_zero(saddr_t a) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(a), "r"(0u) : "memory");
}
#else  // host emulation (tests/cuda_simt.py): plain pointers into the emulated smem
typedef u8* saddr_t;
static inline saddr_t shared_address(void* p) { return (saddr_t)p; }
static inline saddr_t shared_address(const void* p) { return (saddr_t)p; }
static inline u32 lds_u8(saddr_t a) { return *a; }
static inline u32 lds_u16(saddr_t a) { u16 v; memcpy(&v, a, 2); return v; }
static inline u32 lds_u32(saddr_t a) { u32 v; memcpy(&v, a, 4); return v; }
static inline uint4 lds_v4(saddr_t a) { uint4 v; memcpy(&v, a, 16); return v; }
static inline void sts_u16(saddr_t a, u32 v) { u16 w = (u16)v; memcpy(a, &w, 2); }
static inline void sts_u32(saddr_t a, u32 v) { memcpy(a, &v, 4); }
static inline void sts_v4_zero(saddr_t a) { memset(a, 0, 16); }
#endif

__device__ __forceinline__ void sts_pix(saddr_t a, u32 v) {
#if PIX_BYTES == 4
    sts_u32(a, v);
#else
    sts_u16(a, v);
#endif
}

// One rANS symbol (§11) on state x with context c; the renormalisation is the caller's.
__device__ __forceinline__ u32 rans_symbol(u32& x, saddr_t s_sym, saddr_t s_fc, u32 c) {
    const u32 slot = x & PROB_MASK;
    const u32 s = lds_u8(s_sym + (c << 12) + slot);
    const u32 f = lds_u32(s_fc + (((c << 8) + s) << 2));
    x = (f & 0xffffu) * (x >> PROB_BITS) + slot - (f >> 16);
    return s;
}

// Thread blocks per SM the register allocation of v2 is held to (3 x 16 warps = 48 warps,
// the occupancy that shared memory allows for 8 contexts; 40 registers a thread).
#ifndef V2_MIN_CTAS
#define V2_MIN_CTAS (1536 / (WARPS_PER_CTA * 32) > 0 ? 1536 / (WARPS_PER_CTA * 32) : 1)
#endif

#if SHARED_CLASSES
#define CLASS_OF(j) lds_u8(s_cls + (j))
#else
#define CLASS_OF(j) ((u32)__ldg(group_class + (j)))
#endif

// Entry of a chunk's value k: pixel within the chunk | value context << 8 | counted << 11.
#define ENTRY_PIXEL(e) ((e) & 255u)
#define ENTRY_CONTEXT(e) (((e) >> 8) & 7u)
#define ENTRY_COUNTED(e) (((e) >> 11) & 1u)

#if !QEM2_ONLY  // benchmarks of the 2.0 kernel compile it alone
extern "C" __global__ void __launch_bounds__(WARPS_PER_CTA * 32, V2_MIN_CTAS)
decode_qem_blocks_v2(const u8* __restrict__ payload, const i64* __restrict__ t_offset,
                     const u32* __restrict__ t_mode, const u32* __restrict__ t_frames,
                     const u32* __restrict__ t_words, const u32* __restrict__ t_nonzero,
                     const u32* __restrict__ t_escapes, const i64* __restrict__ t_out_frame,
                     int n_blocks,
                     const u8* __restrict__ group_class, const u8* __restrict__ sym_global,
                     const u32* __restrict__ fc_global, u8* __restrict__ mask_scratch,
                     i64 scratch_per_warp, elem_t* __restrict__ out,
                     const u8* __restrict__ reduce_mask,  // REDUCE: mask bits per group
                     u64* __restrict__ total_out, u64* __restrict__ row_out,
                     u64* __restrict__ col_out, int* __restrict__ status) {
    // Dynamic shared memory: sym | fc | per-warp pixel buffers | per-warp entries | classes.
    extern __shared__ __align__(16) u8 smem[];
    for (int i = threadIdx.x; i < N_CONTEXTS * 4096 / 4; i += blockDim.x)
        reinterpret_cast<u32*>(smem)[i] = reinterpret_cast<const u32*>(sym_global)[i];
    u32* fc_init = reinterpret_cast<u32*>(smem + N_CONTEXTS * 4096);
    for (int i = threadIdx.x; i < N_CONTEXTS * 256; i += blockDim.x) fc_init[i] = fc_global[i];
    u32* pix_init = reinterpret_cast<u32*>(smem + N_CONTEXTS * 5120);
    for (int i = threadIdx.x; i < WARPS_PER_CTA * 256 * PIX_BYTES / 4; i += blockDim.x)
        pix_init[i] = 0;
#if SHARED_CLASSES
    u8* cls_init = smem + N_CONTEXTS * 5120 + WARPS_PER_CTA * (256 * PIX_BYTES + 512);
    for (int i = threadIdx.x; i < N_GROUPS; i += blockDim.x) cls_init[i] = group_class[i];
#endif
    __syncthreads();

    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const u32 lanes_below = (1u << lane) - 1u;
    const int global_warp = blockIdx.x * WARPS_PER_CTA + warp;
    const int total_warps = gridDim.x * WARPS_PER_CTA;
    u8* masks = mask_scratch + (i64)global_warp * scratch_per_warp;
    const saddr_t s_sym = shared_address(smem);
    const saddr_t s_fc = s_sym + N_CONTEXTS * 4096;
#if !REDUCE
    const saddr_t s_pix = s_sym + N_CONTEXTS * 5120 + warp * (256 * PIX_BYTES);
#endif
    const saddr_t s_ent = s_sym + N_CONTEXTS * 5120 + WARPS_PER_CTA * (256 * PIX_BYTES) + warp * 512;
#if SHARED_CLASSES
    const saddr_t s_cls = s_sym + N_CONTEXTS * 5120 + WARPS_PER_CTA * (256 * PIX_BYTES + 512);
#endif

    for (int b = global_warp; b < n_blocks; b += total_warps) {
        const u8* block = payload + t_offset[b];
        const int mode = (int)t_mode[b];
        const int n = (int)t_frames[b];
        const i64 frame0 = t_out_frame[b];
#if REDUCE
        Moments acc = {0, 0, 0};
#endif

        if (mode == MODE_ZERO) {
#if REDUCE
            for (int t = 0; t < n; ++t) flush_frame(acc, lane, frame0 + t, total_out, row_out, col_out);
#else
            elem_t* dst = out + frame0 * (i64)FRAME_PIXELS;
            for (i64 i = lane; i < (i64)n * FRAME_PIXELS; i += 32) dst[i] = 0;
#endif
            continue;
        }
        if (mode == MODE_RAW) {
            for (int t = 0; t < n; ++t) {
                const u8* src = block + (i64)t * FRAME_PIXELS * ELEM_SIZE;
#if REDUCE
                for (int j = lane; j < N_GROUPS; j += 32) {
                    const u32 bits = reduce_mask[j];
                    for (int i = 0; i < 8; ++i) {
                        const int p = 8 * j + i;
                        if (((bits >> i) & 1u) && p < FRAME_PIXELS)
                            add_pixel(acc, load_le(src + (i64)p * ELEM_SIZE), p);
                    }
                }
                flush_frame(acc, lane, frame0 + t, total_out, row_out, col_out);
#else
                elem_t* dst = out + (frame0 + t) * (i64)FRAME_PIXELS;
                for (int p = lane; p < FRAME_PIXELS; p += 32) dst[p] = (elem_t)load_le(src + (i64)p * ELEM_SIZE);
#endif
            }
            continue;
        }
        if (mode != MODE_RANS) {
            if (lane == 0) status[b] = ERR_MODE;
            continue;
        }

        const u32 n_words = t_words[b];
        const u32 n_nonzero = t_nonzero[b];
        const u32 n_escapes = t_escapes[b];
        const u16* words = reinterpret_cast<const u16*>(block + LANE_STATES_BYTES);
        const u32 escapes_at = (LANE_STATES_BYTES + 2 * n_words + 3) & ~3u;
        const u8* escapes = block + escapes_at;
        u32 x = __ldg(reinterpret_cast<const u32*>(block) + lane);
        int err = 0;
        if (__any_sync(FULL, x < RANS_L)) err = ERR_STATE_RANGE;
        u32 pos = 0;

        // Phase A: masks, exactly as decode_qem_blocks (group j of symbol a advances by 32
        // mod G per step); the class of the next step's group is loaded one step ahead.
        const int n_masks = n * N_GROUPS;
        u32 popcount_sum = 0;
        int j = lane % N_GROUPS;
        u32 cls = CLASS_OF(j);
        for (int a0 = 0; a0 < n_masks && !err; a0 += 32) {
            const int a = a0 + lane;
            const bool active = a < n_masks;
            const u32 c = 2 * cls;
            int jn = j + 32;
            while (jn >= N_GROUPS) jn -= N_GROUPS;
            cls = CLASS_OF(jn);
            u32 s = 0;
            if (active) s = rans_symbol(x, s_sym, s_fc, c);
            const u32 need = __ballot_sync(FULL, active && x < RANS_L);
#if TAIL_BITS
            const u32 bad_pad = __ballot_sync(FULL, active && j == N_GROUPS - 1 && (s >> TAIL_BITS) != 0);
#else
            const u32 bad_pad = 0;
#endif
            if (pos + (u32)__popc(need) > n_words || bad_pad) {
                const u32 k_word = pos + (u32)__popc(need) > n_words ? nth_set_bit(need, n_words - pos) : 32u;
                const u32 k_pad = bad_pad ? (u32)(__ffs(bad_pad) - 1) : 32u;
                err = k_word <= k_pad ? ERR_WORDS_EXHAUSTED : ERR_MASK_PADDING;
                break;
            }
            if ((need >> lane) & 1u) x = (x << 16) | (u32)__ldg(words + pos + __popc(need & lanes_below));
            pos += __popc(need);
            if (lane == 0) prefetch_words(words, pos, n_words);
            if (active) masks[a] = (u8)s;
            popcount_sum += __popc(s);
            j = jn;
        }
        if (!err) {
            u64 total_nz = warp_sum64(popcount_sum);
            total_nz = __shfl_sync(FULL, total_nz, 0);
            if (total_nz != n_nonzero) err = ERR_NONZERO_COUNT;
        }
        if (!err) {
            int pad = 0;
            if (lane == 0)
                for (u32 k = LANE_STATES_BYTES + 2 * n_words; k < escapes_at; ++k) pad |= block[k];
            if (__shfl_sync(FULL, pad, 0)) err = ERR_PADDING;
        }
        __syncwarp();

        // Phase B: values, frame by frame, 32 groups (a chunk) at a time.
        u32 vbase = 0;
        u32 e = 0;
        u32 m_next = (!err && lane < N_GROUPS) ? masks[lane] : 0u;
        for (int t = 0; t < n && !err; ++t) {
#if !REDUCE
            elem_t* row = out + (frame0 + t) * (i64)FRAME_PIXELS;
#endif
            for (int j0 = 0; j0 < N_GROUPS; j0 += 32) {
                const int jg = j0 + lane;
                const bool in_frame = jg < N_GROUPS;
                const u32 m = m_next;
                {
                    const int jn = j0 + 32 < N_GROUPS ? j0 + 32 + lane : lane;
                    const int tn = j0 + 32 < N_GROUPS ? t : t + 1;
                    m_next = (tn < n && jn < N_GROUPS) ? masks[(i64)tn * N_GROUPS + jn] : 0u;
                }
                const u32 info = in_frame ? ((2 * CLASS_OF(jg) + 1) << 8) | (8u * lane) : 0u;
#if REDUCE
                const u32 counted = in_frame ? ((u32)__ldg(reduce_mask + jg) & m) : 0u;
#endif
                if (lane == 0) prefetch_words(words, pos, n_words);
                const u32 count = __popc(m);
                u32 incl = count;
#pragma unroll
                for (int d = 1; d < 32; d <<= 1) {
                    const u32 y = __shfl_up_sync(FULL, incl, d);
                    if (lane >= d) incl += y;
                }
                const u32 excl = incl - count;
                const u32 chunk_total = __shfl_sync(FULL, incl, 31);
                {
                    saddr_t slot = s_ent + 2 * excl;
#pragma unroll
                    for (int i = 0; i < 8; ++i) {
                        if ((m >> i) & 1u) {
#if REDUCE
                            sts_u16(slot, info + i + (((counted >> i) & 1u) << 11));
#else
                            sts_u16(slot, info + i);
#endif
                            slot += 2;
                        }
                    }
                }
                __syncwarp();
                const u32 rot = vbase & 31u;
                const u32 k_lane = (lane - rot) & 31u;  // this lane's symbol index in a round
                const u32 below = (1u << k_lane) - 1u;
                for (u32 r0 = 0; r0 < chunk_total; r0 += 32) {
                    const u32 k = r0 + k_lane;
                    const bool active = k < chunk_total;
                    u32 s = 0;
                    u32 entry = 0;
                    if (active) {
                        entry = lds_u16(s_ent + 2 * k);
                        s = rans_symbol(x, s_sym, s_fc, ENTRY_CONTEXT(entry));
                    }
                    const u32 need = __ballot_sync(FULL, active && x < RANS_L);
                    const u32 order = rotate_right(need, rot);  // bit k = symbol k of the round
                    const u32 esc = __ballot_sync(FULL, active && s == ESCAPE_SYMBOL);
                    u32 value = s + 1;
                    const bool short_words = pos + (u32)__popc(need) > n_words;
                    if (esc || short_words) {
                        // Rare path, as decode_qem_blocks: escapes, or a stream that runs out.
                        const u32 esc_order = rotate_right(esc, rot);
                        const u32 escapes_left = n_escapes - e;
                        bool has_escape = false;
                        if (active && s == ESCAPE_SYMBOL) {
                            const u32 rank = __popc(esc_order & below);
                            if (rank < escapes_left) {
                                value = load_le(escapes + (i64)(e + rank) * ELEM_SIZE);
                                has_escape = true;
                            }
                        }
                        const u32 low =
                            rotate_right(__ballot_sync(FULL, has_escape && value < ESCAPE_MIN_VALUE), rot);
                        const u32 k_word = short_words ? nth_set_bit(order, n_words - pos) : 32u;
                        const u32 k_esc = (u32)__popc(esc) > escapes_left ? nth_set_bit(esc_order, escapes_left) : 32u;
                        const u32 k_low = low ? (u32)(__ffs(low) - 1) : 32u;
                        if (k_word < 32u || k_esc < 32u || k_low < 32u) {
                            err = (k_word <= k_esc && k_word <= k_low) ? ERR_WORDS_EXHAUSTED
                                  : (k_esc < k_low ? ERR_ESCAPES_EXHAUSTED : ERR_ESCAPE_VALUE);
                            break;
                        }
                        e += __popc(esc);
                    }
                    if ((need >> lane) & 1u) x = (x << 16) | (u32)__ldg(words + pos + __popc(order & below));
                    pos += __popc(need);
#if REDUCE
                    if (active && ENTRY_COUNTED(entry)) add_pixel(acc, value, 8 * j0 + (int)ENTRY_PIXEL(entry));
#else
                    if (active) sts_pix(s_pix + PIX_BYTES * ENTRY_PIXEL(entry), value);
#endif
                }
                if (err) break;
                __syncwarp();
#if !REDUCE
                {
                    // This lane's 8 pixels (group jg), then zero them for the next chunk.
                    u32 px[8];
                    const saddr_t mine = s_pix + lane * (8 * PIX_BYTES);
#if PIX_BYTES == 2
                    const uint4 q = lds_v4(mine);
                    sts_v4_zero(mine);
                    px[0] = q.x & 0xffffu; px[1] = q.x >> 16;
                    px[2] = q.y & 0xffffu; px[3] = q.y >> 16;
                    px[4] = q.z & 0xffffu; px[5] = q.z >> 16;
                    px[6] = q.w & 0xffffu; px[7] = q.w >> 16;
#else
                    const uint4 q0 = lds_v4(mine);
                    const uint4 q1 = lds_v4(mine + 16);
                    sts_v4_zero(mine);
                    sts_v4_zero(mine + 16);
                    px[0] = q0.x; px[1] = q0.y; px[2] = q0.z; px[3] = q0.w;
                    px[4] = q1.x; px[5] = q1.y; px[6] = q1.z; px[7] = q1.w;
#endif
                    if (in_frame) store_group(row, jg, px);
                }
#endif
                vbase += chunk_total;
            }
#if REDUCE
            if (!err) flush_frame(acc, lane, frame0 + t, total_out, row_out, col_out);
#endif
        }
        if (err) {
            // An error left values in this warp's pixel buffer: zero it for the next block.
#if !REDUCE
            __syncwarp();
            for (int i = lane; i < 256 * PIX_BYTES / 16; i += 32) sts_v4_zero(s_pix + 16 * i);
            __syncwarp();
#endif
        }
        if (!err && e != n_escapes) err = ERR_UNUSED_ESCAPES;
        if (!err && pos != n_words) err = ERR_UNUSED_WORDS;
        if (!err && __any_sync(FULL, x != RANS_L)) err = ERR_FINAL_STATE;
        if (err && lane == 0) status[b] = err;
    }
}
#endif  // !QEM2_ONLY

// ---------------------------------------------------------------------------------------
// Format 2.0 (docs/qem-format.md §19): decode_qem2_blocks, one warp per block entry (one
// row band of block_frames frames). Every pixel is one symbol; the entry's 128 rANS states
// sit 4 per lane, lane l holding states 4l..4l+3, so a round decodes 128 consecutive band
// pixels (pixel j on state j % 128), 4 independent state chains per lane, and a lane stores
// its 4 pixels as one vector. Word reads follow the symbol order (ballot per state slot,
// popcounts below the lane). Symbol 255 takes the next escape; an escaped value must not
// be codable directly (below 255 with a slot: the coded bitmap). Same checks, order and
// status codes as quantem/io/qem/rans2.py. REDUCE: the band's masked pixels are added to
// per-frame moments with 64-bit atomics (several bands add to one frame); the caller
// launches only the entries whose band the mask touches, with zeroed sums.
//
// Dynamic shared memory: tables u32[n_classes][4096] | coded u32[n_classes][8] | quad map
// u8[n_quads] (when n_quads <= QEM2_SHARED_QUADS; otherwise read from global). Quad map
// byte: class (bits 0-1) | REDUCE mask bits of the quad's 4 pixels (bits 4-7).
#define QEM2_STATES 128
#define QEM2_STATES_BYTES 512
#define QEM2_SHARED_QUADS 16384
#define QEM2_DET_R (FRAME_PIXELS / DET_C)
#define QEM2_VECTOR (DET_C % 4 == 0)

__device__ __forceinline__ void qem2_store4(elem_t* dst, const u32 (&s)[4]) {
#if ELEM_SIZE == 1
    *reinterpret_cast<u32*>(dst) = s[0] | (s[1] << 8) | (s[2] << 16) | (s[3] << 24);
#elif ELEM_SIZE == 2
    uint2 q;
    q.x = s[0] | (s[1] << 16);
    q.y = s[2] | (s[3] << 16);
    *reinterpret_cast<uint2*>(dst) = q;
#else
    *reinterpret_cast<uint4*>(dst) = make_uint4(s[0], s[1], s[2], s[3]);
#endif
}

__device__ __forceinline__ void qem2_flush(Moments& acc, i64 frame, u64* total_out,
                                           u64* row_out, u64* col_out) {
    const u64 t = warp_sum64(acc.total);
    const u64 r = warp_sum64(acc.rows);
    const u64 c = warp_sum64(acc.cols);
    if ((threadIdx.x & 31) == 0 && (t | r | c)) {
        atomicAdd(reinterpret_cast<unsigned long long*>(total_out + frame), t);
        atomicAdd(reinterpret_cast<unsigned long long*>(row_out + frame), r);
        atomicAdd(reinterpret_cast<unsigned long long*>(col_out + frame), c);
    }
    acc.total = acc.rows = acc.cols = 0;
}

// Thread blocks per SM the 2.0 kernel's registers are held to (benchmarks vary it). Two:
// on the H200 (docs/performance/results.md, rans2 and rans3) 2 CTAs at 64 registers beat
// 3 at 40 (spills) for both the first loop and the present one.
#ifndef QEM2_MIN_CTAS
#define QEM2_MIN_CTAS 2
#endif

// Tuning of decode_qem2_blocks (the same entries, checks, order and status codes whatever
// is chosen; docs/performance/results.md, "rans3"). Benchmarks vary them with defines:
//   QEM2_PREFETCH  0: renormalisation words read at the word only; 1 / 2 (default): plus
//                  prefetch.global.L2 / .L1 QEM2_PREFETCH_WORDS ahead once every
//                  QEM2_PREFETCH_EVERY (2) rounds;
//   QEM2_UNROLL    unroll factor of the whole-round loop (default 2);
//   QEM2_SHFL      0 (default): every renormalising state reads its word with __ldg;
//                  1: at the start of a round every lane loads one of the round's first 32
//                  words (coalesced, not on the round's dependency chain) and the states
//                  take theirs by shuffle; a round needing more than 32 words (rare) reads
//                  them as with 0.
// On the H200 (rans3, 19.33 GB resident): L1 prefetch + unroll 2 decoded at 1.49 TB/s
// with a prefetch every round and 1.53 TB/s with one every second round (the default
// since 2026-12-02, call 4), against 1.45 (unroll 1), 1.37 (no prefetch), 1.44 (a
// cp.async word ring in shared memory, since removed) and 0.98 (the first 2.0 loop,
// since removed).
#ifndef QEM2_PREFETCH
#define QEM2_PREFETCH 2
#endif
#ifndef QEM2_PREFETCH_WORDS
#define QEM2_PREFETCH_WORDS 256
#endif
#ifndef QEM2_PREFETCH_EVERY  // rounds per prefetch (a power of two)
#define QEM2_PREFETCH_EVERY 2
#endif
#ifndef QEM2_UNROLL
#define QEM2_UNROLL 2
#endif
#ifndef QEM2_SHFL
#define QEM2_SHFL 0
#endif
#define QEM2_PRAGMA(x) _Pragma(#x)
#define QEM2_UNROLL_PRAGMA(n) QEM2_PRAGMA(unroll n)

#ifdef __CUDACC__
// Read-only shared tables: not volatile, so the compiler may schedule them freely.
__device__ __forceinline__ u32 lds_u32_ro(saddr_t a) {
    u32 v;
    asm("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a));
    return v;
}
__device__ __forceinline__ u32 lds_u8_ro(saddr_t a) {
    u32 v;
    asm("ld.shared.u8 %0, [%1];" : "=r"(v) : "r"(a));
    return v;
}
__device__ __forceinline__ void qem2_prefetch(const u16* p) {
#if QEM2_PREFETCH == 1
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#elif QEM2_PREFETCH == 2
    asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
#else
    (void)p;
#endif
}
#else  // host emulation (tests/cuda_simt.py)
static inline u32 lds_u32_ro(saddr_t a) { return lds_u32(a); }
static inline u32 lds_u8_ro(saddr_t a) { return lds_u8(a); }
static inline void qem2_prefetch(const u16*) {}
#endif

// The lane's 4 pixels as one vector store (st.global.v2/v4: the C++ uint2 store of
// qem2_store4 compiles to two 32-bit stores).
__device__ __forceinline__ void qem2_store4_v(elem_t* dst, const u32 (&s)[4], u32 p0, u32 p1) {
#if defined(__CUDACC__) && ELEM_SIZE == 2
    (void)s;
    asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(dst), "r"(p0), "r"(p1) : "memory");
#elif defined(__CUDACC__) && ELEM_SIZE == 4
    (void)p0; (void)p1;
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(s[0]), "r"(s[1]),
                 "r"(s[2]), "r"(s[3]) : "memory");
#else
    (void)p0; (void)p1;
    qem2_store4(dst, s);
#endif
}

// x & 4095 kept as an AND (the compiler otherwise forms (x << 2) & 0x3ffc and one more add).
__device__ __forceinline__ u32 qem2_slot(u32 x) {
#ifdef __CUDACC__
    u32 v;
    asm("and.b32 %0, %1, 4095;" : "=r"(v) : "r"(x));
    return v;
#else
    return x & PROB_MASK;
#endif
}

// One round: the lane's states x[0..3] decode band pixels j..j+3 (nv of them valid;
// WHOLE: all 4), context quad byte q. Returns a status (0: go on). Same checks and order
// as quantem/io/qem/rans2.py.
template <bool WHOLE>
__device__ __forceinline__ int qem2_round(u32 (&x)[4], u32& pos, u32& e, const int nv,
                                          const u32 q, const saddr_t s_tab,
                                          const saddr_t s_coded, const u16* words,
                                          const u32 n_words, const u8* esc,
                                          const u32 n_escapes, const u32 below,
                                          const int lane, elem_t* dst, Moments& acc,
                                          const int pixel) {
#if QEM2_SHFL
    // one of the round's first 32 words a lane, asked for before the round needs them
    // (index clamped into the entry: words[n_words - 1] is the entry's, words[-1] a state's)
    const u32 wi = pos + (u32)lane < n_words ? pos + (u32)lane : n_words - 1u;
    const u32 wl = (u32)__ldg(words + (int)wi);
#endif
    const saddr_t cb = s_tab + ((q & 3u) << 14);
    u32 s[4], y[4], a[4];
    bool renorm[4];
    bool any_esc = false;
#pragma unroll
    for (int h = 0; h < 4; ++h) {
        const bool valid = WHOLE || h < nv;
        a[h] = lds_u32_ro(cb + (qem2_slot(x[h]) << 2));
        y[h] = (((a[h] >> 8) & 4095u) + 1u) * (x[h] >> 12) + (a[h] >> 20);
        s[h] = a[h] & 255u;
        renorm[h] = valid && y[h] < RANS_L;
        if (!(WHOLE && ELEM_SIZE == 2)) any_esc |= valid && s[h] == 255u;
    }
    // u16 pixels 0,1 and 2,3 packed for the vector store: byte 0 of each table entry
    u32 p0 = 0, p1 = 0;
    if (WHOLE && ELEM_SIZE == 2) {
        p0 = __byte_perm(a[0], __byte_perm(a[1], 0u, 0x4044), 0x7650);
        p1 = __byte_perm(a[2], __byte_perm(a[3], 0u, 0x4044), 0x7650);
        // a symbol 255 (ESCAPE) carries into bit 8 of its half when 1 is added
        any_esc = (((p0 + 0x10001u) | (p1 + 0x10001u)) & 0x01000100u) != 0;
    }
    // words in symbol order: the lane's k-th renormalisation takes word pos + rank + k,
    // rank = renormalisations of the lanes below
    u32 count = 0, rank = 0;
#pragma unroll
    for (int h = 0; h < 4; ++h) {
        const u32 need = __ballot_sync(FULL, renorm[h]);
        count += __popc(need);
        rank += __popc(need & below);
    }
    if (pos + count > n_words) return ERR_WORDS_EXHAUSTED;
#if QEM2_SHFL
    if (count <= 32u) {
#pragma unroll
        for (int h = 0; h < 4; ++h) {
            const u32 v = __shfl_sync(FULL, wl, (int)rank);
            if (renorm[h]) y[h] = __byte_perm(v, y[h], 0x5410);  // (y << 16) | v
            rank += renorm[h] ? 1u : 0u;
            if (WHOLE || h < nv) x[h] = y[h];
        }
    } else
#endif
    {
        rank += pos;
#pragma unroll
        for (int h = 0; h < 4; ++h) {
            if (renorm[h]) y[h] = (y[h] << 16) | (u32)__ldg(words + rank++);
            if (WHOLE || h < nv) x[h] = y[h];
        }
    }
    pos += count;
    if (__any_sync(FULL, any_esc)) {
        u32 em[4], ec = 0, er = e;
#pragma unroll
        for (int h = 0; h < 4; ++h) {
            em[h] = __ballot_sync(FULL, (WHOLE || h < nv) && s[h] == 255u);
            ec += __popc(em[h]);
            er += __popc(em[h] & below);
        }
        if (e + ec > n_escapes) return ERR_ESCAPES_EXHAUSTED;
        bool bad = false;
#pragma unroll
        for (int h = 0; h < 4; ++h) {
            if ((em[h] >> lane) & 1u) {
                s[h] = load_le(esc + (i64)(er++) * ELEM_SIZE);
                bad |= s[h] < 255u &&
                       ((lds_u32_ro(s_coded + (((q & 3u) * 8u + (s[h] >> 5)) << 2)) >> (s[h] & 31u)) & 1u);
            }
        }
        if (__any_sync(FULL, bad)) return ERR_ESCAPE_VALUE;
        e += ec;
        p0 = s[0] | (s[1] << 16);
        p1 = s[2] | (s[3] << 16);
    }
#if REDUCE
    const u32 m = q >> 4;
    if (m) {
#pragma unroll
        for (int h = 0; h < 4; ++h)
            if ((m >> h) & 1u) add_pixel(acc, s[h], pixel + h);
    }
#else
    if (WHOLE && QEM2_VECTOR) {
        qem2_store4_v(dst, s, p0, p1);
    } else {
#pragma unroll
        for (int h = 0; h < 4; ++h)
            if (WHOLE || h < nv) dst[h] = (elem_t)s[h];
    }
#endif
    return 0;
}

// Quad bytes: shared memory (SHQ) or global.
template <bool SHQ>
__device__ __forceinline__ u32 qem2_quad(saddr_t s_q, const u8* g_q, int i) {
    if (SHQ) return lds_u8_ro(s_q + i);
    return (u32)__ldg(g_q + i);
}

// The RANS part of one entry: states, padding, rounds (whole rounds in their own loop, the
// next round's quad class loaded a round ahead; one partial round a frame when the band's
// pixels are not a multiple of 128), final checks.
template <bool SHQ>
__device__ __forceinline__ int qem2_entry(
    const u8* block, const u32 n_words, const u32 n_escapes, const int nf, const int bp,
    const int pixel0, const i64 f0, const int quad0, const saddr_t s_tab, const saddr_t s_coded,
    const saddr_t s_q, const u8* g_q, elem_t* out, u64* total_out, u64* row_out,
    u64* col_out, const int lane, const u32 below) {
    const u16* words = reinterpret_cast<const u16*>(block + QEM2_STATES_BYTES);
    const u8* esc = block + ((QEM2_STATES_BYTES + 2 * n_words + 3) & ~3u);
    const uint4 x4 = reinterpret_cast<const uint4*>(block)[lane];
    u32 x[4] = {x4.x, x4.y, x4.z, x4.w};
    const bool low = x[0] < RANS_L || x[1] < RANS_L || x[2] < RANS_L || x[3] < RANS_L;
    if (__any_sync(FULL, low)) return ERR_STATE_RANGE;
    if ((n_words & 1u) && words[n_words] != 0) return ERR_PADDING;
    const int full = bp >> 7;
    const int tail = bp & 127;
    const int nv_tail = tail - 4 * lane <= 0 ? 0 : (tail - 4 * lane < 4 ? tail - 4 * lane : 4);
    const int qlane = quad0 + lane;  // quad of the lane's pixels in round 0
    u32 pos = 0, e = 0;
    int err = 0;
    Moments acc = {0, 0, 0};
    for (int t = 0; t < nf && !err; ++t) {
        elem_t* dst = out + (f0 + t) * (i64)FRAME_PIXELS + pixel0 + 4 * lane;
        elem_t* d = dst;
        u32 q_next = full ? qem2_quad<SHQ>(s_q, g_q, qlane) : 0u;
#if QEM2_UNROLL > 1
        QEM2_UNROLL_PRAGMA(QEM2_UNROLL)
#endif
        for (int r = 0; r < full; ++r, d += 128) {
            const u32 q = q_next;
            if (r + 1 < full) q_next = qem2_quad<SHQ>(s_q, g_q, qlane + 32 * (r + 1));
            err = qem2_round<true>(x, pos, e, 4, q, s_tab, s_coded, words, n_words, esc,
                                   n_escapes, below, lane, d, acc, pixel0 + 128 * r + 4 * lane);
            if (err) break;
#if QEM2_PREFETCH
            if ((r & (QEM2_PREFETCH_EVERY - 1)) == QEM2_PREFETCH_EVERY - 1 &&
                pos + QEM2_PREFETCH_WORDS < n_words)
                qem2_prefetch(words + pos + QEM2_PREFETCH_WORDS);
#endif
        }
        if (!err && tail) {
            const u32 q = nv_tail ? qem2_quad<SHQ>(s_q, g_q, qlane + 32 * full) : 0u;
            err = qem2_round<false>(x, pos, e, nv_tail, q, s_tab, s_coded, words, n_words,
                                    esc, n_escapes, below, lane, dst + 128 * full, acc,
                                    pixel0 + 128 * full + 4 * lane);
        }
#if REDUCE
        if (!err) qem2_flush(acc, f0 + t, total_out, row_out, col_out);
#endif
    }
    (void)total_out; (void)row_out; (void)col_out;
    if (err) return err;
    const bool final_bad = x[0] != RANS_L || x[1] != RANS_L || x[2] != RANS_L || x[3] != RANS_L;
    if (e != n_escapes) return ERR_UNUSED_ESCAPES;
    if (pos != n_words) return ERR_UNUSED_WORDS;
    if (__any_sync(FULL, final_bad)) return ERR_FINAL_STATE;
    return 0;
}

extern "C" __global__ void __launch_bounds__(WARPS_PER_CTA * 32, QEM2_MIN_CTAS)
decode_qem2_blocks(const u8* __restrict__ payload, const i64* __restrict__ t_offset,
                   const u32* __restrict__ t_mode, const u32* __restrict__ t_frames,
                   const u32* __restrict__ t_words, const u32* __restrict__ t_escapes,
                   const i64* __restrict__ t_out_frame, const u32* __restrict__ t_band,
                   int n_blocks, int band_rows, int n_classes, int n_quads,
                   const u8* __restrict__ quad_map, const u32* __restrict__ tables_global,
                   const u32* __restrict__ coded_global, elem_t* __restrict__ out,
                   u64* __restrict__ total_out, u64* __restrict__ row_out,
                   u64* __restrict__ col_out, int* __restrict__ status) {
    extern __shared__ __align__(16) u8 smem[];
    u32* tab = reinterpret_cast<u32*>(smem);
    u32* coded = tab + n_classes * 4096;
    u8* s_quads = reinterpret_cast<u8*>(coded + n_classes * 8);
    const bool shared_quads = n_quads <= QEM2_SHARED_QUADS;
    for (int i = threadIdx.x; i < n_classes * 4096; i += blockDim.x) tab[i] = tables_global[i];
    for (int i = threadIdx.x; i < n_classes * 8; i += blockDim.x) coded[i] = coded_global[i];
    if (shared_quads)
        for (int i = threadIdx.x; i < n_quads; i += blockDim.x) s_quads[i] = quad_map[i];
    __syncthreads();
    const u8* qmap = shared_quads ? s_quads : quad_map;
    const saddr_t s_tab = shared_address(tab);
    const saddr_t s_coded = shared_address(coded);
    const saddr_t s_q = shared_address(s_quads);
    const int lane = threadIdx.x & 31;
    const u32 below = (1u << lane) - 1u;
    const int band_quads = (band_rows * DET_C + 3) / 4;
    const int total_warps = gridDim.x * WARPS_PER_CTA;
    for (int b = blockIdx.x * WARPS_PER_CTA + (threadIdx.x >> 5); b < n_blocks;
         b += total_warps) {
        const u32 mode = t_mode[b];
        const int nf = (int)t_frames[b];
        const int band = (int)t_band[b];
        const int r0 = band * band_rows;
        const int rows = band_rows < QEM2_DET_R - r0 ? band_rows : QEM2_DET_R - r0;
        const int bp = rows * DET_C;
        const int pixel0 = r0 * DET_C;
        const u8* bq = qmap + (i64)band * band_quads;
        const i64 f0 = t_out_frame[b];
        const u8* block = payload + t_offset[b];
        int err = 0;
        if (mode == MODE_ZERO) {
#if !REDUCE
            for (int t = 0; t < nf; ++t) {
                elem_t* dst = out + (f0 + t) * (i64)FRAME_PIXELS + pixel0;
                for (int j = lane; j < bp; j += 32) dst[j] = 0;
            }
#endif
        } else if (mode == MODE_RAW) {
#if REDUCE
            Moments acc = {0, 0, 0};
#endif
            for (int t = 0; t < nf; ++t) {
                const u8* src = block + (i64)t * bp * ELEM_SIZE;
#if REDUCE
                for (int j = lane; j < bp; j += 32) {
                    const u32 m = (u32)bq[j >> 2] >> 4;
                    if ((m >> (j & 3)) & 1u) {
                        const u32 v = load_le(src + (i64)j * ELEM_SIZE);
                        add_pixel(acc, v, pixel0 + j);
                    }
                }
                qem2_flush(acc, f0 + t, total_out, row_out, col_out);
#else
                elem_t* dst = out + (f0 + t) * (i64)FRAME_PIXELS + pixel0;
                for (int j = lane; j < bp; j += 32) dst[j] = (elem_t)load_le(src + (i64)j * ELEM_SIZE);
#endif
            }
        } else if (mode == MODE_RANS) {
            const int quad0 = band * band_quads;
            if (shared_quads)
                err = qem2_entry<true>(block, t_words[b], t_escapes[b], nf, bp, pixel0, f0,
                                       quad0, s_tab, s_coded, s_q, quad_map, out, total_out,
                                       row_out, col_out, lane, below);
            else
                err = qem2_entry<false>(block, t_words[b], t_escapes[b], nf, bp, pixel0, f0,
                                        quad0, s_tab, s_coded, s_q, quad_map, out, total_out,
                                        row_out, col_out, lane, below);
        } else {
            err = ERR_MODE;
        }
        if (err && lane == 0) status[b] = err;
    }
}
