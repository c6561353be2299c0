"""The bright-field stack: one virtual image per BF-disk pixel, or per binned group.

Pixels whose centre lies within ``disk_fraction * radius`` of the disk centre are used
(the rim, partly illuminated, is left out by default). With ``bin_factor > 1`` the
pixels are grouped in ``bin_factor x bin_factor`` detector blocks and each group's image
is the sum of its pixels, at the mean position of its pixels. Counts are integers, so
float64 sums are exact and the stack does not depend on the summation order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from quantem.stem4d.detector.masks import disk_mask
from quantem.stem4d.errors import ComputeError
from quantem.stem4d.virtual.frames import Frames

DEFAULT_DISK_FRACTION = 0.9


@dataclass
class BrightFieldStack:
    """Images ``(n, scan_r, scan_c)`` (float64, counts) and their detector positions.

    ``positions`` is ``(n, 2)`` float64 host: ``(row, col)`` in detector pixels relative to
    the disk centre; ``center`` and ``radius`` are the disk used.
    """

    images: Any
    positions: np.ndarray
    center: tuple[float, float]
    radius: float
    bin_factor: int


def select_groups(
    frames: Frames,
    *,
    disk_fraction: float = DEFAULT_DISK_FRACTION,
    bin_factor: int = 1,
    center: tuple[float, float] | None = None,
    radius: float | None = None,
) -> tuple[list[np.ndarray], np.ndarray, tuple[float, float], float]:
    """Pixel groups (flat detector indices per group), their mean positions, centre, radius."""
    if not 0 < disk_fraction <= 1.5:
        raise ComputeError(f"disk_fraction must be in (0, 1.5], got {disk_fraction}")
    if int(bin_factor) != bin_factor or bin_factor < 1:
        raise ComputeError(f"bin_factor must be a positive integer, got {bin_factor!r}")
    bin_factor = int(bin_factor)
    if center is None or radius is None:
        disk = frames.disk()
        center = disk.center if center is None else center
        radius = disk.radius if radius is None else radius
    mask = disk_mask(frames.detector_shape, center, disk_fraction * radius) & frames.validity
    rows, cols = np.nonzero(mask)
    if rows.size < 3:
        raise ComputeError(
            f"only {rows.size} valid bright-field pixels within {disk_fraction} of the disk "
            f"radius {radius:.2f} px: parallax needs at least 3"
        )
    det_c = frames.detector_shape[1]
    keys = (rows // bin_factor) * (det_c // bin_factor + 1) + cols // bin_factor
    order = np.lexsort((cols, rows, keys))  # deterministic grouping
    keys, rows, cols = keys[order], rows[order], cols[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    stops = np.r_[starts[1:], keys.size]
    groups, positions = [], []
    for a, b in zip(starts.tolist(), stops.tolist()):
        groups.append(rows[a:b] * det_c + cols[a:b])
        positions.append((rows[a:b].mean() - center[0], cols[a:b].mean() - center[1]))
    return groups, np.asarray(positions, dtype=np.float64), tuple(center), float(radius)


def build_stack(
    frames: Frames,
    *,
    disk_fraction: float = DEFAULT_DISK_FRACTION,
    bin_factor: int = 1,
    center: tuple[float, float] | None = None,
    radius: float | None = None,
) -> BrightFieldStack:
    """One pass over the data gathering the BF pixels, then the group sums."""
    groups, positions, center, radius = select_groups(
        frames, disk_fraction=disk_fraction, bin_factor=bin_factor, center=center, radius=radius
    )
    det_c = frames.detector_shape[1]
    flat = np.concatenate(groups)
    pixels = frames.pixel_stack(flat // det_c, flat % det_c)
    if bin_factor == 1:
        images = pixels
    else:
        xp = frames.xp
        images = xp.empty((len(groups), *frames.scan_shape), dtype=xp.float64)
        start = 0
        for k, group in enumerate(groups):
            images[k] = pixels[start : start + group.size].sum(axis=0)
            start += group.size
    return BrightFieldStack(images, positions, center, radius, int(bin_factor))


__all__ = ["DEFAULT_DISK_FRACTION", "BrightFieldStack", "build_stack", "select_groups"]
