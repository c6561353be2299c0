"""The DPC stages' field arithmetic on CuPy arrays in a few launches each.

The rules are :mod:`quantem.stem4d.dpc`'s (beam shifts, rotation by minimum curl, rotation of the
field, divergence, the half-turn's skewness); this module only fuses their array
operations for the GPU. On a 512 x 512 scan each field is 2 MB, so the bytes take
microseconds and the time went to launching some 60 small CuPy operations and their
Python.

Sums are deterministic: every reduction has a launch shape that depends on the element
count only, each thread adds its elements in a fixed order, blocks reduce in shared memory
in a fixed tree, and the blocks' partial sums are added in a fixed order (on the device,
or on the host with numpy); there are no atomics. Sums accumulate in float64 whatever the
field's precision. Derivatives use :mod:`quantem.stem4d.cuda.stencil`'s arithmetic (that of
``numpy.gradient``). Compared with the CPU the elementwise sums may be contracted into
fused multiply-adds and the reductions add in another order, so the results agree to
rounding (``docs/compute.md``'s tolerances), not bit for bit; run to run they are
bit-identical.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import numpy as np

#: Threads of a reduction block, and the most blocks a reduction uses.
BLOCK = 256
MAX_BLOCKS = 128

_SOURCE = r"""
#define BLOCK 256

// Reduce M per-thread values over the block into out[0..M) (thread 0 writes); fixed tree.
template <int M>
__device__ void block_sum(double (&v)[M], double* out) {
    __shared__ double s[M][BLOCK];
    for (int m = 0; m < M; ++m) s[m][threadIdx.x] = v[m];
    __syncthreads();
    for (int width = BLOCK / 2; width > 0; width >>= 1) {
        if (threadIdx.x < width) {
            for (int m = 0; m < M; ++m) s[m][threadIdx.x] += s[m][threadIdx.x + width];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        for (int m = 0; m < M; ++m) out[m] = s[m][0];
    }
}

// The partial derivatives of f at flat index i: numpy.gradient's arithmetic (edge_order 1).
template <typename T>
__device__ void partials(const T* f, long long i, long long n_r, long long n_c, double h_r,
                         double h_c, T& d_r, T& d_c) {
    const long long r = i / n_c;
    const long long c = i - r * n_c;
    if (r == 0) {
        d_r = (f[i + n_c] - f[i]) / (T)h_r;
    } else if (r == n_r - 1) {
        d_r = (f[i] - f[i - n_c]) / (T)h_r;
    } else {
        d_r = (f[i + n_c] - f[i - n_c]) / (T)(2.0 * h_r);
    }
    if (c == 0) {
        d_c = (f[i + 1] - f[i]) / (T)h_c;
    } else if (c == n_c - 1) {
        d_c = (f[i] - f[i - 1]) / (T)h_c;
    } else {
        d_c = (f[i + 1] - f[i - 1]) / (T)(2.0 * h_c);
    }
}

// Count of frames with a CoM, and the sums of their CoM rows and columns.
extern "C" __global__ void quantem_com_sums(const double* row, const double* col,
                                            long long n, double* partial) {
    double v[3] = {0.0, 0.0, 0.0};
    const long long stride = (long long)gridDim.x * BLOCK;
    for (long long i = (long long)blockIdx.x * BLOCK + threadIdx.x; i < n; i += stride) {
        const double r = row[i], c = col[i];
        if (!(isnan(r) || isnan(c))) {
            v[0] += 1.0;
            v[1] += r;
            v[2] += c;
        }
    }
    block_sum<3>(v, partial + 3 * blockIdx.x);
}

// C.C, C.D, D.D of the curl C and divergence D of (f_r, f_c) in detector axes, then the
// same with the axes swapped (find_rotation's six sums).
template <typename T>
__device__ void curl_sums(const T* f_r, const T* f_c, long long n_r, long long n_c,
                          double h_r, double h_c, double* partial) {
    double v[6] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    const long long n = n_r * n_c;
    const long long stride = (long long)gridDim.x * BLOCK;
    for (long long i = (long long)blockIdx.x * BLOCK + threadIdx.x; i < n; i += stride) {
        T rr, rc, cr, cc;
        partials<T>(f_r, i, n_r, n_c, h_r, h_c, rr, rc);
        partials<T>(f_c, i, n_r, n_c, h_r, h_c, cr, cc);
        const double c0 = (double)(cr - rc), d0 = (double)(rr + cc);
        const double c1 = (double)(rr - cc), d1 = (double)(cr + rc);
        v[0] += c0 * c0;
        v[1] += c0 * d0;
        v[2] += d0 * d0;
        v[3] += c1 * c1;
        v[4] += c1 * d1;
        v[5] += d1 * d1;
    }
    block_sum<6>(v, partial + 6 * blockIdx.x);
}

extern "C" __global__ void quantem_curl_sums_f64(const double* f_r, const double* f_c,
        long long n_r, long long n_c, double h_r, double h_c, double* partial) {
    curl_sums<double>(f_r, f_c, n_r, n_c, h_r, h_c, partial);
}

extern "C" __global__ void quantem_curl_sums_f32(const float* f_r, const float* f_c,
        long long n_r, long long n_c, double h_r, double h_c, double* partial) {
    curl_sums<float>(f_r, f_c, n_r, n_c, h_r, h_c, partial);
}

// Skewness, pass 1: the sum of x.
template <typename T>
__device__ void value_sum(const T* x, long long n, double* partial) {
    double v[1] = {0.0};
    const long long stride = (long long)gridDim.x * BLOCK;
    for (long long i = (long long)blockIdx.x * BLOCK + threadIdx.x; i < n; i += stride) {
        v[0] += (double)x[i];
    }
    block_sum<1>(v, partial + blockIdx.x);
}

extern "C" __global__ void quantem_sum_f64(const double* x, long long n, double* partial) {
    value_sum<double>(x, n, partial);
}

extern "C" __global__ void quantem_sum_f32(const float* x, long long n, double* partial) {
    value_sum<float>(x, n, partial);
}

// One block: the mean from pass 1's partial sums, added in index order.
extern "C" __global__ void quantem_mean(const double* partial, int blocks, long long n,
                                        double* mean) {
    double v[1] = {0.0};
    for (int b = threadIdx.x; b < blocks; b += BLOCK) v[0] += partial[b];
    double total[1];
    block_sum<1>(v, total);
    if (threadIdx.x == 0) mean[0] = total[0] / (double)n;
}

// Skewness, pass 2: the sums of (x - mean)^2 and (x - mean)^3.
template <typename T>
__device__ void central_sums(const T* x, long long n, const double* mean, double* partial) {
    double v[2] = {0.0, 0.0};
    const double m = mean[0];
    const long long stride = (long long)gridDim.x * BLOCK;
    for (long long i = (long long)blockIdx.x * BLOCK + threadIdx.x; i < n; i += stride) {
        const double d = (double)x[i] - m;
        const double d2 = d * d;
        v[0] += d2;
        v[1] += d2 * d;
    }
    block_sum<2>(v, partial + 2 * blockIdx.x);
}

extern "C" __global__ void quantem_central_f64(const double* x, long long n,
        const double* mean, double* partial) {
    central_sums<double>(x, n, mean, partial);
}

extern "C" __global__ void quantem_central_f32(const float* x, long long n,
        const double* mean, double* partial) {
    central_sums<float>(x, n, mean, partial);
}
"""

_SHIFTS = r"""
const bool valid = !(isnan(r) || isnan(c));
s_r = valid ? (T)((r - mean_r) * scale) : (T)0;
s_c = valid ? (T)((c - mean_c) * scale) : (T)0;
"""

_ROTATE = r"""
o_r = (T)cos_a * f_r - (T)sin_a * f_c;
o_c = (T)sin_a * f_r + (T)cos_a * f_c;
"""

_DIVERGENCE = r"""
const long long r = i / n_c;
const long long c = i - r * n_c;
T d_r, d_c;
if (r == 0) {
    d_r = (f_r[i + n_c] - f_r[i]) / (T)h_r;
} else if (r == n_r - 1) {
    d_r = (f_r[i] - f_r[i - n_c]) / (T)h_r;
} else {
    d_r = (f_r[i + n_c] - f_r[i - n_c]) / (T)(2.0 * h_r);
}
if (c == 0) {
    d_c = (f_c[i + 1] - f_c[i]) / (T)h_c;
} else if (c == n_c - 1) {
    d_c = (f_c[i] - f_c[i - 1]) / (T)h_c;
} else {
    d_c = (f_c[i + 1] - f_c[i - 1]) / (T)(2.0 * h_c);
}
out = d_r + d_c;
"""


@cache
def _module() -> Any:
    import cupy

    return cupy.RawModule(code=_SOURCE, options=("--std=c++14",))


@cache
def _elementwise() -> tuple[Any, Any, Any, Any]:
    import cupy

    shifts = cupy.ElementwiseKernel(
        "float64 r, float64 c, float64 mean_r, float64 mean_c, float64 scale",
        "T s_r, T s_c",
        _SHIFTS,
        "quantem_beam_shifts",
    )
    rotate = cupy.ElementwiseKernel(
        "T f_r, T f_c, float64 cos_a, float64 sin_a", "T o_r, T o_c", _ROTATE,
        "quantem_rotate_field",
    )  # fmt: skip
    divergence = cupy.ElementwiseKernel(
        "raw T f_r, raw T f_c, int64 n_r, int64 n_c, float64 h_r, float64 h_c",
        "T out",
        _DIVERGENCE,
        "quantem_field_divergence",
    )
    negate = cupy.ElementwiseKernel(
        "T a, T b, T c", "T x, T y, T z", "x = -a; y = -b; z = -c;", "quantem_negate3"
    )
    return shifts, rotate, divergence, negate


def _blocks(n: int) -> int:
    """Blocks of a reduction over ``n`` elements: a function of ``n`` only (determinism)."""
    return max(1, min(MAX_BLOCKS, -(-n // (BLOCK * 8))))


def _suffix(array: Any) -> str:
    kind = np.dtype(array.dtype)
    if kind == np.float64:
        return "f64"
    if kind == np.float32:
        return "f32"
    raise ValueError(f"expected a float32 or float64 field, got {kind}")


def _host_sums(partial: Any, blocks: int, width: int) -> np.ndarray:
    """The blocks' partial sums added on the host in block order (one synchronisation)."""
    return partial.get().reshape(blocks, width).sum(axis=0)


def com_sums(row: Any, col: Any) -> tuple[int, float, float]:
    """``(frames with a CoM, sum of their rows, sum of their columns)`` (float64 CoM)."""
    import cupy

    r = cupy.ascontiguousarray(row, dtype=cupy.float64)
    c = cupy.ascontiguousarray(col, dtype=cupy.float64)
    n = r.size
    blocks = _blocks(n)
    partial = cupy.empty(3 * blocks, dtype=cupy.float64)
    _module().get_function("quantem_com_sums")((blocks,), (BLOCK,), (r, c, np.int64(n), partial))
    count, sum_r, sum_c = _host_sums(partial, blocks, 3).tolist()
    return int(count), sum_r, sum_c


def beam_shifts(row: Any, col: Any, mean: tuple[float, float], scale: float, dtype: str):
    """``where(valid, (com - mean) * scale, 0)`` of both CoM axes, as ``dtype``."""
    import cupy

    shifts, _, _, _ = _elementwise()
    s_r = cupy.empty(row.shape, dtype=dtype)
    s_c = cupy.empty(row.shape, dtype=dtype)
    shifts(row, col, float(mean[0]), float(mean[1]), float(scale), s_r, s_c)
    return s_r, s_c


def curl_sums(field_r: Any, field_c: Any, step: tuple[float, float]) -> np.ndarray:
    """``[C.C, C.D, D.D]`` plain then with the axes swapped (six float64 sums)."""
    import cupy

    f_r = cupy.ascontiguousarray(field_r)
    f_c = cupy.ascontiguousarray(field_c, dtype=f_r.dtype)
    n_r, n_c = f_r.shape
    blocks = _blocks(f_r.size)
    partial = cupy.empty(6 * blocks, dtype=cupy.float64)
    kernel = _module().get_function(f"quantem_curl_sums_{_suffix(f_r)}")
    args = (f_r, f_c, np.int64(n_r), np.int64(n_c), np.float64(step[0]), np.float64(step[1]))
    kernel((blocks,), (BLOCK,), (*args, partial))
    return _host_sums(partial, blocks, 6)


def rotate_field(field_r: Any, field_c: Any, angle_deg: float) -> tuple[Any, Any]:
    """``(cos a r - sin a c, sin a r + cos a c)`` in the field's precision, one launch."""
    _, rotate, _, _ = _elementwise()
    a = math.radians(angle_deg)
    return rotate(field_r, field_c, math.cos(a), math.sin(a))


def divergence(field_r: Any, field_c: Any, step: tuple[float, float]) -> Any:
    """``d field_r / d row + d field_c / d col`` (stencil arithmetic), one launch."""
    import cupy

    _, _, kernel, _ = _elementwise()
    f_r = cupy.ascontiguousarray(field_r)
    f_c = cupy.ascontiguousarray(field_c, dtype=f_r.dtype)
    n_r, n_c = f_r.shape
    out = cupy.empty_like(f_r)
    kernel(f_r, f_c, n_r, n_c, float(step[0]), float(step[1]), out)
    return out


def negate(a: Any, b: Any, c: Any) -> tuple[Any, Any, Any]:
    """``(-a, -b, -c)`` in one launch (arrays of one shape and dtype)."""
    _, _, _, kernel = _elementwise()
    return kernel(a, b, c)


def skewness(values: Any) -> float:
    """Third central moment over the second to the power 1.5 (0 for a constant field)."""
    import cupy

    x = cupy.ascontiguousarray(values)
    n = x.size
    blocks = _blocks(n)
    suffix = _suffix(x)
    module = _module()
    partial = cupy.empty(blocks, dtype=cupy.float64)
    module.get_function(f"quantem_sum_{suffix}")((blocks,), (BLOCK,), (x, np.int64(n), partial))
    mean = cupy.empty(1, dtype=cupy.float64)
    module.get_function("quantem_mean")(
        (1,), (BLOCK,), (partial, np.int32(blocks), np.int64(n), mean)
    )
    central = cupy.empty(2 * blocks, dtype=cupy.float64)
    module.get_function(f"quantem_central_{suffix}")(
        (blocks,), (BLOCK,), (x, np.int64(n), mean, central)
    )
    second, third = (_host_sums(central, blocks, 2) / n).tolist()
    return third / second**1.5 if second > 0 else 0.0


__all__ = [
    "BLOCK",
    "MAX_BLOCKS",
    "beam_shifts",
    "com_sums",
    "curl_sums",
    "divergence",
    "negate",
    "rotate_field",
    "skewness",
]
