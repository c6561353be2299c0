"""Where compute workloads get their detector products: one interface, three kinds of input.

:func:`open_frames` turns what the user has into a :class:`Frames` object:

* an :class:`~quantem.acquisition.Acquisition` (dense or encoded, cpu or cuda): products
  come from a :class:`~quantem.detector.session.DetectorSession`, so they are the exact
  integer products of ``docs/detector.md``;
* the same with ``scan_region``: a dense acquisition is viewed (cpu) or copied (cuda)
  over the region; an encoded one must be loaded with ``scan_region`` (the ``.qem``
  reader supports it) and is refused here;
* a path to an ARINA master file or an open :class:`~quantem.io.arina.ArinaSource`:
  frames are decoded in batches of ``batch_frames`` and reduced batch by batch, on the
  CPU or (``backend="cuda"``) on the GPU, so the decoded data never has to fit in memory. Every product is an exact integer
  sum, so a streamed product equals the dense one bit for bit.

Every product is a per-frame reduction or an exact sum, computed with the same kernels
as :mod:`quantem.detector`, so invalid pixels never contribute.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from quantem.acquisition import Acquisition
from quantem.arrays import module_for_backend, to_numpy
from quantem.detector import cpu_kernels
from quantem.detector.masks import DiskEstimate, estimate_disk, parse_mask, parse_validity
from quantem.detector.session import CenterOfMass, DetectorSession, exact_ratio
from quantem.errors import ComputeError

#: Frames decoded per batch when streaming from a file on the CPU.
DEFAULT_BATCH_FRAMES = 512
#: Frames decoded per batch when streaming onto a GPU (16 scan rows of 512; 1.2 GB of
#: 192x192 uint16 frames per batch).
DEFAULT_CUDA_BATCH_FRAMES = 8192


class Frames:
    """The products compute workloads need, from one source (see :func:`open_frames`).

    Attributes
    ----------
    scan_shape, detector_shape
        ``(rows, cols)`` of the scan (the region, if one was given) and of the detector.
    validity
        Host bool mask of valid detector pixels.
    backend
        ``"cpu"`` or ``"cuda"``: where the per-frame products live.
    kind
        ``"dense"``, ``"encoded"`` or ``"stream"``.
    """

    scan_shape: tuple[int, int]
    detector_shape: tuple[int, int]
    validity: np.ndarray
    backend: str
    kind: str

    @property
    def xp(self) -> Any:
        """numpy or CuPy, matching :attr:`backend`."""
        return module_for_backend(self.backend)

    def masked_sums(self, masks: Sequence[Any]) -> list[Any]:
        """Per-frame sums over each ``mask & validity``: uint64 (integer data) or float64."""
        raise NotImplementedError

    def center_of_mass(self, mask: Any = None) -> CenterOfMass:
        raise NotImplementedError

    def pattern_sum(self) -> np.ndarray:
        """Exact sum over frames per detector pixel (host; invalid pixels 0)."""
        raise NotImplementedError

    def pixel_stack(self, rows: np.ndarray, cols: np.ndarray) -> Any:
        """Images of single detector pixels: ``(n_pixels, scan_r, scan_c)`` float64."""
        raise NotImplementedError

    def disk(self) -> DiskEstimate:
        """The bright-field disk found in :meth:`pattern_sum` (``docs/detector.md``)."""
        if getattr(self, "_disk", None) is None:
            self._disk = estimate_disk(self.pattern_sum(), self.validity)
        return self._disk


class _SessionFrames(Frames):
    def __init__(self, acq: Acquisition) -> None:
        self.acq = acq
        self.session = DetectorSession.from_acquisitions(acq, output="array")
        # The session has validated the shapes (array for dense, metadata for encoded).
        shape = acq.array.shape if acq.representation == "dense" else acq.shape
        self.scan_shape = (int(shape[0]), int(shape[1]))
        self.detector_shape = (int(shape[2]), int(shape[3]))
        self.validity = parse_validity(acq.validity, self.detector_shape)
        self.backend = acq.backend
        self.kind = acq.representation
        self._disk = None
        self._pattern = None

    def masked_sums(self, masks: Sequence[Any]) -> list[Any]:
        return [self.session.masked_sum(mask) for mask in masks]

    def center_of_mass(self, mask: Any = None) -> CenterOfMass:
        return self.session.center_of_mass(mask)

    def pattern_sum(self) -> np.ndarray:
        if self._pattern is None:
            self._pattern = self.session.mean_dp_exact()
        return self._pattern

    def disk(self) -> DiskEstimate:
        return self.session.bright_field_disk()

    def pixel_stack(self, rows: np.ndarray, cols: np.ndarray) -> Any:
        xp = self.xp
        rows = np.asarray(rows, dtype=np.int64)
        cols = np.asarray(cols, dtype=np.int64)
        if self.kind == "sharded" and not self.acq.data.encoded:
            # Each GPU gathers its rows; the same float64 conversion as the dense path.
            return self.acq.data.pixel_stack(rows, cols)
        if self.kind == "dense":
            data = self.acq.array
            # One gather pass over the data: (scan_r, scan_c, n) -> (n, scan_r, scan_c).
            gathered = data[:, :, xp.asarray(rows), xp.asarray(cols)]
            return xp.ascontiguousarray(xp.moveaxis(gathered, -1, 0)).astype(xp.float64)
        # Encoded payloads answer masked sums only: one (fused decode + reduce) pass per pixel.
        stack = xp.empty((rows.size, *self.scan_shape), dtype=xp.float64)
        mask = np.zeros(self.detector_shape, dtype=bool)
        for k, (r, c) in enumerate(zip(rows.tolist(), cols.tolist())):
            mask[r, c] = True
            stack[k] = self.session.masked_sum(mask).astype(xp.float64)
            mask[r, c] = False
        return stack


class _StreamFrames(Frames):
    """Products reduced batch by batch from an ARINA source decoded on the CPU."""

    def __init__(self, source: Any, batch_frames: int, scan_region: Any) -> None:
        from quantem.io.arina import ArinaSource, open_arina

        if not isinstance(source, ArinaSource):
            source = open_arina(source)
        if batch_frames < 1:
            raise ComputeError(f"batch_frames must be >= 1, got {batch_frames}")
        self.source = source
        self.batch_frames = int(batch_frames)
        self.full_scan = tuple(int(v) for v in source.scan_shape)
        self.detector_shape = tuple(int(v) for v in source.detector_shape)
        self.validity = np.ascontiguousarray(np.asarray(source.validity, dtype=bool))
        self.accumulator = cpu_kernels.accumulator_dtype(source.dtype)
        if scan_region is None:
            self.region = ((0, self.full_scan[0]), (0, self.full_scan[1]))
        else:
            from quantem.io.qem.reader import parse_scan_region

            self.region = parse_scan_region(scan_region, self.full_scan)
        (r0, r1), (c0, c1) = self.region
        self.scan_shape = (r1 - r0, c1 - c0)
        self.backend = "cpu"
        self.kind = "stream"
        self._disk = None
        self._pattern = None

    def _batches(self):
        """Yield ``(scan rows, region cols slice, frames (n_rows, n_cols, det_r, det_c))``.

        The region's rows are read whole (frames are stored row-major), then narrowed.
        """
        from quantem.io.arina import iter_frame_batches

        (r0, r1), (c0, c1) = self.region
        scan_c = self.full_scan[1]
        rows_per_batch = max(1, self.batch_frames // scan_c)
        for row in range(r0, r1, rows_per_batch):
            stop_row = min(row + rows_per_batch, r1)
            for first, frames in iter_frame_batches(
                self.source,
                (stop_row - row) * scan_c,
                start=row * scan_c,
                stop=stop_row * scan_c,
            ):
                n_rows = len(frames) // scan_c
                first_row = first // scan_c
                block = frames.reshape(n_rows, scan_c, *self.detector_shape)[:, c0:c1]
                yield first_row - r0, np.ascontiguousarray(block)

    def masked_sums(self, masks: Sequence[Any]) -> list[Any]:
        effective = [parse_mask(m, self.detector_shape) & self.validity for m in masks]
        outs = [np.zeros(self.scan_shape, dtype=self.accumulator) for _ in effective]
        for row, block in self._batches():
            for out, mask in zip(outs, effective):
                out[row : row + len(block)] = cpu_kernels.masked_sum(block, mask)
        return outs

    def center_of_mass(self, mask: Any = None) -> CenterOfMass:
        effective = self.validity.copy()
        if mask is not None:
            effective &= parse_mask(mask, self.detector_shape)
        parts = [np.zeros(self.scan_shape, dtype=self.accumulator) for _ in range(3)]
        for row, block in self._batches():
            for out, value in zip(parts, cpu_kernels.moments(block, effective)):
                out[row : row + len(block)] = value
        total, sum_r, sum_c = parts
        return CenterOfMass(exact_ratio(sum_r, total), exact_ratio(sum_c, total))

    def pattern_sum(self) -> np.ndarray:
        if self._pattern is None:
            total = np.zeros(self.detector_shape, dtype=self.accumulator)
            for _, block in self._batches():
                total += cpu_kernels.sum_frames(block)  # exact for integers: order-free
            total[~self.validity] = 0
            self._pattern = total
        return self._pattern

    def pixel_stack(self, rows: np.ndarray, cols: np.ndarray) -> Any:
        rows = np.asarray(rows, dtype=np.int64)
        cols = np.asarray(cols, dtype=np.int64)
        stack = np.empty((rows.size, *self.scan_shape), dtype=np.float64)
        for row, block in self._batches():
            stack[:, row : row + len(block)] = np.moveaxis(block[:, :, rows, cols], -1, 0)
        return stack


class _CudaStreamFrames(_StreamFrames):
    """Products reduced batch by batch from an ARINA source decoded on the GPU.

    Each batch of whole scan rows is decoded on the current device (the CUDA HDF5
    pipeline of :mod:`quantem.cuda.hdf5_pipeline`, every chunk validated), narrowed to the
    region and reduced with the CUDA detector kernels of a
    :class:`~quantem.detector.session.DetectorSession`; the per-frame results land in
    device arrays, so products equal those of the dense CUDA acquisition bit for bit
    (they are per-frame exact integer reductions, or order-free exact sums).
    """

    def __init__(self, source: Any, batch_frames: int, scan_region: Any) -> None:
        from quantem.backends import require_backend

        require_backend("cuda")
        super().__init__(source, batch_frames, scan_region)
        self.backend = "cuda"

    def _sessions(self):
        """Yield ``(first region row, _SessionFrames of the batch on the GPU)``."""
        import cupy

        from quantem.cuda.hdf5_pipeline import decode_source_to_device

        (r0, r1), (c0, c1) = self.region
        scan_c = self.full_scan[1]
        rows_per_batch = max(1, self.batch_frames // scan_c)
        metadata = {
            "detector_shape": self.detector_shape,
            "dtype": np.dtype(self.source.dtype).name,
        }
        for row in range(r0, r1, rows_per_batch):
            stop_row = min(row + rows_per_batch, r1)
            frames, _ = decode_source_to_device(
                self.source, frame_range=(row * scan_c, stop_row * scan_c)
            )
            block = frames.reshape(stop_row - row, scan_c, *self.detector_shape)
            block = cupy.ascontiguousarray(block[:, c0:c1])
            batch_meta = dict(
                metadata, scan_shape=block.shape[:2], n_frames=block.shape[0] * block.shape[1]
            )
            yield row - r0, _SessionFrames(Acquisition(block, batch_meta, self.validity, "cuda"))

    def masked_sums(self, masks: Sequence[Any]) -> list[Any]:
        outs = None
        for row, batch in self._sessions():
            parts = batch.masked_sums(masks)
            if outs is None:
                outs = [self.xp.empty(self.scan_shape, dtype=p.dtype) for p in parts]
            for out, part in zip(outs, parts):
                out[row : row + part.shape[0]] = part
        return outs

    def center_of_mass(self, mask: Any = None) -> CenterOfMass:
        fields = None
        for row, batch in self._sessions():
            com = batch.center_of_mass(mask)
            if fields is None:
                fields = [self.xp.empty(self.scan_shape, dtype=f.dtype) for f in com]
            for out, part in zip(fields, com):
                out[row : row + part.shape[0]] = part
        return CenterOfMass(*fields)

    def pattern_sum(self) -> np.ndarray:
        if self._pattern is None:
            total = None
            for _, batch in self._sessions():
                part = to_numpy(batch.pattern_sum())
                total = part.copy() if total is None else total + part  # exact, order-free
            total[~self.validity] = 0
            self._pattern = total
        return self._pattern

    def pixel_stack(self, rows: np.ndarray, cols: np.ndarray) -> Any:
        rows = np.asarray(rows, dtype=np.int64)
        cols = np.asarray(cols, dtype=np.int64)
        stack = self.xp.empty((rows.size, *self.scan_shape), dtype=self.xp.float64)
        for row, batch in self._sessions():
            part = batch.pixel_stack(rows, cols)
            stack[:, row : row + part.shape[1]] = part
        return stack


def _region_acquisition(acq: Acquisition, scan_region: Any) -> Acquisition:
    from quantem.io.qem.reader import parse_scan_region

    if acq.representation == "sharded":
        raise ComputeError(
            "a scan region of a sharded acquisition is not supported: load the region on "
            "one GPU (load(path, backend='cuda', scan_region=...))"
        )
    if acq.representation != "dense":
        raise ComputeError(
            "a scan region of an encoded acquisition is chosen when loading it: "
            "load(path, representation='encoded', scan_region=...)"
        )
    (r0, r1), (c0, c1) = parse_scan_region(scan_region, tuple(acq.array.shape[:2]))
    view = acq.array[r0:r1, c0:c1]
    if acq.backend == "cuda":
        view = module_for_backend("cuda").ascontiguousarray(view)
    metadata = dict(acq.metadata)
    metadata.update(
        {
            "scan_shape": (r1 - r0, c1 - c0),
            "n_frames": (r1 - r0) * (c1 - c0),
            "scan_region": [r0, r1, c0, c1],
        }
    )
    return Acquisition(view, metadata, acq.validity, acq.backend)


def open_frames(
    source: Any,
    *,
    scan_region: Any = None,
    batch_frames: int | None = None,
    backend: str | None = None,
) -> Frames:
    """A :class:`Frames` over ``source``.

    Parameters
    ----------
    source
        An :class:`Acquisition`, an already open :class:`Frames`, an
        :class:`~quantem.io.arina.ArinaSource` or a path to an ARINA master file
        (streamed: decoded in batches, never whole).
    scan_region
        ``(r0, r1, c0, c1)`` (half-open), ``((r0, r1), (c0, c1))`` or two slices.
    batch_frames
        Frames decoded per batch when streaming (whole scan rows at a time, at least one):
        default :data:`DEFAULT_BATCH_FRAMES` on the CPU, :data:`DEFAULT_CUDA_BATCH_FRAMES`
        on CUDA.
    backend
        Streamed sources only: ``"cpu"`` (default) decodes and reduces on the CPU,
        ``"cuda"`` on the current GPU (outputs are CuPy arrays, as for a CUDA
        acquisition). For an acquisition it must be the acquisition's own backend.
    """
    if backend not in (None, "cpu", "cuda"):
        raise ComputeError(f"backend must be 'cpu' or 'cuda', not {backend!r}")
    if isinstance(source, Frames):
        if scan_region is not None:
            raise ComputeError("pass scan_region when opening the frames, not afterwards")
        return source
    if isinstance(source, Acquisition):
        if backend is not None and backend != source.backend:
            raise ComputeError(
                f"the acquisition is on {source.backend!r}, not {backend!r}: load it there "
                "(backend applies to streamed sources)"
            )
        if scan_region is not None:
            source = _region_acquisition(source, scan_region)
        return _SessionFrames(source)
    if isinstance(source, (str, os.PathLike)) or type(source).__name__ == "ArinaSource":
        if backend == "cuda":
            batch = DEFAULT_CUDA_BATCH_FRAMES if batch_frames is None else batch_frames
            return _CudaStreamFrames(source, batch, scan_region)
        batch = DEFAULT_BATCH_FRAMES if batch_frames is None else batch_frames
        return _StreamFrames(source, batch, scan_region)
    raise ComputeError(
        f"cannot compute from a {type(source).__name__}: pass an Acquisition, an ARINA "
        "master path or an ArinaSource"
    )


__all__ = ["DEFAULT_BATCH_FRAMES", "DEFAULT_CUDA_BATCH_FRAMES", "Frames", "open_frames"]
