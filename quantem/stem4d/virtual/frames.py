"""Where compute workloads get their detector products: one interface, three kinds of input.

:func:`open_frames` turns what the user has into a :class:`Frames` object:

* an :class:`~quantem.stem4d.acquisition.Acquisition` (dense or encoded, cpu or cuda): products
  come from a :class:`~quantem.stem4d.detector.session.DetectorSession`, so they are the exact
  integer products of ``docs/detector.md``;
* the same with ``scan_region``: a dense acquisition is viewed (cpu) or copied (cuda)
  over the region; an encoded one must be loaded with ``scan_region`` (the ``.qem``
  reader supports it) and is refused here;
* a path to an ARINA master file or an open :class:`~quantem.stem4d.io.arina.ArinaSource`:
  frames are decoded in batches of ``batch_frames`` and reduced batch by batch, on the
  CPU or (``backend="cuda"``) on the GPU, so the decoded data never has to fit in memory. Every product is an exact integer
  sum, so a streamed product equals the dense one bit for bit.

Every product is a per-frame reduction or an exact sum, computed with the same kernels
as :mod:`quantem.stem4d.detector`, so invalid pixels never contribute.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.arrays import module_for_backend, to_numpy
from quantem.stem4d.detector import cpu_kernels
from quantem.stem4d.detector.masks import DiskEstimate, estimate_disk, parse_mask, parse_validity
from quantem.stem4d.detector.session import CenterOfMass, DetectorSession, exact_ratio
from quantem.stem4d.errors import ComputeError

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
        from quantem.stem4d.io.arina import ArinaSource, open_arina

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
            from quantem.stem4d.io.qem.reader import parse_scan_region

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
        from quantem.stem4d.io.arina import iter_frame_batches

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

    One run of the CUDA HDF5 pipeline (:mod:`quantem.stem4d.cuda.hdf5_pipeline`, every chunk
    validated) per product decodes the region's scan rows in batches of at most
    ``batch_frames`` frames and hands each batch to a ``consume`` hook on its compute
    stream, so reading, copying and decoding overlap as in a load; the hook reduces the
    batch with the CUDA detector kernels of a
    :class:`~quantem.stem4d.detector.session.DetectorSession` (the batch as a one-row scan) into
    per-frame device arrays over the region's whole rows, narrowed to its columns at the
    end. Products equal those of the dense CUDA acquisition bit for bit (per-frame exact
    integer reductions, or order-free exact sums).
    """

    def __init__(self, source: Any, batch_frames: int, scan_region: Any) -> None:
        from quantem.stem4d.backends import require_backend

        require_backend("cuda")
        super().__init__(source, batch_frames, scan_region)
        self.backend = "cuda"
        #: Pipeline runs so far, and the host seconds spent in their consume hooks.
        self.pipeline_runs = 0
        self.consume_seconds = 0.0

    def _run(self, reduce: Any) -> None:
        """Decode the region's rows once, calling ``reduce(start, stop, batch)`` per batch:
        ``start``/``stop`` are frame offsets within those rows, ``batch`` a
        :class:`_SessionFrames` of the batch's frames as a ``(1, n)`` scan."""
        from quantem.stem4d.cuda.hdf5_pipeline import DEFAULT_BATCH_BYTES, decode_source_to_device

        (r0, r1), _ = self.region
        scan_c = self.full_scan[1]
        frame_bytes = int(np.prod(self.detector_shape)) * np.dtype(self.source.dtype).itemsize
        metadata = {
            "detector_shape": self.detector_shape,
            "dtype": np.dtype(self.source.dtype).name,
        }

        def consume(start: int, stop: int, frames: Any) -> None:
            t0 = time.perf_counter()
            n = stop - start
            block = frames.reshape(1, n, *self.detector_shape)
            batch_meta = dict(metadata, scan_shape=(1, n), n_frames=n)
            reduce(
                start, stop, _SessionFrames(Acquisition(block, batch_meta, self.validity, "cuda"))
            )
            self.consume_seconds += time.perf_counter() - t0

        decode_source_to_device(
            self.source,
            consume=consume,
            frame_range=(r0 * scan_c, r1 * scan_c),
            # The frame count binds, not the compressed bytes (a chunk is at most about
            # a frame); pinned staging is sized by the batches actually planned.
            batch_bytes=max(DEFAULT_BATCH_BYTES, self.batch_frames * frame_bytes),
            batch_frames=self.batch_frames,
        )
        self.pipeline_runs += 1

    def _rows(self, flat: Any) -> Any:
        """Per-frame values over the region's whole rows -> the region ``(rows, cols)``."""
        (r0, r1), (c0, c1) = self.region
        grid = flat.reshape(r1 - r0, self.full_scan[1], *flat.shape[1:])
        if c0 == 0 and c1 == self.full_scan[1]:
            return grid
        return self.xp.ascontiguousarray(grid[:, c0:c1])

    def _n_row_frames(self) -> int:
        (r0, r1), _ = self.region
        return (r1 - r0) * self.full_scan[1]

    def masked_sums(self, masks: Sequence[Any]) -> list[Any]:
        outs: list[Any] = []

        def reduce(start: int, stop: int, batch: _SessionFrames) -> None:
            parts = batch.masked_sums(masks)
            if not outs:
                outs.extend(self.xp.empty(self._n_row_frames(), dtype=p.dtype) for p in parts)
            for out, part in zip(outs, parts):
                out[start:stop] = part.reshape(-1)

        self._run(reduce)
        return [self._rows(out) for out in outs]

    def center_of_mass(self, mask: Any = None) -> CenterOfMass:
        fields: list[Any] = []

        def reduce(start: int, stop: int, batch: _SessionFrames) -> None:
            com = batch.center_of_mass(mask)
            if not fields:
                fields.extend(self.xp.empty(self._n_row_frames(), dtype=f.dtype) for f in com)
            for out, part in zip(fields, com):
                out[start:stop] = part.reshape(-1)

        self._run(reduce)
        return CenterOfMass(*(self._rows(f) for f in fields))

    def pattern_sum(self) -> np.ndarray:
        if self._pattern is None:
            _, (c0, c1) = self.region
            scan_c = self.full_scan[1]
            totals: list[Any] = []

            def reduce(start: int, stop: int, batch: _SessionFrames) -> None:
                # Only the region's columns count: the batch's frames at those columns.
                cols = np.arange(start, stop) % scan_c
                inside = np.nonzero((cols >= c0) & (cols < c1))[0]
                if inside.size == 0:
                    return
                if inside.size != stop - start:
                    frames = batch.acq.array[:, self.xp.asarray(inside)]
                    meta = dict(
                        batch.acq.metadata, scan_shape=(1, inside.size), n_frames=inside.size
                    )
                    batch = _SessionFrames(Acquisition(frames, meta, self.validity, "cuda"))
                part = to_numpy(batch.pattern_sum())  # host, exact
                if totals:
                    totals[0] += part  # exact, order-free
                else:
                    totals.append(np.array(part, copy=True))

            self._run(reduce)
            total = totals[0]
            total[~self.validity] = 0
            self._pattern = total
        return self._pattern

    def pixel_stack(self, rows: np.ndarray, cols: np.ndarray) -> Any:
        rows = np.asarray(rows, dtype=np.int64)
        cols = np.asarray(cols, dtype=np.int64)
        stack = self.xp.empty((rows.size, self._n_row_frames()), dtype=self.xp.float64)

        def reduce(start: int, stop: int, batch: _SessionFrames) -> None:
            stack[:, start:stop] = batch.pixel_stack(rows, cols).reshape(rows.size, -1)

        self._run(reduce)
        (r0, r1), (c0, c1) = self.region
        grid = stack.reshape(rows.size, r1 - r0, self.full_scan[1])
        if c0 == 0 and c1 == self.full_scan[1]:
            return grid
        return self.xp.ascontiguousarray(grid[:, :, c0:c1])


def _region_acquisition(acq: Acquisition, scan_region: Any) -> Acquisition:
    from quantem.stem4d.io.qem.reader import parse_scan_region

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
        :class:`~quantem.stem4d.io.arina.ArinaSource` or a path to an ARINA master file
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
