"""The CPU sideband sums compiled with numba: one pass, frequencies in parallel.

The same sums as :func:`quantem.ssb.reconstruct.sideband_sums` (the array-module
reference), computed per frequency over the pixels of its left double-overlap region
only. Those pixels are found once per preparation (:func:`region_runs`, the same float
comparisons that masked ``G`` in :func:`quantem.ssb.prepare`) and kept as runs of
consecutive pixel indices, so an evaluation of the loss during a fit reads only the
region's part of ``G``, tests nothing per pixel and copies nothing. Accumulators are
float64; each frequency is summed by one thread in pixel order, so the result does not
depend on the thread count and repeats bit for bit. It matches the reference within
float32 rounding (tested).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from quantem.ssb.aberrations import Aberrations, chi
from quantem.ssb.prepare import Prepared, _left_region

#: Frequencies per block when the region runs are found (bounded temporaries).
_RUN_BLOCK = 256


@numba.njit(cache=True, fastmath=False, parallel=True)
def _sums(
    G, run_offsets, run_start, run_stop, qx, qy, kx, ky, chi_k, coef, out_re, out_im
):  # pragma: no cover
    c10, c12a, c12b, c21a, c21b, c23a, c23b, c30, scale = coef
    n_freq = G.shape[0]
    for q in numba.prange(n_freq):
        qxv = qx[q]
        qyv = qy[q]
        re = 0.0
        im = 0.0
        for run in range(run_offsets[q], run_offsets[q + 1]):
            for k in range(run_start[run], run_stop[run]):
                dx = kx[k] - qxv
                dy = ky[k] - qyv
                k2 = dx * dx + dy * dy
                value = 0.5 * c10 * k2 + 0.5 * c12a * (dx * dx - dy * dy) + c12b * dx * dy
                value += (c21a / 3.0 * dx + c21b / 3.0 * dy) * k2
                value += c23a / 3.0 * dx * (dx * dx - 3.0 * dy * dy)
                value += c23b / 3.0 * dy * (3.0 * dx * dx - dy * dy)
                value += 0.25 * c30 * k2 * k2
                phase = chi_k[k] - value * scale
                c = math.cos(phase)
                s = math.sin(phase)
                g = G[q, k]
                gr = np.float64(g.real)
                gi = np.float64(g.imag)
                re += gr * c + gi * s
                im += gi * c - gr * s
        out_re[q] = re
        out_im[q] = im


def region_runs(prepared: Prepared) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The left-region pixels of every prepared frequency as runs of pixel indices.

    Returns ``(offsets, start, stop)``: frequency ``q`` owns runs
    ``offsets[q]:offsets[q + 1]``, each the pixels ``start[run]:stop[run]``, ascending.
    """
    real = prepared.G.real.dtype
    alpha = real.type(prepared.alpha)
    starts, stops, counts = [], [], []
    n_freq = prepared.G.shape[0]
    for s in range(0, n_freq, _RUN_BLOCK):
        mask = _left_region(
            prepared.qx[s : s + _RUN_BLOCK, None],
            prepared.qy[s : s + _RUN_BLOCK, None],
            prepared.kx[None, :],
            prepared.ky[None, :],
            alpha,
        )
        edges = np.diff(np.pad(mask, ((0, 0), (1, 1))).astype(np.int8), axis=1)
        rows_up, cols_up = np.nonzero(edges == 1)
        _, cols_down = np.nonzero(edges == -1)
        starts.append(cols_up)
        stops.append(cols_down)
        counts.append(np.bincount(rows_up, minlength=mask.shape[0]))
    offsets = np.zeros(n_freq + 1, dtype=np.int64)
    np.cumsum(np.concatenate(counts), out=offsets[1:])
    return (
        offsets,
        np.concatenate(starts).astype(np.int32),
        np.concatenate(stops).astype(np.int32),
    )


def _plan(prepared: Prepared) -> dict:
    """Arrays the loop needs, derived once per preparation and reused by every call."""
    plan = prepared.engine_cache.get("numba")
    if plan is None:
        offsets, start, stop = region_runs(prepared)
        plan = {
            "offsets": offsets,
            "start": start,
            "stop": stop,
            "qx": prepared.qx.astype(np.float64),
            "qy": prepared.qy.astype(np.float64),
            "kx": prepared.kx.astype(np.float64),
            "ky": prepared.ky.astype(np.float64),
            "G": np.ascontiguousarray(prepared.G),
        }
        prepared.engine_cache["numba"] = plan
    return plan


def numba_sideband_sums(
    prepared: Prepared, aberrations: Aberrations, *, block_bytes: int | None = None
) -> np.ndarray:
    """``S(Q)`` for numpy-prepared data (``block_bytes`` unused: nothing is staged)."""
    if prepared.xp is not np:
        raise TypeError("numba_sideband_sums needs data prepared on numpy (backend cpu)")
    plan = _plan(prepared)
    G = plan["G"]
    a = aberrations
    wavelength = prepared.wavelength_a
    coef = np.array(
        (a.C10, a.C12a, a.C12b, a.C21a, a.C21b, a.C23a, a.C23b, a.C30, 2 * math.pi / wavelength)
    )
    chi_k = chi(plan["kx"], plan["ky"], a, wavelength, np)
    out_re = np.empty(G.shape[0])
    out_im = np.empty(G.shape[0])
    _sums(
        G,
        plan["offsets"],
        plan["start"],
        plan["stop"],
        plan["qx"],
        plan["qy"],
        plan["kx"],
        plan["ky"],
        chi_k,
        coef,
        out_re,
        out_im,
    )
    parts = np.empty((G.shape[0], 2), dtype=G.real.dtype)
    parts[:, 0] = out_re
    parts[:, 1] = out_im
    return parts.view(G.dtype).reshape(G.shape[0])


__all__ = ["numba_sideband_sums", "region_runs"]
