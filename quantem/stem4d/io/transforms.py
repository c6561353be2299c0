"""Load options (``dtype``, ``apply_mask``, ``det_bin``): one implementation for every loader.

:class:`LoadOptions` owns the finishing of a load, so every loader (CPU HDF5, CPU
``.qem``, the CUDA HDF5 and ``.qem`` paths) parses the options once and calls it:
:meth:`LoadOptions.finish` on the frames (whole, or per batch through
:class:`FrameFinisher`), :meth:`LoadOptions.finish_validity` on the validity mask and
:meth:`LoadOptions.metadata` for the metadata keys that describe the load.
``finish`` is written against an array module ``xp`` (numpy or cupy) and uses only
calls both provide, so the CPU and CUDA loaders apply exactly the same semantics:

1. ``apply_mask`` (default True, as in the upstream quantem.gpu API): pixels whose
   ``pixel_mask != 0`` (``validity`` False; dead pixels carry the dtype's maximum in the
   raw data) become 0.
2. ``dtype``: ``"native"`` keeps the stored type; ``"u8"``/``"u16"``/``"u32"`` convert,
   saturating at the target's maximum when narrowing; ``info["clipped_pixels"]`` is the
   exact number of values that were above it.
3. ``det_bin``: sums ``det_bin x det_bin`` pixel blocks into uint32. Rows and columns
   that do not fill a whole block (the last ``det % det_bin``) are dropped, like a crop;
   ``info["det_bin_dropped"]`` says how many. Sums above the uint32 maximum saturate and
   are counted in ``info["bin_saturated_pixels"]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy

from quantem.stem4d.errors import UnsupportedDtypeError

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
#: The keywords :class:`LoadOptions` owns, taken by every loader.
LOAD_OPTION_NAMES = ("dtype", "apply_mask", "det_bin")
STORED_DTYPES = ("uint8", "uint16", "uint32")


#: The metadata keys :meth:`LoadOptions.metadata` sets (the same for every loader).
LOAD_METADATA_KEYS = (
    "stored_dtype",
    "dtype",
    "stored_detector_shape",
    "detector_shape",
    "load_options",
    "clipped_pixels",
    "bin_saturated_pixels",
    "det_bin_dropped",
)


def empty_info() -> dict:
    """The ``info`` of a finish that changed nothing (exact integer counts)."""
    return {"clipped_pixels": 0, "bin_saturated_pixels": 0, "det_bin_dropped": [0, 0]}


@dataclass(frozen=True)
class LoadOptions:
    """Validated load options; ``dtype`` is ``"native"`` or a numpy type name.

    Build with :meth:`parse` (or :func:`parse_load_options`); loaders keep the parsed
    object and pass it down, never a dict to parse again.
    """

    dtype: str = "native"
    apply_mask: bool = True
    det_bin: int = 1

    @classmethod
    def parse(cls, dtype: Any = "native", apply_mask: Any = True, det_bin: Any = 1) -> LoadOptions:
        """Validate the options, raising ``UnsupportedDtypeError`` or ``ValueError``."""
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
        return cls(DTYPE_ALIASES[key.lower()], bool(apply_mask), int(det_bin))

    @classmethod
    def from_keywords(cls, keywords: Mapping[str, Any]) -> LoadOptions:
        """Parse the load options among a loader's keywords (absent ones: defaults)."""
        return cls.parse(**{name: keywords[name] for name in LOAD_OPTION_NAMES if name in keywords})

    def output_dtype(self, stored: Any) -> numpy.dtype:
        """The dtype :meth:`finish` returns for data stored as ``stored``."""
        if self.det_bin > 1:
            return numpy.dtype(BINNED_DTYPE)
        return numpy.dtype(stored if self.dtype == "native" else self.dtype)

    def output_detector_shape(self, detector_shape: Sequence[int]) -> tuple[int, int]:
        return (int(detector_shape[0]) // self.det_bin, int(detector_shape[1]) // self.det_bin)

    @property
    def is_identity(self) -> bool:
        """True when finishing returns the stored counts unchanged."""
        return self.dtype == "native" and not self.apply_mask and self.det_bin == 1

    def changes_layout(self, stored: Any) -> bool:
        """True when the finished frames differ in dtype or shape from frames stored as
        ``stored`` (then finishing needs a new array; otherwise it can mask in place)."""
        return self.det_bin > 1 or numpy.dtype(stored) != self.output_dtype(stored)

    def as_dict(self) -> dict[str, Any]:
        """``metadata["load_options"]``."""
        return {"dtype": self.dtype, "apply_mask": self.apply_mask, "det_bin": self.det_bin}

    def check_detector(self, detector_shape: Sequence[int]) -> None:
        """Raise ``ValueError`` when ``det_bin`` leaves no pixel of the detector."""
        if min(self.output_detector_shape(detector_shape)) < 1:
            rows, cols = (int(n) for n in detector_shape)
            raise ValueError(f"det_bin {self.det_bin} is larger than the {rows}x{cols} detector")

    def finish(
        self, frames: Any, validity: Any, xp: Any = numpy, *, overwrite: bool = False
    ) -> tuple[Any, dict]:
        """Apply the options to frames ``(..., det_r, det_c)`` of stored counts.

        Parameters
        ----------
        frames
            ``xp`` array of uint8, uint16 or uint32. Not modified unless ``overwrite``.
        validity
            Boolean ``(det_r, det_c)`` mask, True where the pixel is valid.
        xp
            ``numpy`` or ``cupy``; the result lives where ``frames`` does.
        overwrite
            ``frames`` belongs to the caller's result: when the options change neither
            dtype nor shape, the mask is applied in place and ``frames`` is returned
            (no second array of the acquisition's size).

        Returns
        -------
        array, info
            The finished frames and ``{"clipped_pixels", "bin_saturated_pixels",
            "det_bin_dropped"}`` (exact integer counts).
        """
        stored = numpy.dtype(frames.dtype)
        if stored.name not in STORED_DTYPES:
            raise UnsupportedDtypeError(f"frames of dtype {stored.name} are not supported")
        det_r, det_c = frames.shape[-2:]
        info = empty_info()
        if overwrite and not self.changes_layout(stored):
            if self.apply_mask:
                _mask_in_place(frames, validity, xp)
            return frames, info
        out = frames
        if self.apply_mask:
            valid = _check_validity(validity, (det_r, det_c), xp)
            out = xp.where(valid, out, xp.zeros((), dtype=stored))
        if self.dtype != "native" and self.dtype != stored.name:
            target = numpy.dtype(self.dtype)
            if target.itemsize < stored.itemsize:
                limit = int(numpy.iinfo(target).max)
                info["clipped_pixels"] = int(xp.count_nonzero(out > limit))
                out = xp.minimum(out, xp.asarray(limit, dtype=stored))
            out = out.astype(target)
        if self.det_bin > 1:
            self.check_detector((det_r, det_c))
            b = self.det_bin
            rows, cols = det_r // b, det_c // b
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

    def finish_validity(self, validity: numpy.ndarray) -> numpy.ndarray:
        """The validity mask of the finished detector: a binned pixel is valid when every
        detector pixel of its block is (trailing rows/columns dropped, as in the frames)."""
        validity = numpy.asarray(validity, dtype=bool)
        if self.det_bin == 1:
            return validity
        b = self.det_bin
        rows, cols = self.output_detector_shape(validity.shape)
        return validity[: rows * b, : cols * b].reshape(rows, b, cols, b).all(axis=(1, 3))

    def metadata(
        self, info: dict, *, stored_dtype: Any, stored_detector_shape: Sequence[int]
    ) -> dict[str, Any]:
        """The metadata keys that describe this load (:data:`LOAD_METADATA_KEYS`)."""
        stored = numpy.dtype(stored_dtype)
        return {
            "stored_dtype": stored.name,
            "dtype": self.output_dtype(stored).name,
            "stored_detector_shape": tuple(int(n) for n in stored_detector_shape),
            "detector_shape": self.output_detector_shape(stored_detector_shape),
            "load_options": self.as_dict(),
            "clipped_pixels": int(info["clipped_pixels"]),
            "bin_saturated_pixels": int(info["bin_saturated_pixels"]),
            "det_bin_dropped": [int(n) for n in info["det_bin_dropped"]],
        }


def _check_validity(validity: Any, detector_shape: tuple[int, int], xp: Any) -> Any:
    valid = xp.asarray(validity, dtype=bool)
    if tuple(valid.shape) != tuple(detector_shape):
        raise ValueError(f"validity shape {tuple(valid.shape)} != detector {detector_shape}")
    return valid


def _mask_in_place(frames: Any, validity: Any, xp: Any) -> None:
    """Zero the invalid pixels of ``frames`` (C-contiguous) without a second array."""
    det = tuple(frames.shape[-2:])
    invalid = xp.flatnonzero(~_check_validity(validity, det, xp).reshape(-1))
    if int(invalid.size) == 0:
        return
    flat = frames.reshape(-1, det[0] * det[1])
    flat[:, invalid] = 0


class FrameFinisher:
    """Finishes batches of frames into one preallocated ``xp`` array (``out``).

    :meth:`LoadOptions.finish` acts on each frame independently (mask, narrowing,
    binning), so finishing per batch equals finishing the whole stack; the integer
    counts of ``info`` are summed over the batches.
    """

    def __init__(
        self,
        options: LoadOptions,
        n_frames: int,
        stored_dtype: Any,
        detector_shape: Sequence[int],
        validity: Any,
        xp: Any = numpy,
    ) -> None:
        options.check_detector(detector_shape)
        self.options = options
        self.xp = xp
        self.validity = xp.asarray(validity, dtype=bool)
        det_out = options.output_detector_shape(detector_shape)
        self.out = xp.empty((int(n_frames), *det_out), dtype=options.output_dtype(stored_dtype))
        self.info = empty_info()
        b = options.det_bin
        self.info["det_bin_dropped"] = [int(detector_shape[0]) % b, int(detector_shape[1]) % b]

    def __call__(self, start: int, stop: int, frames: Any) -> None:
        result, info = self.options.finish(frames, self.validity, self.xp)
        self.out[start:stop] = result
        self.info["clipped_pixels"] += info["clipped_pixels"]
        self.info["bin_saturated_pixels"] += info["bin_saturated_pixels"]


def parse_loader_options(
    load_options: LoadOptions | None, dtype: Any, apply_mask: Any, det_bin: Any
) -> LoadOptions:
    """A loader's options: ``load_options`` as ``io.load`` parsed them, or else its
    ``dtype``/``apply_mask``/``det_bin`` keywords (a direct call), never both."""
    if load_options is None:
        return LoadOptions.parse(dtype, apply_mask, det_bin)
    if not isinstance(load_options, LoadOptions):
        raise TypeError(f"load_options must be a LoadOptions, got {type(load_options).__name__}")
    if (dtype, apply_mask, det_bin) != ("native", True, 1):
        raise ValueError("give load_options or dtype/apply_mask/det_bin, not both")
    return load_options


def parse_load_options(
    dtype: Any = "native", apply_mask: Any = True, det_bin: Any = 1
) -> LoadOptions:
    """Validate the load options (:meth:`LoadOptions.parse`)."""
    return LoadOptions.parse(dtype, apply_mask, det_bin)


def finish_frames(
    frames: Any,
    validity: Any,
    *,
    dtype: Any = "native",
    apply_mask: bool = True,
    det_bin: int = 1,
    xp: Any = numpy,
) -> tuple[Any, dict]:
    """Parse the options and finish ``frames`` once (:meth:`LoadOptions.finish`)."""
    return LoadOptions.parse(dtype, apply_mask, det_bin).finish(frames, validity, xp)


__all__ = [
    "LOAD_METADATA_KEYS",
    "LOAD_OPTION_NAMES",
    "FrameFinisher",
    "LoadOptions",
    "empty_info",
    "finish_frames",
    "parse_load_options",
    "parse_loader_options",
]
