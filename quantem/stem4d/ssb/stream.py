"""Scan-row blocks of a 4D source, for preparing SSB without the whole 4D array in memory.

The scan Fourier transform needs every scan position of a detector pixel, so what can be
streamed is the step before it: reading the frames (on the CPU, or on a GPU with
``backend="cuda"``: the blocks are CuPy arrays and everything kept lives on the device).
:func:`quantem.stem4d.ssb.prepare` in streaming mode reads the source one block of scan rows at a time and keeps only what SSB
uses of each frame, the (binned) bright-field-disk pixels, as ``(n_scan, n_pixels)`` floats;
the mean pattern (for the BF disk) and the centre of mass (for the DPC rotation estimate)
are reduced in the same way. A block source is anything :func:`open_scan_rows` accepts:

* an array-like with a 4D ``shape`` whose ``[r0:r1]`` reads those scan rows (a numpy
  array or memmap, an ``h5py.Dataset``, a zarr array);
* a path to an ARINA master file or an open :class:`~quantem.stem4d.io.arina.ArinaSource`: the
  rows are decoded on the CPU and finished as :func:`quantem.stem4d.io.load` finishes them
  (invalid pixels read 0), so a streamed file gives the same numbers as a loaded one.

With ``backend="cuda"`` an ARINA source is decoded on the GPU (the CUDA HDF5 pipeline of
:mod:`quantem.stem4d.cuda.hdf5_pipeline`, every chunk validated, invalid pixels set to 0 as
``load(..., backend="cuda")`` sets them), and any other array-like is read on the CPU and
copied block by block.

Every reduction here is per frame or an exact integer sum, so for integer counts the
streamed products equal the in-memory ones bit for bit.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from quantem.stem4d.detector.session import CenterOfMass
from quantem.stem4d.io.arina import ArinaSource, iter_frame_batches, open_arina
from quantem.stem4d.io.transforms import finish_frames
from quantem.stem4d.ssb.rotation import center_of_mass as block_center_of_mass


class ScanRows:
    """A 4D source read in blocks of scan rows (see :func:`open_scan_rows`)."""

    shape: tuple[int, int, int, int]
    dtype: np.dtype
    name: str
    #: The array module of the blocks :meth:`read` returns (numpy, or cupy on a GPU).
    xp: Any = np

    def read(self, r0: int, r1: int) -> np.ndarray:
        """Scan rows ``r0:r1``: a numpy array ``(r1 - r0, scan_c, det_r, det_c)``."""
        raise NotImplementedError


class ArrayRows(ScanRows):
    """Rows of an array-like (numpy, memmap, h5py, zarr): ``array[r0:r1]``."""

    def __init__(self, array: Any) -> None:
        shape = tuple(int(v) for v in getattr(array, "shape", ()))
        if len(shape) != 4:
            raise ValueError(
                f"SSB needs 4D data (scan_r, scan_c, det_r, det_c), got {shape or type(array)}"
            )
        self.array = array
        self.shape = shape  # type: ignore[assignment]
        self.dtype = np.dtype(array.dtype)
        self.name = type(array).__name__

    def read(self, r0: int, r1: int) -> np.ndarray:
        return np.ascontiguousarray(np.asarray(self.array[r0:r1]))


class ArinaRows(ScanRows):
    """Rows of an ARINA acquisition, decoded on the CPU, invalid pixels set to 0."""

    def __init__(self, source: Any) -> None:
        if not isinstance(source, ArinaSource):
            source = open_arina(source)
        self.source = source
        scan_r, scan_c = (int(v) for v in source.scan_shape)
        det_r, det_c = (int(v) for v in source.detector_shape)
        self.shape = (scan_r, scan_c, det_r, det_c)
        self.dtype = np.dtype(source.dtype)
        self.name = str(source.master_path)

    def read(self, r0: int, r1: int) -> np.ndarray:
        scan_c = self.shape[1]
        out = np.empty((r1 - r0, scan_c, *self.shape[2:]), dtype=self.dtype)
        flat = out.reshape(-1, *self.shape[2:])
        n = (r1 - r0) * scan_c
        for first, frames in iter_frame_batches(
            self.source, n, start=r0 * scan_c, stop=r1 * scan_c
        ):
            finished, _ = finish_frames(frames, self.source.validity)
            offset = first - r0 * scan_c
            flat[offset : offset + len(finished)] = finished
        return out


class CudaArinaRows(ArinaRows):
    """Rows of an ARINA acquisition decoded on the current GPU (CuPy blocks), invalid
    pixels set to 0."""

    def __init__(self, source: Any) -> None:
        import cupy

        from quantem.stem4d.io.transforms import LoadOptions

        super().__init__(source)
        self.xp = cupy
        self._options = LoadOptions.parse("native", True, 1)
        self._validity = cupy.asarray(np.asarray(self.source.validity, dtype=bool))

    def read(self, r0: int, r1: int) -> Any:
        from quantem.stem4d.cuda.hdf5_pipeline import decode_source_to_device

        scan_c = self.shape[1]
        frames, _ = decode_source_to_device(self.source, frame_range=(r0 * scan_c, r1 * scan_c))
        frames, _ = self._options.finish(frames, self._validity, self.xp, overwrite=True)
        return frames.reshape(r1 - r0, scan_c, *self.shape[2:])


class DeviceRows(ScanRows):
    """Rows of a CPU :class:`ScanRows`, copied to the current GPU block by block."""

    def __init__(self, rows: ScanRows) -> None:
        import cupy

        self.rows = rows
        self.shape, self.dtype, self.name = rows.shape, rows.dtype, rows.name
        self.xp = cupy

    def read(self, r0: int, r1: int) -> Any:
        return self.xp.asarray(self.rows.read(r0, r1))


def open_scan_rows(source: Any, backend: str = "cpu") -> ScanRows:
    """A :class:`ScanRows` over ``source`` (see the module docstring) whose blocks live on
    ``backend`` (``"cpu"``: numpy; ``"cuda"``: CuPy on the current GPU)."""
    if backend not in ("cpu", "cuda"):
        raise ValueError(f"backend must be 'cpu' or 'cuda', not {backend!r}")
    if isinstance(source, ScanRows):
        if (source.xp is np) != (backend == "cpu"):
            raise ValueError(f"these scan rows are read on the other device, not {backend!r}")
        return source
    if type(source).__module__.split(".")[0] == "cupy":
        raise ValueError(
            "CuPy data are already resident on the GPU: call prepare without "
            "memory_budget_bytes / scan_block_rows"
        )
    if isinstance(source, (str, os.PathLike, ArinaSource)):
        return CudaArinaRows(source) if backend == "cuda" else ArinaRows(source)
    rows = ArrayRows(source)
    return DeviceRows(rows) if backend == "cuda" else rows


def iter_row_blocks(
    rows: ScanRows, rows_per_block: int, region: tuple[int, int, int, int]
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(first region row, block (n, region cols, det_r, det_c))`` over ``region``."""
    r0, r1, c0, c1 = region
    full_cols = c0 == 0 and c1 == rows.shape[1]
    for start in range(r0, r1, rows_per_block):
        stop = min(start + rows_per_block, r1)
        block = rows.read(start, stop)
        if not full_cols:
            block = rows.xp.ascontiguousarray(block[:, c0:c1])
        yield start - r0, block


def mean_pattern(
    rows: ScanRows, rows_per_block: int, region: tuple[int, int, int, int]
) -> np.ndarray:
    """The mean frame (float64) over ``region``, block by block.

    Integer counts are summed exactly (uint64) and divided once, which is the number
    ``frames.mean(axis=0, dtype=float64)`` gives in memory (its float64 partial sums of
    integers below 2**53 are exact); float data are summed block by block (rounding may
    differ from the in-memory mean in the last bits).
    """
    r0, r1, c0, c1 = region
    integer = rows.dtype.kind in "ui"
    total = rows.xp.zeros(rows.shape[2:], dtype=np.uint64 if integer else np.float64)
    for _, block in iter_row_blocks(rows, rows_per_block, region):
        flat = block.reshape(-1, *block.shape[2:])
        total += flat.sum(axis=0, dtype=total.dtype)
    if rows.xp is not np:
        total = total.get()
    return total.astype(np.float64) / ((r1 - r0) * (c1 - c0))


def center_of_mass(rows: ScanRows, rows_per_block: int, region: tuple[int, int, int, int]) -> Any:
    """The exact per-frame CoM (detector px) over ``region``, block by block: each block's
    CoM by :func:`quantem.stem4d.ssb.rotation.center_of_mass` (quantem.stem4d.detector's integer moments
    on the blocks' backend), a per-frame product, so the same bits as in memory."""
    r0, r1, c0, c1 = region
    fields = [rows.xp.empty((r1 - r0, c1 - c0), dtype=np.float64) for _ in range(2)]
    for row, block in iter_row_blocks(rows, rows_per_block, region):
        for out, value in zip(fields, block_center_of_mass(block)):
            out[row : row + len(block)] = value
    return CenterOfMass(*fields)


__all__ = [
    "ArinaRows",
    "ArrayRows",
    "CudaArinaRows",
    "DeviceRows",
    "ScanRows",
    "center_of_mass",
    "iter_row_blocks",
    "mean_pattern",
    "open_scan_rows",
]
