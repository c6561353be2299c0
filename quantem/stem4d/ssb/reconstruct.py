"""Sideband integration with the aberration phase removed; the complex object; the loss.

In the left region of ``Q`` the prepared data is ``G(k, Q) = exp(i dchi) Phi(Q)`` with
``dchi = chi(k) - chi(k - Q)`` (see :mod:`quantem.stem4d.ssb.prepare`), so the sideband sum::

    S(Q) = sum_{k in left(Q)} G(k, Q) exp(-i dchi(k, Q))

adds coherently when ``chi`` is the probe's aberration function, and ``Phi(Q) = S(Q) /
N(Q)`` (``N``: pixels in the region) is the least-squares estimate of the object's
spectrum. The complex object is ``psi = 1 + ifft2(Phi)``, its phase ``angle(psi)``.

**Loss.** The residual of that least-squares fit over all regions, divided by the data's
energy there::

    loss = 1 - sum_Q |S(Q)|^2 / N(Q) / sum_Q sum_{k in left(Q)} |G(k, Q)|^2

It lies in [0, 1]; it is the share of the sideband signal that the model "object times
aberration phase" cannot explain, so it is the maximum-likelihood criterion for Gaussian
noise, it needs no assumption on the object (phase or amplitude), it is insensitive to
the overall dose, and it costs what one reconstruction costs. Only a tilt of the
wavefront (a linear term of chi) leaves it unchanged, because that phase is the same for
every k of a region; every coefficient of :class:`~quantem.stem4d.ssb.aberrations.Aberrations`
changes it.

Sums over k are reductions along the last axis of a dense block (numpy's pairwise sum,
CuPy's tree reduction: no atomics), and the sums over Q reduce the whole per-frequency
vector at once, so results do not depend on the block size and repeat bit for bit on a
backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from quantem.stem4d.ssb.aberrations import Aberrations, chi
from quantem.stem4d.ssb.cpu import numba_sideband_sums
from quantem.stem4d.ssb.cuda import fused_sideband_sums
from quantem.stem4d.ssb.prepare import DEFAULT_BLOCK_BYTES, Prepared

ENGINES = ("auto", "array", "fused", "numba")


@dataclass
class Reconstruction:
    """The SSB result: complex object, its phase and the loss, on the prepared device."""

    object: Any  # (scan_r, scan_c) complex
    phase: Any  # (scan_r, scan_c) real, radians
    loss: float
    aberrations: Aberrations


def _frequency_block(prepared: Prepared, block_bytes: int) -> int:
    n_pix = prepared.G.shape[1]
    # About eight temporaries of the block's size (phase, cos, sin, products).
    return max(1, int(block_bytes) // (n_pix * 8 * prepared.G.real.itemsize * 2))


def sideband_sums(
    prepared: Prepared, aberrations: Aberrations, *, block_bytes: int = DEFAULT_BLOCK_BYTES
) -> Any:
    """``S(Q)`` for every prepared frequency, aberration phase removed; on the device.

    The CUDA fused kernel (:mod:`quantem.stem4d.ssb.cuda`) computes the same sums in one pass on
    CuPy data; this array-module version is the reference for both backends.
    """
    xp = prepared.xp
    G = prepared.G
    real = G.real.dtype
    wavelength = prepared.wavelength_a
    chi_k = chi(prepared.kx, prepared.ky, aberrations, wavelength, xp)
    block = _frequency_block(prepared, block_bytes)
    # Real and imaginary parts side by side, viewed as complex at the end.
    parts = xp.empty((G.shape[0], 2), dtype=real)
    for start in range(0, G.shape[0], block):
        stop = min(start + block, G.shape[0])
        dx = prepared.kx[None, :] - prepared.qx[start:stop, None]
        dy = prepared.ky[None, :] - prepared.qy[start:stop, None]
        phase = chi_k[None, :] - chi(dx, dy, aberrations, wavelength, xp)
        cos = xp.cos(phase)
        sin = xp.sin(phase)
        g = G[start:stop]
        # G * exp(-i phase), written out in real arithmetic (no complex exp).
        re = g.real * cos + g.imag * sin
        im = g.imag * cos - g.real * sin
        parts[start:stop, 0] = re.sum(axis=1)
        parts[start:stop, 1] = im.sum(axis=1)
        del dx, dy, phase, cos, sin, re, im
    return parts.view(G.dtype).reshape(G.shape[0])


def select_sums(prepared: Prepared, engine: str = "auto") -> Any:
    """The sideband-sum implementation: ``"array"`` (the array-module reference, both
    backends), ``"numba"`` (compiled CPU loop, numpy data), ``"fused"`` (the CUDA kernel;
    CuPy and complex64 only) or ``"auto"``: numba on numpy, fused on complex64 CuPy,
    else array. All run on the data's own device: nothing moves between backends."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    on_cupy = prepared.xp.__name__ == "cupy"
    if engine == "auto":
        if not on_cupy:
            engine = "numba"
        elif prepared.G.dtype == np.complex64:
            engine = "fused"
        else:
            engine = "array"
    return {"array": sideband_sums, "numba": numba_sideband_sums, "fused": fused_sideband_sums}[
        engine
    ]


def loss_from_sums(prepared: Prepared, sums: Any) -> float:
    """The normalised least-squares residual (see the module docstring)."""
    explained = (sums.real**2 + sums.imag**2) / prepared.region_pixels
    total = prepared.energy_total
    if not total > 0:
        raise ValueError("the sideband regions hold no signal (empty or constant data)")
    return 1.0 - float(explained.sum()) / total


def object_from_sums(prepared: Prepared, sums: Any) -> Any:
    """``psi = 1 + ifft2(Phi)`` with ``Phi = S / N`` on the prepared frequencies, 0 elsewhere."""
    xp = prepared.xp
    scan_r, scan_c = prepared.scan_shape
    spectrum = xp.zeros(scan_r * scan_c, dtype=prepared.G.dtype)
    spectrum[prepared.q_index] = sums / prepared.region_pixels
    obj = xp.fft.ifft2(spectrum.reshape(scan_r, scan_c)).astype(prepared.G.dtype, copy=False)
    return obj + obj.dtype.type(1)


def reconstruct(
    prepared: Prepared,
    aberrations: Aberrations | None = None,
    *,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    engine: str = "auto",
) -> Reconstruction:
    """The SSB complex object, phase and loss for the given aberrations (default none)."""
    aberrations = aberrations or Aberrations()
    sums = select_sums(prepared, engine)(prepared, aberrations, block_bytes=block_bytes)
    obj = object_from_sums(prepared, sums)
    phase = prepared.xp.angle(obj)
    return Reconstruction(
        object=obj, phase=phase, loss=loss_from_sums(prepared, sums), aberrations=aberrations
    )


def loss(
    prepared: Prepared,
    aberrations: Aberrations,
    *,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    engine: str = "auto",
) -> float:
    """The fit loss alone (no inverse transform)."""
    sums = select_sums(prepared, engine)(prepared, aberrations, block_bytes=block_bytes)
    return loss_from_sums(prepared, sums)


__all__ = [
    "ENGINES",
    "Reconstruction",
    "loss",
    "loss_from_sums",
    "object_from_sums",
    "reconstruct",
    "select_sums",
    "sideband_sums",
]
