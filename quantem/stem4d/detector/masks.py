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

from quantem.stem4d.errors import DetectorError

#: The centre is the intensity-weighted centroid of the pixels at or above this fraction
#: (numerator, denominator) of the reference level: the half-maximum region.
DISK_CENTER_THRESHOLD = (1, 2)

#: The reference (maximum) level ignores this many brightest pixels: unflagged hot pixels.
DISK_HOT_PIXELS = 4

#: Width, in pixels, of the rings of the radial profile in which the disk edge is sought.
RADIAL_BIN_PIXELS = 1


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
    """A numpy view/copy of a numpy or CuPy array or a torch tensor (none imported here)."""
    if isinstance(array, np.ndarray):
        return array
    from quantem.stem4d.interop import is_torch_tensor

    if is_torch_tensor(array):
        return array.detach().cpu().numpy()
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


def _clean_pattern(pattern: Any, validity: Any) -> tuple[np.ndarray, np.ndarray]:
    """The pattern as uint64 (integers) or float64 (floats) with invalid pixels at 0."""
    pattern = to_host(pattern)
    if pattern.ndim != 2:
        raise DetectorError(f"the mean pattern must be 2D, got shape {pattern.shape}")
    valid = (
        np.ones(pattern.shape, dtype=bool)
        if validity is None
        else parse_validity(validity, pattern.shape).copy()
    )
    if pattern.dtype.kind in "ui":
        if pattern.dtype.kind == "i" and pattern.size and pattern.min() < 0:
            raise DetectorError("an integer mean pattern cannot hold negative sums")
        values = pattern.astype(np.uint64, copy=True)
    elif pattern.dtype.kind == "f":
        values = pattern.astype(np.float64, copy=True)
        valid &= np.isfinite(values)
        values[~valid] = 0
        values[values < 0] = 0
    else:
        raise DetectorError(f"the mean pattern must be numeric, got {pattern.dtype}")
    values[~valid] = 0
    return values, valid


def _exact_mean(total: Any, count: int) -> float:
    if isinstance(total, int):
        return float(Fraction(total, count))
    return float(total) / count


def estimate_disk(pattern: Any, validity: Any = None) -> DiskEstimate:
    """Find the bright-field disk in a summed (or mean) diffraction pattern.

    Deterministic, from exact integer sums for integer patterns (``docs/detector.md``):

    1. Invalid pixels are 0. ``M`` is the reference level: the value of the
       ``DISK_HOT_PIXELS + 1``-th brightest pixel; every value is clipped to ``M``, so up
       to :data:`DISK_HOT_PIXELS` unflagged hot pixels cannot take over. The
       half-maximum region is ``2 * value >= M`` (compared exactly in integers).
    2. The centre is the intensity-weighted centroid of that region: exact integer first
       moments divided once, correctly rounded to float64.
    3. The radial profile around the centre is the mean of the valid pixels in each
       ring ``k <= distance < k + 1`` (exact integer sums per ring).
    4. The radius is the disk edge: the ring boundary with the steepest drop of the
       profile, among rings at least half as bright as the brightest, refined to a
       sub-pixel position by a parabola through the drops on either side.

    The steepest-drop edge is insensitive to the dark-field background next to the disk
    and to the noise of the single brightest pixel, which bias area-from-threshold
    estimates. Pass ``center``/``radius`` explicitly for patterns without a disk.

    Parameters
    ----------
    pattern
        2D sum (integer, exact) or mean (float) of the frames.
    validity
        Optional bool mask of valid pixels; the others never contribute.
    """
    values, valid = _clean_pattern(pattern, validity)
    is_integer = values.dtype == np.uint64
    flat = values.ravel()
    rank = min(DISK_HOT_PIXELS, flat.size - 1)
    # The reference level skips the DISK_HOT_PIXELS brightest pixels, and every value is
    # clipped to it: a few unflagged hot pixels weigh like disk pixels, not like the disk.
    peak = np.partition(flat, flat.size - 1 - rank)[flat.size - 1 - rank] if flat.size else 0
    np.minimum(values, peak, out=values)
    if peak <= 0:
        raise DetectorError(
            "the mean diffraction pattern has no counts in valid pixels; "
            "cannot find the bright-field disk (pass center and radius explicitly)"
        )

    numerator, denominator = DISK_CENTER_THRESHOLD
    if is_integer:
        core = values >= -(-numerator * int(peak) // denominator)  # exact ceiling
        weights = np.where(core, values, np.uint64(0))
        row_sums = weights.sum(axis=1, dtype=np.uint64).tolist()
        col_sums = weights.sum(axis=0, dtype=np.uint64).tolist()
        total = sum(row_sums)
        center = (
            float(Fraction(sum(r * v for r, v in enumerate(row_sums)), total)),
            float(Fraction(sum(c * v for c, v in enumerate(col_sums)), total)),
        )
    else:
        core = values * denominator >= numerator * peak
        weights = np.where(core, values, 0.0)
        row_sums = weights.sum(axis=1)
        col_sums = weights.sum(axis=0)
        total = math.fsum(row_sums.tolist())
        center = (
            math.fsum((np.arange(row_sums.size) * row_sums).tolist()) / total,
            math.fsum((np.arange(col_sums.size) * col_sums).tolist()) / total,
        )

    ring = np.floor(np.sqrt(distance_squared(values.shape, center)) / RADIAL_BIN_PIXELS)
    ring = ring.astype(np.int64)[valid]
    n_rings = int(ring.max()) + 1
    counts = np.bincount(ring, minlength=n_rings)
    sums = np.zeros(n_rings, dtype=values.dtype)
    np.add.at(sums, ring, values[valid])  # sequential, exact for uint64
    present = np.flatnonzero(counts)
    profile = np.array(
        [
            _exact_mean(int(sums[k]) if is_integer else float(sums[k]), int(counts[k]))
            for k in present
        ]
    )
    if profile.size < 2:
        raise DetectorError("the detector is too small to find the bright-field disk edge")
    drops = profile[:-1] - profile[1:]
    bright = profile[:-1] * 2 >= profile.max()
    candidates = np.where(bright & (drops > 0), drops, -np.inf)
    j = int(np.argmax(candidates))
    if not np.isfinite(candidates[j]):
        raise DetectorError(
            "the mean diffraction pattern has no falling edge; "
            "cannot find the bright-field disk (pass center and radius explicitly)"
        )
    offset = 0.0
    if 0 < j < drops.size - 1:
        before, here, after = drops[j - 1], drops[j], drops[j + 1]
        curvature = before - 2 * here + after
        if curvature < 0:
            offset = min(0.5, max(-0.5, 0.5 * (before - after) / curvature))
    # Drop j lies on the boundary where ring present[j + 1] starts.
    radius = (float(present[j + 1]) + offset) * RADIAL_BIN_PIXELS
    return DiskEstimate(center=center, radius=radius)


__all__ = [
    "DISK_CENTER_THRESHOLD",
    "DISK_HOT_PIXELS",
    "RADIAL_BIN_PIXELS",
    "DiskEstimate",
    "annulus_mask",
    "disk_mask",
    "distance_squared",
    "estimate_disk",
    "parse_mask",
    "parse_validity",
    "to_host",
]
