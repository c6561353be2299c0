"""Integration of a phase gradient in Fourier space (iDPC) and its divergence (dDPC).

Given the phase gradient ``g = grad(phase)`` sampled on the scan, the phase solves
``laplacian(phase) = div(g)`` in the least-squares sense; in Fourier space (frequencies
``q`` in cycles per unit length)

    phase^(q) = (q_r g_r^(q) + q_c g_c^(q)) / (2 pi i (|q|^2 + q_reg^2)),   phase^(0) = 0.

Regularisation of the lowest frequencies: ``q_reg = low_frequency_regularization / L``,
with ``L`` the larger side of the (unpadded) scan, in the same length unit as the step.
It damps a frequency ``q`` by ``|q|^2 / (|q|^2 + q_reg^2)``: with the default 0.1 the
lowest frequency the scan holds (``1 / L``) keeps 99% of its amplitude, while the
frequencies below it, whose gradient is mostly noise and descan drift, are suppressed.
The mean phase (``q = 0``) is undefined and set to 0.

Boundary: ``"mirror"`` (default) extends the field to twice its size by reflection (the
row component odd across row edges and even across column edges, the column component the
other way round), which is the exact even extension of the phase and removes the
wrap-around artefacts of a non-periodic scan; ``"periodic"`` integrates the scan as it is
(right for a scan over whole unit cells of a crystal).

Everything uses the input's array module (numpy or CuPy) and precision (float32 input
gives complex64 FFTs on CUDA).
"""

from __future__ import annotations

from functools import lru_cache
from importlib import import_module
from typing import Any

import numpy as np

from quantem.stem4d.arrays import array_module
from quantem.stem4d.errors import ComputeError

BOUNDARIES = ("mirror", "periodic")
DEFAULT_LOW_FREQUENCY_REGULARIZATION = 0.1


def _mirror(field_r: Any, field_c: Any) -> tuple[Any, Any]:
    xp = array_module(field_r)
    rows_r = xp.concatenate([field_r, -field_r[::-1]], axis=0)
    ext_r = xp.concatenate([rows_r, rows_r[:, ::-1]], axis=1)
    rows_c = xp.concatenate([field_c, field_c[::-1]], axis=0)
    ext_c = xp.concatenate([rows_c, -rows_c[:, ::-1]], axis=1)
    return ext_r, ext_c


def _device_of(array: Any) -> int:
    device = getattr(array, "device", None)
    return int(getattr(device, "id", -1)) if device is not None else -1


#: Grids of at most this many points are kept between calls (a 1024 x 1024 grid, the
#: mirror extension of a 512 x 512 scan, is 8 MB of float64); larger ones are rebuilt.
CACHED_GRID_POINTS = 1 << 21


def _frequencies(
    xp: Any, device: int, shape: tuple[int, int], step: tuple[float, float], real: Any,
    q_reg: float,
) -> tuple[Any, Any, Any]:  # fmt: skip
    """``(q_r, q_c, 2 pi (|q|^2 + q_reg^2))`` of an FFT grid (1-D, 1-D, 2-D); the mean's
    entry of the last is 1. Read-only for the callers."""
    key = (xp.__name__, device, tuple(shape), step, np.dtype(real).str, q_reg)
    if shape[0] * shape[1] <= CACHED_GRID_POINTS:
        return _cached_frequencies(*key)
    return _build_frequencies(*key)


def _build_frequencies(
    module: str, device: int, shape: tuple[int, int], step: tuple[float, float], real: str,
    q_reg: float,
) -> tuple[Any, Any, Any]:  # fmt: skip
    xp = import_module(module)
    dtype = np.dtype(real)
    m_r, m_c = shape
    q_r = xp.fft.fftfreq(m_r, d=step[0]).astype(dtype)
    q_c = xp.fft.fftfreq(m_c, d=step[1]).astype(dtype)
    denominator = (2 * xp.pi) * (
        q_r[:, None] * q_r[:, None] + q_c[None, :] * q_c[None, :] + dtype.type(q_reg * q_reg)
    )
    denominator[0, 0] = 1  # the mean, set to 0 by the caller
    return q_r, q_c, denominator


_cached_frequencies = lru_cache(maxsize=4)(_build_frequencies)


def clear_cache() -> None:
    """Drop the frequency grids kept between calls (host and device memory)."""
    _cached_frequencies.cache_clear()


def integrate_gradient(
    grad_r: Any,
    grad_c: Any,
    *,
    step: tuple[float, float] = (1.0, 1.0),
    low_frequency_regularization: float = DEFAULT_LOW_FREQUENCY_REGULARIZATION,
    boundary: str = "mirror",
) -> Any:
    """The phase whose gradient is ``(grad_r, grad_c)`` (module docstring for the rules)."""
    if boundary not in BOUNDARIES:
        raise ComputeError(f"boundary must be one of {BOUNDARIES}, got {boundary!r}")
    if low_frequency_regularization < 0:
        raise ComputeError(
            f"low_frequency_regularization must be >= 0, got {low_frequency_regularization}"
        )
    xp = array_module(grad_r)
    n_r, n_c = grad_r.shape
    real = grad_r.dtype
    q_reg = low_frequency_regularization / max(n_r * step[0], n_c * step[1])
    extended = (2 * n_r, 2 * n_c) if boundary == "mirror" else (n_r, n_c)
    q_r, q_c, denominator = _frequencies(
        xp, _device_of(grad_r), extended, (float(step[0]), float(step[1])), real, float(q_reg)
    )
    if xp.__name__ != "numpy" and real.kind == "f":
        from quantem.stem4d.cuda.integrate import integrate

        return integrate(grad_r, grad_c, q_r, q_c, denominator, mirror=boundary == "mirror")
    if boundary == "mirror":
        grad_r, grad_c = _mirror(grad_r, grad_c)
    q_r, q_c = q_r[:, None], q_c[None, :]
    spectrum = q_r * xp.fft.fft2(grad_r) + q_c * xp.fft.fft2(grad_c)
    spectrum = spectrum / (1j * denominator)
    spectrum[0, 0] = 0
    phase = xp.fft.ifft2(spectrum).real
    return xp.ascontiguousarray(phase[:n_r, :n_c]).astype(real, copy=False)


__all__ = [
    "BOUNDARIES",
    "CACHED_GRID_POINTS",
    "DEFAULT_LOW_FREQUENCY_REGULARIZATION",
    "clear_cache",
    "integrate_gradient",
]
