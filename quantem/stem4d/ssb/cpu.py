"""The CPU sideband sums compiled with numba: one pass, frequencies in parallel.

The same sums as :func:`quantem.stem4d.ssb.reconstruct.sideband_sums` (the array-module
reference), computed per frequency over the pixels of its left double-overlap region
only. Those pixels are found once per preparation (:func:`region_runs`, the same float
comparisons that masked ``G`` in :func:`quantem.stem4d.ssb.prepare`) and kept as runs of
consecutive pixels of one detector row, so an evaluation of the loss during a fit reads
only the region's part of ``G``, tests nothing per pixel and copies nothing.

**Phases by recurrence.** Along a detector row the scattering angle moves by a constant
step ``s``, ``k_j = k_0 + j s``, and the phase ``P(j) = chi(k_j) - chi(k_j - Q)`` is a
polynomial of degree 3 in ``j`` (chi has degree 4 and the difference drops the leading
term). So ``exp(-i P(j))`` follows from its value and those of its first three finite
differences at ``j = 0`` by three complex products per pixel: three ``sincos`` per run
(the third difference of a cubic is the same for every run of a frequency: once per
frequency) instead of one per pixel. The four phases are evaluated in float64 at ``k_0 + j s``; the
recurrence's rounding over a run (at most the disk's width) stays below 1e-9 rad, far
inside the float32 rounding of the reference (tested against it, C10 to C30).

Accumulators are float64; each frequency is summed by one thread in pixel order, so the
result does not depend on the thread count and repeats bit for bit.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from quantem.stem4d.ssb.aberrations import Aberrations
from quantem.stem4d.ssb.prepare import Prepared, _left_region

#: Frequencies per block when the region runs are found (bounded temporaries).
_RUN_BLOCK = 256


@numba.njit(cache=True, fastmath=False, inline="always")
def _chi(x, y, coef):  # pragma: no cover
    c10, c12a, c12b, c21a, c21b, c23a, c23b, c30, scale = (
        coef[0],
        coef[1],
        coef[2],
        coef[3],
        coef[4],
        coef[5],
        coef[6],
        coef[7],
        coef[8],
    )
    k2 = x * x + y * y
    value = 0.5 * c10 * k2 + 0.5 * c12a * (x * x - y * y) + c12b * x * y
    value += (c21a / 3.0 * x + c21b / 3.0 * y) * k2
    value += c23a / 3.0 * x * (x * x - 3.0 * y * y)
    value += c23b / 3.0 * y * (3.0 * x * x - y * y)
    value += 0.25 * c30 * k2 * k2
    return value * scale


@numba.njit(cache=True, fastmath=False, parallel=True)
def _sums(
    G, run_offsets, run_start, run_stop, qx, qy, kx, ky, step_x, step_y, coef, out_re, out_im
):  # pragma: no cover
    n_freq = G.shape[0]
    for q in numba.prange(n_freq):
        qxv = qx[q]
        qyv = qy[q]
        re = 0.0
        im = 0.0
        if run_offsets[q] == run_offsets[q + 1]:
            out_re[q] = 0.0
            out_im[q] = 0.0
            continue
        # The third difference of a cubic is the same everywhere: once per frequency.
        x0 = np.float64(kx[run_start[run_offsets[q]]])
        y0 = np.float64(ky[run_start[run_offsets[q]]])
        p = np.empty(4)  # the phases at the first run's first four steps
        for j in range(4):
            x = x0 + j * step_x
            y = y0 + j * step_y
            p[j] = _chi(x, y, coef) - _chi(x - qxv, y - qyv, coef)
        d3 = p[3] - 3.0 * p[2] + 3.0 * p[1] - p[0]
        f3_re, f3_im = math.cos(d3), -math.sin(d3)
        for run in range(run_offsets[q], run_offsets[q + 1]):
            first = run_start[run]
            x0 = np.float64(kx[first])
            y0 = np.float64(ky[first])
            p0 = _chi(x0, y0, coef) - _chi(x0 - qxv, y0 - qyv, coef)
            x, y = x0 + step_x, y0 + step_y
            p1 = _chi(x, y, coef) - _chi(x - qxv, y - qyv, coef)
            x, y = x0 + 2.0 * step_x, y0 + 2.0 * step_y
            p2 = _chi(x, y, coef) - _chi(x - qxv, y - qyv, coef)
            d1 = p1 - p0
            d2 = p2 - 2.0 * p1 + p0
            # e = exp(-i P(j)) and exp(-i) of its differences, advanced pixel by pixel.
            e_re, e_im = math.cos(p0), -math.sin(p0)
            f1_re, f1_im = math.cos(d1), -math.sin(d1)
            f2_re, f2_im = math.cos(d2), -math.sin(d2)
            for k in range(first, run_stop[run]):
                g = G[q, k]
                gr = np.float64(g.real)
                gi = np.float64(g.imag)
                re += gr * e_re - gi * e_im
                im += gr * e_im + gi * e_re
                t = e_re * f1_re - e_im * f1_im
                e_im = e_re * f1_im + e_im * f1_re
                e_re = t
                t = f1_re * f2_re - f1_im * f2_im
                f1_im = f1_re * f2_im + f1_im * f2_re
                f1_re = t
                t = f2_re * f3_re - f2_im * f3_im
                f2_im = f2_re * f3_im + f2_im * f3_re
                f2_re = t
        out_re[q] = re
        out_im[q] = im


def region_runs(prepared: Prepared) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The left-region pixels of every prepared frequency as runs of pixel indices.

    Returns ``(offsets, start, stop)``: frequency ``q`` owns runs
    ``offsets[q]:offsets[q + 1]``, each the pixels ``start[run]:stop[run]``, ascending,
    all in one detector row (a run never crosses a row, so its angles are equally spaced).
    """
    real = prepared.G.real.dtype
    alpha = real.type(prepared.alpha)
    rows = np.asarray(prepared.pixels)[:, 0]
    # True between two pixels of the list that are neighbours in one detector row.
    same_row = np.zeros(len(rows) + 1, dtype=bool)
    same_row[1:-1] = (rows[1:] == rows[:-1]) & (np.diff(np.asarray(prepared.pixels)[:, 1]) == 1)
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
        padded = np.pad(mask, ((0, 0), (1, 1)))
        # A run starts where the pixel is in and the one before is out or not its neighbour.
        begins = padded[:, 1:-1] & ~(padded[:, :-2] & same_row[None, :-1])
        ends = padded[:, 1:-1] & ~(padded[:, 2:] & same_row[None, 1:])
        rows_up, cols_up = np.nonzero(begins)
        _, cols_down = np.nonzero(ends)
        starts.append(cols_up)
        stops.append(cols_down + 1)
        counts.append(np.bincount(rows_up, minlength=mask.shape[0]))
    offsets = np.zeros(n_freq + 1, dtype=np.int64)
    np.cumsum(np.concatenate(counts), out=offsets[1:])
    return (
        offsets,
        np.concatenate(starts).astype(np.int32),
        np.concatenate(stops).astype(np.int32),
    )


def row_step(prepared: Prepared) -> tuple[float, float]:
    """The scattering-angle step (radians, scan frame) from one pixel to the next of a row."""
    cal = prepared.calibration
    det_x, det_y = 0.0, prepared.detector_sampling_mrad[1] * 1e-3  # one column further
    if cal.transpose:
        det_x, det_y = det_y, det_x
    theta = math.radians(cal.rotation_deg)
    return (
        math.cos(theta) * det_x - math.sin(theta) * det_y,
        math.sin(theta) * det_x + math.cos(theta) * det_y,
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
            "step": row_step(prepared),
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
        *plan["step"],
        coef,
        out_re,
        out_im,
    )
    parts = np.empty((G.shape[0], 2), dtype=G.real.dtype)
    parts[:, 0] = out_re
    parts[:, 1] = out_im
    return parts.view(G.dtype).reshape(G.shape[0])


__all__ = ["numba_sideband_sums", "region_runs", "row_step"]
