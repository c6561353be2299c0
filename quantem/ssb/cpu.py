"""The CPU sideband sums compiled with numba: one pass, frequencies in parallel.

The same sums as :func:`quantem.ssb.reconstruct.sideband_sums` (the array-module
reference), computed per frequency in one loop over the pixels, skipping those outside
the frequency's region (G is zero there), with float64 accumulators. Each frequency is
summed by one thread in pixel order, so the result does not depend on the thread count
and repeats bit for bit. It matches the reference within float32 rounding (tested).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from quantem.ssb.aberrations import Aberrations, chi
from quantem.ssb.prepare import Prepared

#: Loosened region test (as in sideband.cu): never skip a pixel the preparation kept.
REGION_SLACK = 1.0001


@numba.njit(cache=True, fastmath=False, parallel=True)
def _sums(g_re, g_im, qx, qy, kx, ky, chi_k, coef, alpha2, out_re, out_im):  # pragma: no cover
    c10, c12a, c12b, c21a, c21b, c23a, c23b, c30, scale = coef
    n_freq, n_pix = g_re.shape
    for q in numba.prange(n_freq):
        qxv = qx[q]
        qyv = qy[q]
        re = 0.0
        im = 0.0
        for k in range(n_pix):
            x = kx[k]
            y = ky[k]
            dx = x - qxv
            dy = y - qyv
            if dx * dx + dy * dy > alpha2 * REGION_SLACK:
                continue
            px = x + qxv
            py = y + qyv
            if (px * px + py * py) * REGION_SLACK < alpha2:
                continue
            gr = g_re[q, k]
            gi = g_im[q, k]
            if gr == 0.0 and gi == 0.0:
                continue
            k2 = dx * dx + dy * dy
            value = 0.5 * c10 * k2 + 0.5 * c12a * (dx * dx - dy * dy) + c12b * dx * dy
            value += (c21a / 3.0 * dx + c21b / 3.0 * dy) * k2
            value += c23a / 3.0 * dx * (dx * dx - 3.0 * dy * dy)
            value += c23b / 3.0 * dy * (3.0 * dx * dx - dy * dy)
            value += 0.25 * c30 * k2 * k2
            phase = chi_k[k] - value * scale
            c = math.cos(phase)
            s = math.sin(phase)
            re += gr * c + gi * s
            im += gi * c - gr * s
        out_re[q] = re
        out_im[q] = im


def numba_sideband_sums(
    prepared: Prepared, aberrations: Aberrations, *, block_bytes: int | None = None
) -> np.ndarray:
    """``S(Q)`` for numpy-prepared data (``block_bytes`` unused: nothing is staged)."""
    if prepared.xp is not np:
        raise TypeError("numba_sideband_sums needs data prepared on numpy (backend cpu)")
    G = prepared.G
    real = G.real.dtype
    a = aberrations
    wavelength = prepared.wavelength_a
    coef = np.array(
        (a.C10, a.C12a, a.C12b, a.C21a, a.C21b, a.C23a, a.C23b, a.C30, 2 * math.pi / wavelength)
    )
    chi_k = chi(prepared.kx.astype(np.float64), prepared.ky.astype(np.float64), a, wavelength, np)
    out_re = np.empty(G.shape[0])
    out_im = np.empty(G.shape[0])
    _sums(
        np.ascontiguousarray(G.real),
        np.ascontiguousarray(G.imag),
        prepared.qx.astype(np.float64),
        prepared.qy.astype(np.float64),
        prepared.kx.astype(np.float64),
        prepared.ky.astype(np.float64),
        chi_k,
        coef,
        float(prepared.alpha) ** 2,
        out_re,
        out_im,
    )
    parts = np.empty((G.shape[0], 2), dtype=real)
    parts[:, 0] = out_re
    parts[:, 1] = out_im
    return parts.view(G.dtype).reshape(G.shape[0])


__all__ = ["numba_sideband_sums"]
