// SSB sideband sums on the GPU: one thread block per scan frequency Q.
//
// S(Q) = sum_k G(k, Q) exp(-i (chi(k) - chi(k - Q))) over the left double-overlap region
// of Q. G is already zero outside that region (quantem.ssb.prepare), so the region test
// here only skips work and memory reads: it is loosened by REGION_SLACK so that it never
// drops a pixel the host kept. chi(k - Q) is evaluated with the same polynomial as
// quantem.ssb.aberrations.chi. The block's partial sums are reduced by a fixed shared-
// memory tree (no atomics), so a result repeats bit for bit on a device.
//
// Defines (from quantem.ssb.cuda): BLOCK (threads per block, a power of two).
// Launch with 2 * BLOCK * sizeof(float) bytes of dynamic shared memory.

#define REGION_SLACK 1.0001f

struct Coefficients {
    float c10, c12a, c12b, c21a, c21b, c23a, c23b, c30, scale;
};

__device__ __forceinline__ float chi_at(float x, float y, const Coefficients& c) {
    float k2 = x * x + y * y;
    float value = (0.5f * c.c10) * k2;
    value += (0.5f * c.c12a) * (x * x - y * y) + c.c12b * (x * y);
    value += ((c.c21a / 3.0f) * x + (c.c21b / 3.0f) * y) * k2;
    value += (c.c23a / 3.0f) * x * (x * x - 3.0f * y * y)
           + (c.c23b / 3.0f) * y * (3.0f * x * x - y * y);
    value += (0.25f * c.c30) * k2 * k2;
    return value * c.scale;
}

extern "C" __global__ void ssb_sideband_sums(
    const float2* __restrict__ G,      // (n_freq, n_pix)
    const float* __restrict__ qx,      // (n_freq,)
    const float* __restrict__ qy,
    const float* __restrict__ kx,      // (n_pix,)
    const float* __restrict__ ky,
    const float* __restrict__ chi_k,   // (n_pix,) chi at the pixels, this trial
    const float c10, const float c12a, const float c12b, const float c21a,
    const float c21b, const float c23a, const float c23b, const float c30,
    const float scale,                 // 2 pi / wavelength
    const float alpha2,
    const int n_pix,
    float2* __restrict__ sums)         // (n_freq,)
{
    // Dynamic shared memory (2 * BLOCK floats, given at launch), as the other quantem
    // kernels declare it.
    extern __shared__ __align__(16) unsigned char smem[];
    float* shared_re = reinterpret_cast<float*>(smem);
    float* shared_im = shared_re + BLOCK;
    const Coefficients coef = {c10, c12a, c12b, c21a, c21b, c23a, c23b, c30, scale};
    const int q = blockIdx.x;
    const float qxv = qx[q];
    const float qyv = qy[q];
    const float limit = alpha2 * REGION_SLACK;
    const float2* row = G + (size_t)q * (size_t)n_pix;
    float re = 0.0f;
    float im = 0.0f;
    for (int k = threadIdx.x; k < n_pix; k += BLOCK) {
        const float x = kx[k];
        const float y = ky[k];
        const float dx = x - qxv;
        const float dy = y - qyv;
        if (dx * dx + dy * dy > limit) continue;
        const float px = x + qxv;
        const float py = y + qyv;
        if ((px * px + py * py) * REGION_SLACK < alpha2) continue;
        const float2 g = row[k];
        const float phase = chi_k[k] - chi_at(dx, dy, coef);
        float s, c;
        sincosf(phase, &s, &c);
        re += g.x * c + g.y * s;
        im += g.y * c - g.x * s;
    }
    shared_re[threadIdx.x] = re;
    shared_im[threadIdx.x] = im;
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) {
            shared_re[threadIdx.x] += shared_re[threadIdx.x + stride];
            shared_im[threadIdx.x] += shared_im[threadIdx.x + stride];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        sums[q] = make_float2(shared_re[0], shared_im[0]);
    }
}
