// Exact detector reductions over a stack of frames (n_frames, FRAME_ELEMS), integer data,
// accumulated in unsigned 64-bit integers so the results are exact for any valid input.
//
// Constants injected as #defines by quantem/cuda/module_loader.py:
//   ELEM_T         element type (unsigned char, unsigned short, unsigned int)
//   FRAME_ELEMS    pixels per frame
//   DET_C          detector columns (pixel index p is at row p / DET_C, column p % DET_C)
//   WARPS_PER_CTA  warps per thread block of the per-frame kernels
//
// masked_sum and moments read only the pixels of the mask (a sorted list of flat pixel
// indices): one warp per frame, adjacent lanes on adjacent pixels so reads of a mask row
// coalesce; a disk of radius 20 on 192 x 192 frames reads ~5 KB of a 72 KB frame.

typedef unsigned long long u64;
typedef long long i64;

__device__ __forceinline__ u64 warp_sum(u64 v) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffffu, v, d);
    return v;
}

extern "C" __global__ void masked_sum(const ELEM_T* __restrict__ data, i64 n_frames,
                                      const int* __restrict__ pixels, int n_pixels,
                                      u64* __restrict__ out) {
    const int lane = threadIdx.x & 31;
    const i64 frame = (i64)blockIdx.x * WARPS_PER_CTA + (threadIdx.x >> 5);
    if (frame >= n_frames) return;
    const ELEM_T* f = data + frame * (i64)FRAME_ELEMS;
    u64 a0 = 0, a1 = 0;
    int i = lane;
    for (; i + 32 < n_pixels; i += 64) {
        a0 += f[pixels[i]];
        a1 += f[pixels[i + 32]];
    }
    if (i < n_pixels) a0 += f[pixels[i]];
    const u64 total = warp_sum(a0 + a1);
    if (lane == 0) out[frame] = total;
}

// Vector form of masked_sum for frames whose byte size is a multiple of 16: the mask is a
// list of the 16-byte vectors it touches (index within the frame, bit k = element k of
// the vector is in the mask); each lane loads whole vectors, several in flight, so a warp
// reads only the sectors the mask covers with full-width, independent loads.
#define ELEMS_PER_VEC (16 / sizeof(ELEM_T))
#define VECS_PER_FRAME ((FRAME_ELEMS * sizeof(ELEM_T)) / 16)

__device__ __forceinline__ u64 masked_vector_sum(uint4 q, unsigned bits) {
    const unsigned w[4] = {q.x, q.y, q.z, q.w};
    u64 total = 0;
#pragma unroll
    for (int k = 0; k < (int)ELEMS_PER_VEC; ++k) {
        const int per_word = 4 / sizeof(ELEM_T);
        const unsigned word = w[k / per_word];
        const int shift = (k % per_word) * 8 * sizeof(ELEM_T);
        const unsigned value = (word >> shift) & (unsigned)((1ull << (8 * sizeof(ELEM_T))) - 1ull);
        total += ((bits >> k) & 1u) ? (u64)value : 0ull;
    }
    return total;
}

extern "C" __global__ void masked_sum_vec(const uint4* __restrict__ data, i64 n_frames,
                                          const unsigned* __restrict__ vec_index,
                                          const unsigned* __restrict__ vec_bits, int n_vec,
                                          u64* __restrict__ out) {
    const int lane = threadIdx.x & 31;
    const i64 frame = (i64)blockIdx.x * WARPS_PER_CTA + (threadIdx.x >> 5);
    if (frame >= n_frames) return;
    const uint4* f = data + frame * (i64)VECS_PER_FRAME;
    u64 total = 0;
#pragma unroll 4
    for (int i = lane; i < n_vec; i += 32) total += masked_vector_sum(__ldg(f + vec_index[i]), vec_bits[i]);
    total = warp_sum(total);
    if (lane == 0) out[frame] = total;
}

// Vector form of moments for frames whose rows are a whole number of 16-byte vectors (so
// no vector straddles two rows): the same (vector index, element bits) list as
// masked_sum_vec. Per vector, the masked values give s = sum(v) and w = sum(k * v) (k the
// element's place in the vector); with the vector's first element at (row, col0) the
// moments gain s, row * s and col0 * s + w. For 1- and 2-byte elements s and w fit in 32
// bits (at most 16 * 255 and 8 * 65535; w at most 28 * 65535), so the per-vector work is
// 32-bit and only the three accumulations are 64-bit (exact: every term is an integer).
template <int SIZE> struct VecPart { typedef unsigned T; };
template <> struct VecPart<4> { typedef u64 T; };
typedef VecPart<sizeof(ELEM_T)>::T part_t;

__device__ __forceinline__ void vector_moments(uint4 q, unsigned bits, part_t& s, part_t& w) {
    const unsigned words[4] = {q.x, q.y, q.z, q.w};
    const int per_word = 4 / sizeof(ELEM_T);
    const unsigned full = (1u << ELEMS_PER_VEC) - 1u;
    s = 0;
    w = 0;
    if (sizeof(ELEM_T) == 2 && bits == full) {
        // Two elements per word: lo at place 2j, hi at 2j + 1, so the word adds
        // lo + hi to s and 2j * (lo + hi) + hi to w.
        unsigned hi_sum = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const unsigned lo = words[j] & 0xFFFFu, hi = words[j] >> 16;
            const unsigned pair = lo + hi;
            s += pair;
            w += (unsigned)(2 * j) * pair;
            hi_sum += hi;
        }
        w += hi_sum;
        return;
    }
#pragma unroll
    for (int k = 0; k < (int)ELEMS_PER_VEC; ++k) {
        const unsigned word = words[k / per_word];
        const int shift = (k % per_word) * 8 * sizeof(ELEM_T);
        part_t value = (word >> shift) & (unsigned)((1ull << (8 * sizeof(ELEM_T))) - 1ull);
        value = ((bits >> k) & 1u) ? value : (part_t)0;
        s += value;
        w += (part_t)k * value;
    }
}

extern "C" __global__ void moments_vec(const uint4* __restrict__ data, i64 n_frames,
                                       const unsigned* __restrict__ vec_index,
                                       const unsigned* __restrict__ vec_bits, int n_vec,
                                       u64* __restrict__ total_out, u64* __restrict__ row_out,
                                       u64* __restrict__ col_out) {
    const int lane = threadIdx.x & 31;
    const i64 frame = (i64)blockIdx.x * WARPS_PER_CTA + (threadIdx.x >> 5);
    if (frame >= n_frames) return;
    const uint4* f = data + frame * (i64)VECS_PER_FRAME;
    u64 t = 0, r = 0, c = 0;
#pragma unroll 4
    for (int i = lane; i < n_vec; i += 32) {
        const unsigned v = vec_index[i];
        part_t s, w;
        vector_moments(__ldg(f + v), vec_bits[i], s, w);
        const unsigned first = v * (unsigned)ELEMS_PER_VEC;
        const unsigned row = first / (unsigned)DET_C;
        const unsigned col0 = first - row * (unsigned)DET_C;
        t += (u64)s;
        r += (u64)row * s;
        c += (u64)col0 * s + w;
    }
    t = warp_sum(t);
    r = warp_sum(r);
    c = warp_sum(c);
    if (lane == 0) {
        total_out[frame] = t;
        row_out[frame] = r;
        col_out[frame] = c;
    }
}

extern "C" __global__ void moments(const ELEM_T* __restrict__ data, i64 n_frames,
                                   const int* __restrict__ pixels, int n_pixels,
                                   u64* __restrict__ total_out, u64* __restrict__ row_out,
                                   u64* __restrict__ col_out) {
    const int lane = threadIdx.x & 31;
    const i64 frame = (i64)blockIdx.x * WARPS_PER_CTA + (threadIdx.x >> 5);
    if (frame >= n_frames) return;
    const ELEM_T* f = data + frame * (i64)FRAME_ELEMS;
    u64 t = 0, r = 0, c = 0;
    for (int i = lane; i < n_pixels; i += 32) {
        const int p = pixels[i];
        const u64 v = f[p];
        t += v;
        r += v * (u64)(p / DET_C);
        c += v * (u64)(p % DET_C);
    }
    t = warp_sum(t);
    r = warp_sum(r);
    c = warp_sum(c);
    if (lane == 0) {
        total_out[frame] = t;
        row_out[frame] = r;
        col_out[frame] = c;
    }
}

// Sum over frames per pixel: thread = pixel, blockIdx.y = a group of frames; each thread
// sums its group then adds into the uint64 output (exact, order-independent).
extern "C" __global__ void sum_frames(const ELEM_T* __restrict__ data, i64 n_frames,
                                      i64 frames_per_group, u64* __restrict__ out) {
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= FRAME_ELEMS) return;
    const i64 f0 = (i64)blockIdx.y * frames_per_group;
    i64 f1 = f0 + frames_per_group;
    if (f1 > n_frames) f1 = n_frames;
    u64 a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    const ELEM_T* d = data + f0 * (i64)FRAME_ELEMS + p;
    i64 f = f0;
    for (; f + 3 < f1; f += 4, d += 4 * (i64)FRAME_ELEMS) {
        a0 += d[0];
        a1 += d[(i64)FRAME_ELEMS];
        a2 += d[2 * (i64)FRAME_ELEMS];
        a3 += d[3 * (i64)FRAME_ELEMS];
    }
    for (; f < f1; ++f, d += FRAME_ELEMS) a0 += d[0];
    const u64 total = a0 + a1 + a2 + a3;
    if (total) atomicAdd(out + p, total);
}

// Zero the listed pixels (sorted flat indices) of every frame, in place: the validity mask
// of a load whose options change neither dtype nor shape. One warp per frame, as masked_sum.
extern "C" __global__ void zero_pixels(ELEM_T* __restrict__ data, i64 n_frames,
                                       const int* __restrict__ pixels, int n_pixels) {
    const int lane = threadIdx.x & 31;
    const i64 frame = (i64)blockIdx.x * WARPS_PER_CTA + (threadIdx.x >> 5);
    if (frame >= n_frames) return;
    ELEM_T* f = data + frame * (i64)FRAME_ELEMS;
    for (int i = lane; i < n_pixels; i += 32) f[pixels[i]] = (ELEM_T)0;
}
