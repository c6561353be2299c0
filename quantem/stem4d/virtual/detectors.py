"""Virtual detectors: BF, ADF and any dark-field annulus or mask, in pixels or in mrad.

A detector is a :class:`Disk`, an :class:`Annulus` or a boolean mask of the detector
shape. Geometry follows ``docs/detector.md``: a disk holds ``distance <= radius``, an
annulus ``inner < distance <= outer``, distances between pixel centres and the centre.
Radii given in mrad are converted with the calibration's angular pixel size
(:class:`~quantem.stem4d.virtual.calibration.Calibration`); when that comes from the convergence
semi-angle and the bright-field disk radius is not given, the radius is the automatic
disk estimate of the mean pattern. A centre left as None is the automatic disk centre.

Images are exact masked sums (uint64 for integer data, float64 for float data) on the
backend of the source: numpy on cpu, CuPy on cuda.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from quantem.stem4d.detector.masks import annulus_mask, disk_mask, parse_mask
from quantem.stem4d.errors import ComputeError
from quantem.stem4d.virtual.calibration import Calibration
from quantem.stem4d.virtual.frames import Frames, open_frames

UNITS = ("px", "mrad")


def _check_unit(unit: str) -> str:
    if unit not in UNITS:
        raise ComputeError(f"detector unit must be one of {UNITS}, got {unit!r}")
    return unit


@dataclass(frozen=True)
class Disk:
    """``distance <= radius``; ``radius=None`` is the automatic bright-field disk radius."""

    radius: float | None = None
    unit: str = "px"
    center: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        _check_unit(self.unit)


@dataclass(frozen=True)
class Annulus:
    """``inner < distance <= outer``; ``inner=None`` is the BF disk radius, ``outer=None``
    reaches the detector edge."""

    inner: float | None = None
    outer: float | None = None
    unit: str = "px"
    center: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        _check_unit(self.unit)


def _to_pixels(value: float | None, unit: str, frames: Frames, calibration: Calibration | None):
    if value is None or unit == "px":
        return value
    calibration = calibration or Calibration()
    if calibration.mrad_per_pixel is None and calibration.bf_radius_px is None:
        calibration = calibration.with_disk_radius(frames.disk().radius)
    return calibration.pixels_from_mrad(value)


def detector_mask(
    frames: Frames, detector: Any, calibration: Calibration | None = None
) -> np.ndarray:
    """The boolean detector mask (before the validity) of ``detector`` on ``frames``."""
    shape = frames.detector_shape
    if isinstance(detector, Disk):
        center = frames.disk().center if detector.center is None else detector.center
        radius = _to_pixels(detector.radius, detector.unit, frames, calibration)
        return disk_mask(shape, center, frames.disk().radius if radius is None else radius)
    if isinstance(detector, Annulus):
        center = frames.disk().center if detector.center is None else detector.center
        inner = _to_pixels(detector.inner, detector.unit, frames, calibration)
        outer = _to_pixels(detector.outer, detector.unit, frames, calibration)
        return annulus_mask(shape, center, frames.disk().radius if inner is None else inner, outer)
    return parse_mask(detector, shape, name="detector mask")


def virtual_images(
    source: Any,
    detectors: dict[str, Any],
    *,
    calibration: Calibration | None = None,
    scan_region: Any = None,
) -> dict[str, Any]:
    """One image per named detector, from one source (one pass when streaming).

    ``source`` is anything :func:`~quantem.stem4d.virtual.frames.open_frames` accepts.
    """
    frames = open_frames(source, scan_region=scan_region)
    names = list(detectors)
    masks = [detector_mask(frames, detectors[name], calibration) for name in names]
    return dict(zip(names, frames.masked_sums(masks)))


def virtual_image(source: Any, detector: Any, **options: Any) -> Any:
    """The image of one detector (:class:`Disk`, :class:`Annulus` or a mask)."""
    return virtual_images(source, {"image": detector}, **options)["image"]


def bf(source: Any, radius: float | None = None, *, unit: str = "px", **options: Any) -> Any:
    """Bright-field image over the disk ``distance <= radius`` (automatic when None)."""
    return virtual_image(source, Disk(radius, unit), **options)


def adf(
    source: Any,
    inner: float | None = None,
    outer: float | None = None,
    *,
    unit: str = "px",
    **options: Any,
) -> Any:
    """Annular dark-field image over ``inner < distance <= outer``."""
    return virtual_image(source, Annulus(inner, outer, unit), **options)


def df(
    source: Any,
    mask: Any = None,
    *,
    inner: float | None = None,
    outer: float | None = None,
    unit: str = "px",
    center: tuple[float, float] | None = None,
    **options: Any,
) -> Any:
    """Dark-field image over any ``mask`` or, without one, over an annulus.

    With a mask, ``inner``/``outer``/``center`` must be left out.
    """
    if mask is not None:
        if inner is not None or outer is not None or center is not None:
            raise ComputeError("df: give either a mask or an annulus (inner/outer/center)")
        return virtual_image(source, mask, **options)
    return virtual_image(source, Annulus(inner, outer, unit, center), **options)


__all__ = [
    "UNITS",
    "Annulus",
    "Disk",
    "adf",
    "bf",
    "detector_mask",
    "df",
    "virtual_image",
    "virtual_images",
]
