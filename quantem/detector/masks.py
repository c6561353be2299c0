"""Detector masks: validation, disk and annulus geometry, and the bright-field disk estimate.

Coordinates are detector pixels ``(row, col)``; the origin is the centre of pixel (0, 0),
so pixel ``(r, c)`` sits at distance ``hypot(r - center_row, c - center_col)`` from a
centre. The geometry is the one documented in ``docs/detector.md``:

* disk: ``distance <= radius``
* annulus: ``inner < distance <= outer``

so a disk of radius ``a`` and the annulus ``(a, b]`` tile the disk of radius ``b``
exactly, without overlap. Distances are compared squared, in float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from quantem.errors import DetectorError

#: Thresholds (in tenths of the mean pattern's maximum) over which the disk radius is
#: averaged; the centre uses the half-maximum region (5 tenths).
DISK_THRESHOLD_TENTHS = (2, 3, 4, 5, 6, 7, 8)
DISK_CENTER_THRESHOLD_TENTHS = 5


@dataclass(frozen=True)
class DiskEstimate:
    """The bright-field disk found in a mean (or summed) diffraction pattern.

    Attributes
    ----------
    center
        ``(row, col)`` in detector pixels, origin at the centre of pixel (0, 0).
    radius
        Radius in detector pixels.
    """

    center: tuple[float, float]
    radius: float


def to_host(array: Any) -> np.ndarray:
    """A numpy view/copy of a numpy or CuPy array (CuPy is never imported here)."""
    if isinstance(array, np.ndarray):
        return array
    get = getattr(array, "get", None)
    if callable(get):  # cupy.ndarray and friends
        return np.asarray(get())
    return np.asarray(array)


def parse_mask(mask: Any, detector_shape: tuple[int, int], *, name: str = "mask") -> np.ndarray:
    """Validate a detector mask and return it as a C-contiguous numpy bool array.

    Accepts boolean arrays, and integer arrays holding only 0 and 1, of exactly
    ``detector_shape`` (numpy or CuPy). Anything else raises :class:`DetectorError`
    saying what is wrong: weighted (float) detectors are not exact products.
    """
    if mask is None:
        raise DetectorError(
            f"{name} is None; pass a boolean array of shape {tuple(detector_shape)}"
        )
    host = to_host(mask)
    if host.ndim != 2 or tuple(host.shape) != tuple(detector_shape):
        raise DetectorError(
            f"{name} has shape {tuple(host.shape)}, but the detector is {tuple(detector_shape)}"
        )
    if host.dtype == np.bool_:
        return np.ascontiguousarray(host)
    if host.dtype.kind in "ui":
        if host.size and (host.min() < 0 or host.max() > 1):
            raise DetectorError(
                f"{name} is an integer array with values other than 0 and 1; pass a boolean mask"
            )
        return np.ascontiguousarray(host != 0)
    raise DetectorError(
        f"{name} has dtype {host.dtype}; detector masks must be boolean "
        "(weighted masks are not exact products)"
    )


def parse_validity(validity: Any, detector_shape: tuple[int, int]) -> np.ndarray:
    """Validate an acquisition's validity (True = valid pixel) as a host bool array."""
    if validity is None:
        return np.ones(detector_shape, dtype=bool)
    host = to_host(validity)
    if host.dtype != np.bool_:
        raise DetectorError(f"the acquisition's validity must be boolean, got {host.dtype}")
    if tuple(host.shape) != tuple(detector_shape):
        raise DetectorError(
            f"the acquisition's validity has shape {tuple(host.shape)}, "
            f"but the detector is {tuple(detector_shape)}"
        )
    return np.ascontiguousarray(host)


def _parse_center(center: Any) -> tuple[float, float]:
    try:
        row, col = (float(v) for v in center)
    except (TypeError, ValueError):
        raise DetectorError(f"center must be (row, col), got {center!r}") from None
    if not (math.isfinite(row) and math.isfinite(col)):
        raise DetectorError(f"center must be finite, got {center!r}")
    return row, col


def _parse_radius(value: Any, what: str, *, allow_zero: bool) -> float:
    try:
        radius = float(value)
    except (TypeError, ValueError):
        raise DetectorError(f"{what} must be a number of pixels, got {value!r}") from None
    if math.isnan(radius) or radius < 0 or (radius == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise DetectorError(f"{what} must be {bound}, got {value!r}")
    return radius


def distance_squared(detector_shape: tuple[int, int], center: Any) -> np.ndarray:
    """Squared distance (float64) of every pixel centre from ``center`` = (row, col)."""
    row, col = _parse_center(center)
    det_r, det_c = detector_shape
    dr = np.arange(det_r, dtype=np.float64) - row
    dc = np.arange(det_c, dtype=np.float64) - col
    return dr[:, None] ** 2 + dc[None, :] ** 2


def disk_mask(detector_shape: tuple[int, int], center: Any, radius: float) -> np.ndarray:
    """Pixels whose centre lies within ``radius`` of ``center`` (inclusive)."""
    radius = _parse_radius(radius, "radius", allow_zero=False)
    return distance_squared(detector_shape, center) <= radius * radius


def annulus_mask(
    detector_shape: tuple[int, int], center: Any, inner: float, outer: float | None
) -> np.ndarray:
    """Pixels with ``inner < distance <= outer``; ``outer=None`` means no outer edge."""
    inner = _parse_radius(inner, "inner radius", allow_zero=True)
    d2 = distance_squared(detector_shape, center)
    mask = d2 > inner * inner
    if outer is not None:
        outer = _parse_radius(outer, "outer radius", allow_zero=False)
        if outer <= inner:
            raise DetectorError(f"outer radius {outer} must exceed inner radius {inner}")
        mask &= d2 <= outer * outer
    return mask


def _ratio_to_float(numerator: int, denominator: int) -> float:
    return float(Fraction(numerator, denominator))


def estimate_disk(pattern: np.ndarray, validity: np.ndarray | None = None) -> DiskEstimate:
    """Find the bright-field disk in a summed diffraction pattern, exactly and deterministically.

    Algorithm (``docs/detector.md``): invalid pixels are set to 0 and ``M`` is the
    maximum of what remains. For each threshold ``t`` in :data:`DISK_THRESHOLD_TENTHS`
    the region ``pattern >= t/10 * M`` is selected (for integer patterns with the exact
    integer threshold ``ceil(t * M / 10)``) and its area ``A_t`` counted; the radius is
    the mean of ``sqrt(A_t / pi)``. The centre is the intensity-weighted centroid of the
    half-maximum region, computed from exact integer moments and rounded once.

    Parameters
    ----------
    pattern
        2D sum (uint64, exact) or mean (float) of the frames.
    validity
        Optional bool mask of valid pixels; the others never contribute.
    """
    pattern = to_host(pattern)
    if pattern.ndim != 2:
        raise DetectorError(f"the mean pattern must be 2D, got shape {pattern.shape}")
    is_integer = pattern.dtype.kind in "ui"
    if is_integer:
        values = pattern.astype(np.uint64, copy=True)
    else:
        values = pattern.astype(np.float64, copy=True)
        values[~np.isfinite(values)] = 0
    if validity is not None:
        values[~parse_validity(validity, pattern.shape)] = 0
    if is_integer:
        peak = int(values.max()) if values.size else 0
    else:
        peak = float(values.max()) if values.size else 0.0
        values[values < 0] = 0
    if peak <= 0:
        raise DetectorError(
            "the mean diffraction pattern has no counts in valid pixels; "
            "cannot find the bright-field disk (pass center and radius explicitly)"
        )

    def region(tenths: int) -> np.ndarray:
        if is_integer:
            return values >= -(-tenths * peak // 10)  # exact ceil(tenths * peak / 10)
        return values * 10.0 >= tenths * peak

    radii = [math.sqrt(int(np.count_nonzero(region(t))) / math.pi) for t in DISK_THRESHOLD_TENTHS]
    radius = math.fsum(radii) / len(radii)

    core = np.where(region(DISK_CENTER_THRESHOLD_TENTHS), values, values.dtype.type(0))
    if is_integer:
        # Row/column sums are exact in uint64; the weighted sums are taken in Python ints.
        row_sums = core.sum(axis=1, dtype=np.uint64).tolist()
        col_sums = core.sum(axis=0, dtype=np.uint64).tolist()
        total = sum(row_sums)
        center = (
            _ratio_to_float(sum(r * v for r, v in enumerate(row_sums)), total),
            _ratio_to_float(sum(c * v for c, v in enumerate(col_sums)), total),
        )
    else:
        row_sums = core.sum(axis=1)
        col_sums = core.sum(axis=0)
        total = math.fsum(row_sums.tolist())
        center = (
            math.fsum((np.arange(len(row_sums)) * row_sums).tolist()) / total,
            math.fsum((np.arange(len(col_sums)) * col_sums).tolist()) / total,
        )
    return DiskEstimate(center=center, radius=radius)


__all__ = [
    "DISK_THRESHOLD_TENTHS",
    "DiskEstimate",
    "annulus_mask",
    "disk_mask",
    "distance_squared",
    "estimate_disk",
    "parse_mask",
    "parse_validity",
    "to_host",
]
