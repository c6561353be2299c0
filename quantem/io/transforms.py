"""Load options (``dtype``, ``apply_mask``, ``det_bin``): one implementation for every backend.

:func:`finish_frames` is written against an array module ``xp`` (numpy or cupy) and uses
only calls both provide, so the CPU and CUDA loaders apply exactly the same semantics:

1. ``apply_mask``: pixels whose ``pixel_mask != 0`` (``validity`` False) become 0.
2. ``dtype``: ``"native"`` keeps the stored type; ``"u8"``/``"u16"``/``"u32"`` convert,
   saturating at the target's maximum when narrowing; ``info["clipped_pixels"]`` is the
   exact number of values that were above it.
3. ``det_bin``: sums ``det_bin x det_bin`` pixel blocks into uint32. Rows and columns
   that do not fill a whole block (the last ``det % det_bin``) are dropped, like a crop;
   ``info["det_bin_dropped"]`` says how many. Sums above the uint32 maximum saturate and
   are counted in ``info["bin_saturated_pixels"]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy

from quantem.errors import UnsupportedDtypeError

#: Accepted ``dtype`` spellings and the numpy type name each one means.
DTYPE_ALIASES = {
    "native": "native",
    "u8": "uint8",
    "uint8": "uint8",
    "u16": "uint16",
    "uint16": "uint16",
    "u32": "uint32",
    "uint32": "uint32",
}
BINNED_DTYPE = "uint32"
STORED_DTYPES = ("uint8", "uint16", "uint32")


@dataclass(frozen=True)
class LoadOptions:
    """Validated load options; ``dtype`` is ``"native"`` or a numpy type name."""

    dtype: str = "native"
    apply_mask: bool = False
    det_bin: int = 1

    def output_dtype(self, stored: Any) -> numpy.dtype:
        """The dtype :func:`finish_frames` returns for data stored as ``stored``."""
        if self.det_bin > 1:
            return numpy.dtype(BINNED_DTYPE)
        return numpy.dtype(stored if self.dtype == "native" else self.dtype)

    def output_detector_shape(self, detector_shape: tuple[int, int]) -> tuple[int, int]:
        return (detector_shape[0] // self.det_bin, detector_shape[1] // self.det_bin)

    @property
    def is_identity(self) -> bool:
        return self.dtype == "native" and not self.apply_mask and self.det_bin == 1


def parse_load_options(
    dtype: Any = "native", apply_mask: Any = False, det_bin: Any = 1
) -> LoadOptions:
    """Validate the load options, raising ``UnsupportedDtypeError`` or ``ValueError``."""
    key = dtype.name if isinstance(dtype, numpy.dtype) else dtype
    if isinstance(key, type) and issubclass(key, numpy.generic):
        key = numpy.dtype(key).name
    if not isinstance(key, str) or key.lower() not in DTYPE_ALIASES:
        raise UnsupportedDtypeError(
            f"dtype {dtype!r} is not supported; use 'native', 'u8', 'u16' or 'u32'"
        )
    if not isinstance(apply_mask, (bool, numpy.bool_)):
        raise ValueError(f"apply_mask must be True or False, got {apply_mask!r}")
    if (
        isinstance(det_bin, (bool, numpy.bool_))
        or not isinstance(det_bin, (int, numpy.integer))
        or det_bin < 1
    ):
        raise ValueError(f"det_bin must be an integer >= 1, got {det_bin!r}")
    return LoadOptions(DTYPE_ALIASES[key.lower()], bool(apply_mask), int(det_bin))


def finish_frames(
    frames: Any,
    validity: Any,
    *,
    dtype: Any = "native",
    apply_mask: bool = False,
    det_bin: int = 1,
    xp: Any = numpy,
) -> tuple[Any, dict]:
    """Apply the load options to frames ``(..., det_r, det_c)`` of stored counts.

    Parameters
    ----------
    frames
        ``xp`` array of uint8, uint16 or uint32. Not modified.
    validity
        Boolean ``(det_r, det_c)`` mask, True where the pixel is valid.
    dtype, apply_mask, det_bin
        See :func:`parse_load_options` and the module documentation for the order.
    xp
        ``numpy`` or ``cupy``; the result lives where ``frames`` does.

    Returns
    -------
    array, info
        The finished frames and ``{"clipped_pixels", "bin_saturated_pixels",
        "det_bin_dropped"}`` (exact integer counts).
    """
    options = parse_load_options(dtype, apply_mask, det_bin)
    stored = numpy.dtype(frames.dtype)
    if stored.name not in STORED_DTYPES:
        raise UnsupportedDtypeError(f"frames of dtype {stored.name} are not supported")
    det_r, det_c = frames.shape[-2:]
    info = {"clipped_pixels": 0, "bin_saturated_pixels": 0, "det_bin_dropped": [0, 0]}
    out = frames
    if options.apply_mask:
        valid = xp.asarray(validity, dtype=bool)
        if tuple(valid.shape) != (det_r, det_c):
            raise ValueError(f"validity shape {tuple(valid.shape)} != detector {(det_r, det_c)}")
        out = xp.where(valid, out, xp.zeros((), dtype=stored))
    if options.dtype != "native" and options.dtype != stored.name:
        target = numpy.dtype(options.dtype)
        if target.itemsize < stored.itemsize:
            limit = int(numpy.iinfo(target).max)
            info["clipped_pixels"] = int(xp.count_nonzero(out > limit))
            out = xp.minimum(out, xp.asarray(limit, dtype=stored))
        out = out.astype(target)
    if options.det_bin > 1:
        b = options.det_bin
        rows, cols = det_r // b, det_c // b
        if rows == 0 or cols == 0:
            raise ValueError(f"det_bin {b} is larger than the {det_r}x{det_c} detector")
        info["det_bin_dropped"] = [det_r - rows * b, det_c - cols * b]
        lead = tuple(out.shape[:-2])
        blocks = out[..., : rows * b, : cols * b].reshape(*lead, rows, b, cols, b)
        sums = blocks.sum(axis=(-3, -1), dtype=xp.uint64)
        limit = int(numpy.iinfo(BINNED_DTYPE).max)
        if b * b * int(numpy.iinfo(out.dtype).max) > limit:
            info["bin_saturated_pixels"] = int(xp.count_nonzero(sums > limit))
            sums = xp.minimum(sums, xp.asarray(limit, dtype=xp.uint64))
        out = sums.astype(BINNED_DTYPE)
    return out, info


__all__ = ["LoadOptions", "finish_frames", "parse_load_options"]
