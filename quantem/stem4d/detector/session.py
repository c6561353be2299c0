"""The :class:`DetectorSession`: exact detector products over one or more acquisitions.

A session validates its acquisitions once, then computes virtual-detector products
through the backend kernel interface (``quantem.stem4d.detector.cpu_kernels`` for cpu data,
``quantem.stem4d.cuda.detector_kernels`` for cuda data, the acquisition's ``encoded`` object for
``representation="encoded"``). Definitions, exactness rules and the disk estimate are
documented in ``docs/detector.md``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.arrays import array_module
from quantem.stem4d.detector import numpy_kernels
from quantem.stem4d.detector.dtypes import accumulator_dtype
from quantem.stem4d.detector.masks import (
    DiskEstimate,
    annulus_mask,
    disk_mask,
    estimate_disk,
    parse_mask,
    parse_validity,
    to_host,
)
from quantem.stem4d.errors import BackendUnavailableError, DetectorError, UnsupportedDtypeError

#: Module implementing the kernel interface for each dense backend.
KERNEL_MODULES = {
    "cpu": "quantem.stem4d.detector.cpu_kernels",
    "cuda": "quantem.stem4d.cuda.detector_kernels",
}

#: Methods (on a kernel module, or on ``acq.encoded``) a session calls.
KERNEL_FUNCTIONS = ("masked_sum", "sum_frames", "moments", "frame")

_UINT64_LIMIT = 2**64


class CenterOfMass(NamedTuple):
    """Per-scan-position centre of mass, in detector pixels from the centre of pixel (0, 0).

    ``row`` and ``col`` are float64 arrays ``(scan_r, scan_c)`` on the acquisition's
    backend; NaN where the frame has no counts in the mask.
    """

    row: Any
    col: Any


class _Prepared:
    """One validated acquisition and its cached products (the summed pattern, the disk)."""

    def __init__(self, acq: Acquisition, position: int) -> None:
        self.acq = acq
        self.position = position
        if not isinstance(acq, Acquisition):
            raise TypeError(
                f"acquisition {position}: expected a quantem Acquisition, got {type(acq).__name__}"
            )
        if acq.closed:
            raise DetectorError(f"acquisition {position} is closed")
        if acq.representation not in ("dense", "encoded", "sharded"):
            raise DetectorError(
                f"acquisition {position}: unknown representation {acq.representation!r}"
            )
        if acq.representation == "encoded":
            if acq.encoded is None:
                raise DetectorError(
                    f"acquisition {position} is 'encoded' but has no encoded payload"
                )
            missing = [n for n in KERNEL_FUNCTIONS if not callable(getattr(acq.encoded, n, None))]
            if missing:
                raise DetectorError(
                    f"acquisition {position}: its encoded payload lacks {', '.join(missing)}"
                )
            try:
                scan = tuple(int(v) for v in acq.metadata["scan_shape"])
                detector = tuple(int(v) for v in acq.metadata["detector_shape"])
                np.dtype(acq.metadata["dtype"])
            except (KeyError, TypeError, ValueError) as exc:
                raise DetectorError(
                    f"acquisition {position} is 'encoded' but its metadata lacks a valid "
                    f"scan_shape, detector_shape or dtype ({type(exc).__name__}: {exc})"
                ) from None
        elif acq.representation == "sharded":
            # ``acq.data`` is a quantem.stem4d.cuda.sharded.ShardedData: contract B over its GPUs.
            missing = [n for n in KERNEL_FUNCTIONS if not callable(getattr(acq.data, n, None))]
            if missing:
                raise DetectorError(
                    f"acquisition {position} is 'sharded' but its data lacks {', '.join(missing)}"
                )
            scan = tuple(int(v) for v in acq.data.scan_shape)
            detector = tuple(int(v) for v in acq.data.detector_shape)
        else:
            if acq.backend not in KERNEL_MODULES:
                raise DetectorError(f"acquisition {position}: unknown backend {acq.backend!r}")
            shape = getattr(acq.array, "shape", None)
            if shape is None or len(shape) != 4:
                raise DetectorError(
                    f"acquisition {position}: data must be 4D (scan_r, scan_c, det_r, det_c), "
                    f"got shape {shape}"
                )
            scan = (int(shape[0]), int(shape[1]))
            detector = (int(shape[2]), int(shape[3]))
        if len(scan) != 2 or len(detector) != 2:
            raise DetectorError(
                f"acquisition {position}: scan shape {scan} and detector shape {detector} "
                "must both be 2D"
            )
        self.scan_shape: tuple[int, int] = scan  # type: ignore[assignment]
        self.detector_shape: tuple[int, int] = detector  # type: ignore[assignment]
        self.n_frames = scan[0] * scan[1]
        self.dtype = np.dtype(acq.dtype)
        try:
            self.accumulator = accumulator_dtype(self.dtype)
        except UnsupportedDtypeError as exc:
            raise UnsupportedDtypeError(f"acquisition {position}: {exc}") from None
        try:
            self.validity = parse_validity(acq.validity, self.detector_shape)
        except DetectorError as exc:
            raise DetectorError(f"acquisition {position}: {exc}") from None
        self._pattern_sum: np.ndarray | None = None
        self._disk: DiskEstimate | None = None
        self._totals: Any = None

    # -- kernel dispatch -------------------------------------------------------------
    def call(self, name: str, *args: Any) -> Any:
        """Run kernel ``name`` on this acquisition (dense module or encoded payload)."""
        acq = self.acq
        if acq.closed:
            raise DetectorError(f"acquisition {self.position} was closed after prepare()")
        if acq.representation == "encoded":
            return getattr(acq.encoded, name)(*args)
        if acq.representation == "sharded":
            return getattr(acq.data, name)(*args)
        if acq.backend == "cpu" and numpy_kernels.suited(name, acq.array):
            # The same integers without numba's start-up: a first call or small data.
            return getattr(numpy_kernels, name)(acq.array, *args)
        module_name = KERNEL_MODULES[acq.backend]
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise BackendUnavailableError(
                f"acquisition {self.position} is on the {acq.backend} backend, but "
                f"{module_name} cannot be imported ({exc})"
            ) from exc
        return getattr(module, name)(acq.array, *args)

    def check_result(self, name: str, array: Any, shape: tuple[int, ...]) -> Any:
        """Hold a backend to the interface: products come back in the accumulator dtype."""
        if tuple(array.shape) != shape or np.dtype(array.dtype) != self.accumulator:
            raise DetectorError(
                f"acquisition {self.position}: the {self.acq.backend} kernel {name} returned "
                f"{np.dtype(array.dtype)} {tuple(array.shape)}, expected {self.accumulator} {shape}"
            )
        return array

    def check_exact(self, what: str, n_terms: int, weight: int = 1) -> None:
        """Refuse an integer product that could overflow uint64 (far beyond real detectors)."""
        if self.accumulator.kind != "u":
            return
        bound = int(np.iinfo(self.dtype).max) * max(n_terms, 1) * max(weight, 1)
        if bound >= _UINT64_LIMIT:
            raise DetectorError(
                f"acquisition {self.position}: {what} over {n_terms} {self.dtype} terms could "
                "exceed uint64; bin the detector or select fewer pixels"
            )

    # -- products --------------------------------------------------------------------
    def effective_mask(self, mask: Any) -> np.ndarray:
        try:
            user = parse_mask(mask, self.detector_shape)
        except DetectorError as exc:
            raise DetectorError(f"acquisition {self.position}: {exc}") from None
        return user & self.validity

    def masked_sum(self, mask: np.ndarray) -> Any:
        n = int(np.count_nonzero(mask))
        self.check_exact("a masked sum", n)
        n_valid = int(np.count_nonzero(self.validity))
        if self._use_complement(n, n_valid):
            # Integer sums are exact: the mask's sum is each frame's total less the sum
            # over the valid pixels outside the mask, which reads far fewer pixels.
            totals = self.frame_totals()
            complement = self.validity & ~mask
            if not complement.any():
                return totals.copy()
            rest = self.check_result(
                "masked_sum", self.call("masked_sum", complement), self.scan_shape
            )
            return totals - rest
        return self.check_result("masked_sum", self.call("masked_sum", mask), self.scan_shape)

    def _use_complement(self, n_mask: int, n_valid: int) -> bool:
        """Whether a masked sum is taken as total minus complement (docs/detector.md):
        dense integer data only, when the complement is the smaller read, and, before the
        frame totals are known, only for masks of at least 3/4 of the valid pixels (the
        first such sum reads every pixel once for the totals, then the complement)."""
        if self.acq.representation != "dense" or self.accumulator.kind != "u":
            return False
        if n_valid - n_mask >= n_mask:
            return False
        return self._totals is not None or 4 * n_mask >= 3 * n_valid

    def frame_totals(self) -> Any:
        """Each frame's exact sum over its valid pixels (cached; the CoM's denominator)."""
        if self._totals is None:
            self.check_exact("a masked sum", int(np.count_nonzero(self.validity)))
            self._totals = self.check_result(
                "masked_sum", self.call("masked_sum", self.validity), self.scan_shape
            )
        return self._totals

    def pattern_sum(self) -> np.ndarray:
        if self._pattern_sum is None:
            self.check_exact("the sum over frames", self.n_frames)
            summed = self.check_result("sum_frames", self.call("sum_frames"), self.detector_shape)
            host = np.array(to_host(summed), dtype=self.accumulator, copy=True)
            host[~self.validity] = 0
            self._pattern_sum = host
        return self._pattern_sum

    def disk(self) -> DiskEstimate:
        if self._disk is None:
            try:
                self._disk = estimate_disk(self.pattern_sum(), self.validity)
            except DetectorError as exc:
                raise DetectorError(f"acquisition {self.position}: {exc}") from None
        return self._disk

    def center_of_mass(self, mask: np.ndarray) -> CenterOfMass:
        det_r, det_c = self.detector_shape
        self.check_exact("a first moment", int(np.count_nonzero(mask)), max(det_r, det_c) - 1)
        total, sum_r, sum_c = self.call("moments", mask)
        for name, array in (
            ("moments total", total),
            ("moments sum_r", sum_r),
            ("moments sum_c", sum_c),
        ):
            self.check_result(name, array, self.scan_shape)
        if (
            self._totals is None
            and self.accumulator.kind == "u"
            and np.array_equal(mask, self.validity)
        ):
            self._totals = total  # the frame totals, exact: kept for later masked sums
        return CenterOfMass(exact_ratio(sum_r, total), exact_ratio(sum_c, total))

    def frame(self, index: Any) -> Any:
        scan_r, scan_c = self.scan_shape
        if isinstance(index, tuple):
            if len(index) != 2:
                raise IndexError(f"a frame index is an int or (row, col), got {index!r}")
            row, col = (_as_index(v) for v in index)
            if not (-scan_r <= row < scan_r and -scan_c <= col < scan_c):
                raise IndexError(
                    f"acquisition {self.position}: scan position {index} is outside scan shape "
                    f"{self.scan_shape}"
                )
            flat = (row % scan_r) * scan_c + (col % scan_c)
        else:
            flat = _as_index(index)
            if not -self.n_frames <= flat < self.n_frames:
                raise IndexError(
                    f"acquisition {self.position}: frame {index} is out of range for "
                    f"{self.n_frames} frames"
                )
            flat %= self.n_frames
        # Kernels may return a view (the CUDA one does); users get their own copy.
        return self.call("frame", flat).copy()


def _as_index(value: Any) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise IndexError(f"frame indices must be integers, got {value!r}")
    return int(value)


def exact_ratio(numerator: Any, total: Any) -> Any:
    """``numerator / total`` per element, correctly rounded to float64 (NaN where total == 0).

    numpy or CuPy. For integer moments the result is the float64 nearest the exact
    rational quotient: one rounding. Operands below 2**53 are exact in float64, so the
    hardware division (IEEE 754, correctly rounded) is that one rounding; the rare
    elements with a larger operand are divided as Python integers (also correctly
    rounded). Splitting as ``q + r / total`` would round twice.
    """
    empty = total == 0
    safe = total + empty  # 1 where total is 0: no division by zero, value replaced below
    result = numerator.astype(np.float64) / safe.astype(np.float64)
    if np.dtype(total.dtype).kind == "u":
        large = (numerator >= _EXACT_FLOAT_LIMIT) | (safe >= _EXACT_FLOAT_LIMIT)
        if bool(large.any()):
            flat = np.flatnonzero(np.asarray(to_host(large)))
            host_num = np.asarray(to_host(numerator)).reshape(-1)[flat]
            host_den = np.asarray(to_host(safe)).reshape(-1)[flat]
            exact = np.array(
                [int(n) / int(d) for n, d in zip(host_num, host_den, strict=True)],
                dtype=np.float64,
            )
            fixed = np.asarray(to_host(result)).reshape(-1).copy()
            fixed[flat] = exact
            result = array_module(result).asarray(fixed.reshape(result.shape))
    result[empty] = np.nan
    return result


# Integers up to 2**53 are exact in float64; at or above it a conversion may round.
_EXACT_FLOAT_LIMIT = 2**53


class DetectorSession:
    """Exact virtual-detector products over one acquisition or an ordered list of them.

    Build one with :func:`quantem.stem4d.detector.prepare` or :meth:`from_acquisitions`.

    Return convention: a session prepared from a single :class:`Acquisition` returns each
    product directly; a session prepared from a list (or tuple) returns a list with one
    product per acquisition, in input order (acquisitions may differ in scan and detector
    shape, so products are never concatenated). ``session[k]`` is the single-acquisition
    session of the k-th acquisition (sharing its cached mean pattern).

    Products ignore invalid detector pixels (``acq.validity`` False): every mask is
    intersected with the validity, the summed pattern is 0 there. :meth:`frame` is the
    exception: it returns the frame as loaded, invalid pixels included (0 under the
    loaders' default ``apply_mask=True``, the stored value with ``apply_mask=False``).

    Output: with ``output="torch"`` (given to :func:`~quantem.stem4d.detector.prepare`, or
    inherited from an acquisition loaded with ``output="torch"``), the device products
    (:meth:`masked_sum`, :meth:`frame`, :meth:`bf`, :meth:`adf`, :meth:`center_of_mass`)
    are ``torch.Tensor`` sharing the kernels' result memory (DLPack, no copy; on the GPU
    for cuda). The host products (:meth:`masked_sum_exact`, :meth:`mean_dp_exact`,
    :meth:`mean_dp`, :meth:`bright_field_disk`) are numpy whatever the output.
    """

    def __init__(
        self, prepared: Sequence[_Prepared], *, single: bool, output: str | None = None
    ) -> None:
        if output is not None:
            from quantem.stem4d.interop import check_output, require_torch

            check_output(output)
            if output == "torch":
                require_torch()
        self._prepared = tuple(prepared)
        self._single = single
        self._output = output

    @classmethod
    def from_acquisitions(
        cls, acquisitions: Acquisition | Sequence[Acquisition], *, output: str | None = None
    ) -> DetectorSession:
        """Validate ``acquisitions`` (one, or a list/tuple kept in order) and prepare a session.

        ``output`` (``"array"`` or ``"torch"``) overrides what each acquisition's own
        ``output`` says the device products should be.

        Raises
        ------
        DetectorError
            Empty list, closed acquisition, inconsistent shapes or validity.
        UnsupportedDtypeError
            Data that is not uint8/uint16/uint32/float32/float64.
        """
        if isinstance(acquisitions, (list, tuple)):
            if not acquisitions:
                raise DetectorError("prepare() needs at least one acquisition, got an empty list")
            items = list(acquisitions)
            single = False
        else:
            items = [acquisitions]
            single = True
        return cls([_Prepared(acq, k) for k, acq in enumerate(items)], single=single, output=output)

    # -- container protocol ------------------------------------------------------------
    @property
    def acquisitions(self) -> tuple[Acquisition, ...]:
        """The acquisitions, in the order they were prepared."""
        return tuple(p.acq for p in self._prepared)

    def __len__(self) -> int:
        return len(self._prepared)

    def __getitem__(self, k: int) -> DetectorSession:
        return DetectorSession([self._prepared[k]], single=True, output=self._output)

    def __iter__(self) -> Iterator[DetectorSession]:
        return (DetectorSession([p], single=True, output=self._output) for p in self._prepared)

    def __repr__(self) -> str:
        inner = ", ".join(
            f"{p.scan_shape + p.detector_shape} {p.dtype} {p.acq.backend}" for p in self._prepared
        )
        return f"<DetectorSession [{inner}]>"

    def _each(self, product: Callable[[_Prepared], Any], *, device: bool = True) -> Any:
        """``product`` of every acquisition; ``device`` products honour the output."""
        results = []
        for p in self._prepared:
            result = product(p)
            if device and (self._output or p.acq.output) == "torch":
                from quantem.stem4d.interop import to_torch

                result = to_torch(result)
            results.append(result)
        return results[0] if self._single else results

    # -- products ----------------------------------------------------------------------
    def masked_sum(self, mask: Any) -> Any:
        """Sum of each frame over ``mask & validity``, on the acquisition's backend.

        Parameters
        ----------
        mask
            Boolean (or 0/1 integer) array of the detector shape, numpy or CuPy.

        Returns
        -------
        array
            ``(scan_r, scan_c)``: uint64 (exact) for integer data, float64 for float data;
            numpy on cpu, CuPy on cuda (a list of them for a list of acquisitions).
        """
        return self._each(lambda p: p.masked_sum(p.effective_mask(mask)))

    def masked_sum_exact(self, mask: Any) -> Any:
        """Like :meth:`masked_sum`, always as a host numpy array (uint64 for integer data)."""
        return self._each(
            lambda p: np.asarray(to_host(p.masked_sum(p.effective_mask(mask)))), device=False
        )

    def frame(self, index: int | tuple[int, int]) -> Any:
        """The counts of one frame as loaded, invalid pixels included.

        Invalid pixels read what the loader left there: 0 under the default
        ``apply_mask=True``, the stored value (the dtype's maximum in ARINA data) when the
        acquisition was loaded with ``apply_mask=False``.

        ``index`` is a row-major frame number (negative counts from the end) or a scan
        position ``(row, col)``. Returns a ``(det_r, det_c)`` array in the data's dtype on
        the acquisition's backend.
        """
        return self._each(lambda p: p.frame(index))

    def mean_dp_exact(self) -> Any:
        """Exact sum over all frames per detector pixel (host numpy, uint64 for integer data).

        Invalid pixels are 0. The mean diffraction pattern is this divided by the number
        of frames, which :meth:`mean_dp` returns as float64.
        """
        return self._each(lambda p: p.pattern_sum().copy(), device=False)

    def mean_dp(self) -> Any:
        """Mean diffraction pattern (float64, host): :meth:`mean_dp_exact` / number of frames."""

        def mean(p: _Prepared) -> np.ndarray:
            if p.n_frames == 0:
                raise DetectorError(f"acquisition {p.position} has no frames")
            return p.pattern_sum().astype(np.float64) / p.n_frames

        return self._each(mean, device=False)

    def bright_field_disk(self) -> Any:
        """The bright-field disk (:class:`~quantem.stem4d.detector.masks.DiskEstimate`) found in the
        summed pattern: centre ``(row, col)`` and radius in pixels; see ``docs/detector.md``."""
        return self._each(lambda p: p.disk(), device=False)

    def bf(self, radius: float | None = None, center: Any = None) -> Any:
        """Bright-field image: masked sum over the disk ``distance <= radius`` around ``center``.

        ``radius`` and ``center`` ``(row, col)`` are in detector pixels; each one left as
        None comes from :meth:`bright_field_disk`.
        """

        def product(p: _Prepared) -> Any:
            disk = p.disk() if radius is None or center is None else None
            mask = disk_mask(
                p.detector_shape,
                disk.center if center is None else center,
                disk.radius if radius is None else radius,
            )
            return p.masked_sum(mask & p.validity)

        return self._each(product)

    def adf(
        self, inner: float | None = None, outer: float | None = None, center: Any = None
    ) -> Any:
        """Annular dark-field image: masked sum over ``inner < distance <= outer``.

        In detector pixels. ``inner=None`` uses the bright-field disk radius, ``outer=None``
        extends to the detector edge, ``center=None`` uses the disk centre. ``bf(a)`` plus
        ``adf(a, b)`` equals ``bf(b)`` exactly for the same centre.
        """

        def product(p: _Prepared) -> Any:
            disk = p.disk() if inner is None or center is None else None
            mask = annulus_mask(
                p.detector_shape,
                disk.center if center is None else center,
                disk.radius if inner is None else inner,
                outer,
            )
            return p.masked_sum(mask & p.validity)

        return self._each(product)

    def center_of_mass(self, mask: Any = None) -> Any:
        """Centre of mass of each frame from exact integer moments (float64 result).

        ``row = sum(r * value) / sum(value)`` over ``mask & validity`` (all valid pixels
        when ``mask`` is None), likewise ``col``; ``r``/``c`` are detector pixel indices,
        so the origin is the centre of pixel (0, 0) and the unit is one pixel. NaN where a
        frame has no counts in the mask. For a shift relative to the beam, subtract
        ``bright_field_disk().center``. Returns :class:`CenterOfMass` ``(row, col)``.
        """

        def product(p: _Prepared) -> CenterOfMass:
            effective = p.validity.copy() if mask is None else p.effective_mask(mask)
            return p.center_of_mass(effective)

        return self._each(product)


__all__ = ["KERNEL_FUNCTIONS", "KERNEL_MODULES", "CenterOfMass", "DetectorSession", "exact_ratio"]
