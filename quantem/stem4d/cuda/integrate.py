"""Fourier integration of a phase gradient (iDPC) on CuPy arrays in four launches.

The rule is :func:`quantem.stem4d.dpc.integrate.integrate_gradient`'s (mirror extension, the
regularised inverse Laplacian, the mean set to 0); this module only fuses its array
operations for the GPU, where a 512 x 512 scan makes the launches, not the bytes, the
cost: one kernel writes both mirror-extended components into one ``(2, M, N)`` array,
one batched ``fft2`` transforms them, one kernel forms
``(q_r G_r + q_c G_c) / (2 pi i (|q|^2 + q_reg^2))`` with the mean set to 0, and one
``ifft2`` returns the phase. Compared with the CPU (numpy) path the sums are contracted
into fused multiply-adds and the complex division is done by hand, so the results agree
to rounding (``docs/compute.md``'s float64 tolerance), not bit for bit; run to run they
are bit-identical (no atomics, fixed launch shapes).
"""

from __future__ import annotations

from functools import cache
from typing import Any

_MIRROR = r"""
const long long n = 4 * n_r * n_c;  // elements of one extended component
const long long k = i % n;
const long long r = k / (2 * n_c), c = k - r * (2 * n_c);
const long long rr = r < n_r ? r : 2 * n_r - 1 - r;
const long long cc = c < n_c ? c : 2 * n_c - 1 - c;
const T v = i < n ? g_r[rr * n_c + cc] : g_c[rr * n_c + cc];
// The row component is odd across the row edge, the column component across the column
// edge (the even extension of the phase).
const bool negate = i < n ? (r >= n_r) : (c >= n_c);
out = negate ? -v : v;
"""

_SPECTRUM = r"""
const long long r = i / n_c, c = i - r * n_c;
const C f0 = g[i], f1 = g[i + n_r * n_c];
const R re = q_r[r] * f0.real() + q_c[c] * f1.real();
const R im = q_r[r] * f0.imag() + q_c[c] * f1.imag();
// (re + i im) / (i d) = (im - i re) / d; the mean (i == 0) is undefined and set to 0.
out = i == 0 ? C(0, 0) : C(im / d, -re / d);
"""


@cache
def _kernels() -> tuple[Any, Any]:
    import cupy

    mirror = cupy.ElementwiseKernel(
        "raw T g_r, raw T g_c, int64 n_r, int64 n_c", "T out", _MIRROR, "quantem_mirror_pair"
    )
    spectrum = cupy.ElementwiseKernel(
        "raw C g, raw R q_r, raw R q_c, R d, int64 n_r, int64 n_c",
        "C out",
        _SPECTRUM,
        "quantem_idpc_spectrum",
    )
    return mirror, spectrum


def integrate(grad_r: Any, grad_c: Any, q_r: Any, q_c: Any, denominator: Any, mirror: bool) -> Any:
    """The phase of ``(grad_r, grad_c)``: ``q_r``/``q_c`` the 1-D frequencies of the
    (extended) grid, ``denominator`` ``2 pi (|q|^2 + q_reg^2)`` on it (real)."""
    import cupy

    mirror_kernel, spectrum_kernel = _kernels()
    n_r, n_c = grad_r.shape
    real = grad_r.dtype
    g_r = cupy.ascontiguousarray(grad_r)
    g_c = cupy.ascontiguousarray(grad_c, dtype=real)
    if mirror:
        fields = cupy.empty((2, 2 * n_r, 2 * n_c), dtype=real)
        mirror_kernel(g_r, g_c, n_r, n_c, fields)
    else:
        fields = cupy.stack([g_r, g_c])
    m_r, m_c = fields.shape[1:]
    transformed = cupy.fft.fft2(fields, axes=(-2, -1))
    spectrum = cupy.empty((m_r, m_c), dtype=transformed.dtype)
    spectrum_kernel(transformed, q_r, q_c, denominator, m_r, m_c, spectrum)
    phase = cupy.fft.ifft2(spectrum).real
    return cupy.ascontiguousarray(phase[:n_r, :n_c]).astype(real, copy=False)


__all__ = ["integrate"]
