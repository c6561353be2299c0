"""Synthetic ARINA acquisitions: plausible, deterministic counting data in the real layout.

The model is a convergent-beam 4D-STEM experiment over a thin sample:

* a bright-field (BF) disk of radius ``0.12 * min(det)`` pixels with an anti-aliased edge,
  shifted at each probe position by the gradient of a smooth sample potential (so centre
  of mass / DPC images show structure) and dimmed by the sample's absorption;
* dark-field (DF) scattering outside the disk whose strength grows with the potential and
  falls off with scattering angle as ``(1 + (q / (2 r_bf))^2)^-1.5``;
* Poisson counting noise around the expected pattern, whose total is ``dose`` counts per
  probe position (frame);
* a few dead pixels carrying the dtype's maximum value, flagged in ``pixel_mask``.

Every frame is drawn from its own random stream ``default_rng([seed, frame])``, so
:func:`make_frames` returns exactly the same counts for a frame whatever range, shard
layout or process count produced it; tests build their expected arrays with it.

:func:`write_synthetic_arina` writes the frames with the bitshuffle library's LZ4 codec
straight into HDF5 chunks (``write_direct_chunk``) under the bitshuffle filter's header,
so h5py + hdf5plugin read them back like detector output.
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from quantem.stem4d.io import arina_layout as layout

#: Mean detected counts per frame (probe position) by default. At this dose a
#: 192x192 uint16 frame compresses about 6:1 with bitshuffle-LZ4 (see docs/arina.md).
DEFAULT_DOSE = 40000.0
DEFAULT_DEAD_PIXELS = 4
DEFAULT_FRAMES_PER_SHARD = 10000
BF_RADIUS_FRACTION = 0.12
BF_FRACTION = 0.3  # share of the dose in the BF disk where the sample is empty
DF_WIDTH = 2.0  # DF falloff scale, in BF radii
DF_POWER = 1.5
MAX_SHIFT_FRACTION = 0.08  # largest disk shift, as a fraction of the BF radius
DEAD_PIXEL_STREAM = 0xDEAD
SAMPLE_STREAM = 0x5A3


@dataclass(frozen=True)
class SyntheticModel:
    """Parameters of a synthetic acquisition; frames depend on nothing else."""

    scan_shape: tuple[int, int] = (16, 16)
    detector_shape: tuple[int, int] = (64, 64)
    dtype: str = "uint16"
    dose: float = DEFAULT_DOSE
    seed: int = 0
    dead_pixels: int | Sequence[tuple[int, int]] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "scan_shape", _parse_shape(self.scan_shape, "scan_shape"))
        object.__setattr__(
            self, "detector_shape", _parse_shape(self.detector_shape, "detector_shape")
        )
        dtype = np.dtype(self.dtype)
        if dtype.name not in layout.SUPPORTED_DTYPES:
            from quantem.stem4d.errors import UnsupportedDtypeError

            raise UnsupportedDtypeError(
                f"synthetic data dtype {dtype.name!r} is not one of {layout.SUPPORTED_DTYPES}"
            )
        object.__setattr__(self, "dtype", dtype.name)
        if not (np.isfinite(self.dose) and self.dose >= 0):
            raise ValueError(f"dose must be a finite number >= 0, got {self.dose!r}")
        if isinstance(self.seed, bool) or int(self.seed) != self.seed or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")

    @property
    def n_frames(self) -> int:
        return self.scan_shape[0] * self.scan_shape[1]

    @property
    def saturation_value(self) -> int:
        """Largest count a pixel reports; the dtype's maximum marks dead pixels."""
        return int(np.iinfo(self.dtype).max) - 1

    @cached_property
    def dead_pixel_coords(self) -> np.ndarray:
        """(k, 2) int array of dead pixel (row, column), sorted, unique."""
        det_r, det_c = self.detector_shape
        if self.dead_pixels is None or isinstance(self.dead_pixels, (int, np.integer)):
            if self.dead_pixels is None:
                count = min(DEFAULT_DEAD_PIXELS, det_r * det_c // 16)
            else:
                count = int(self.dead_pixels)
            if not 0 <= count <= det_r * det_c:
                raise ValueError(f"dead_pixels must be in [0, {det_r * det_c}], got {count}")
            rng = np.random.default_rng([self.seed, DEAD_PIXEL_STREAM])
            flat = np.sort(rng.choice(det_r * det_c, size=count, replace=False))
            return np.stack([flat // det_c, flat % det_c], axis=1).astype(np.int64)
        coords = np.asarray(self.dead_pixels, dtype=np.int64).reshape(-1, 2)
        if coords.size and (
            coords.min() < 0 or (coords[:, 0] >= det_r).any() or (coords[:, 1] >= det_c).any()
        ):
            raise ValueError(f"dead pixel outside the {det_r}x{det_c} detector")
        return np.unique(coords, axis=0)

    @cached_property
    def pixel_mask(self) -> np.ndarray:
        mask = np.zeros(self.detector_shape, dtype=np.uint32)
        coords = self.dead_pixel_coords
        mask[coords[:, 0], coords[:, 1]] = layout.PIXEL_MASK_DEAD
        return mask

    @cached_property
    def _sample(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per scan position: potential in [0, 1], and disk shift (rows, cols) in pixels."""
        scan_r, scan_c = self.scan_shape
        rng = np.random.default_rng([self.seed, SAMPLE_STREAM])
        n_blobs = 12
        centres = rng.uniform(0.0, 1.0, size=(n_blobs, 2))
        widths = rng.uniform(0.04, 0.15, size=n_blobs)
        heights = rng.uniform(0.3, 1.0, size=n_blobs)
        # Positions in units of the longer scan side, so non-square scans are not stretched.
        side = max(scan_r, scan_c)
        u = (np.arange(scan_r)[:, None] + 0.5) / side
        v = (np.arange(scan_c)[None, :] + 0.5) / side
        potential = np.zeros(self.scan_shape)
        grad_u = np.zeros(self.scan_shape)
        grad_v = np.zeros(self.scan_shape)
        for (cu, cv), w, h in zip(centres, widths, heights):
            g = h * np.exp(-((u - cu) ** 2 + (v - cv) ** 2) / (2 * w * w))
            potential += g
            grad_u += -g * (u - cu) / (w * w)
            grad_v += -g * (v - cv) / (w * w)
        # A weak lattice, so images show periodic contrast as well as particles.
        potential += 0.15 * (1 + np.cos(2 * np.pi * 9 * u) * np.cos(2 * np.pi * 9 * v))
        potential /= max(float(potential.max()), 1e-12)
        gmax = max(float(np.abs(grad_u).max()), float(np.abs(grad_v).max()), 1e-12)
        max_shift = MAX_SHIFT_FRACTION * self.bf_radius
        return potential, grad_u / gmax * max_shift, grad_v / gmax * max_shift

    @property
    def bf_radius(self) -> float:
        return BF_RADIUS_FRACTION * min(self.detector_shape)

    @property
    def bf_center(self) -> tuple[float, float]:
        det_r, det_c = self.detector_shape
        return (det_r - 1) / 2 + 0.3, (det_c - 1) / 2 - 0.2

    def expected_frame(self, frame: int) -> np.ndarray:
        """The noise-free mean counts (float64) of one frame."""
        det_r, det_c = self.detector_shape
        potential, shift_r, shift_c = self._sample
        r, c = divmod(int(frame), self.scan_shape[1])
        cr, cc = self.bf_center
        rows = np.arange(det_r, dtype=np.float64)[:, None] - (cr + shift_r[r, c])
        cols = np.arange(det_c, dtype=np.float64)[None, :] - (cc + shift_c[r, c])
        distance = np.sqrt(rows * rows + cols * cols)
        radius = self.bf_radius
        disk = np.clip(radius + 0.5 - distance, 0.0, 1.0)
        falloff = (1.0 + (distance / (DF_WIDTH * radius)) ** 2) ** -DF_POWER * (1.0 - disk)
        transmission = np.exp(-0.6 * potential[r, c])
        bf_share = BF_FRACTION * transmission
        return self.dose * (
            bf_share * disk / disk.sum() + (1.0 - bf_share) * falloff / falloff.sum()
        )

    def make_frames(self, start: int, stop: int) -> np.ndarray:
        """Frames ``[start, stop)`` as an array ``(n, det_r, det_c)`` of ``dtype``."""
        if not 0 <= start <= stop <= self.n_frames:
            raise ValueError(f"frame range [{start}, {stop}) outside [0, {self.n_frames})")
        out = np.empty((stop - start, *self.detector_shape), dtype=self.dtype)
        coords = self.dead_pixel_coords
        dead_value = np.iinfo(self.dtype).max
        for i, frame in enumerate(range(start, stop)):
            rng = np.random.default_rng([self.seed, frame])
            counts = rng.poisson(self.expected_frame(frame))
            np.minimum(counts, self.saturation_value, out=counts)
            out[i] = counts
            out[i, coords[:, 0], coords[:, 1]] = dead_value
        return out


def _parse_shape(shape: Any, what: str) -> tuple[int, int]:
    try:
        parsed = tuple(int(n) for n in shape)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be two positive integers, got {shape!r}") from None
    if len(parsed) != 2 or min(parsed) < 1:
        raise ValueError(f"{what} must be two positive integers, got {shape!r}")
    return parsed  # type: ignore[return-value]


def make_frames(
    start: int,
    stop: int,
    *,
    scan_shape: tuple[int, int] = (16, 16),
    detector_shape: tuple[int, int] = (64, 64),
    dtype: str = "uint16",
    dose: float = DEFAULT_DOSE,
    seed: int = 0,
    dead_pixels: int | Sequence[tuple[int, int]] | None = None,
) -> np.ndarray:
    """Frames ``[start, stop)`` of the synthetic acquisition these parameters describe.

    Equal to what :func:`write_synthetic_arina` writes with the same parameters, computed
    without any file, so tests can compare a load against an independent expectation.
    """
    model = SyntheticModel(scan_shape, detector_shape, dtype, dose, seed, dead_pixels)
    return model.make_frames(start, stop)


def encode_chunk(frame: np.ndarray) -> bytes:
    """One frame as the HDF5 bitshuffle filter (LZ4 mode) stores it: header + blocks."""
    import bitshuffle

    frame = np.ascontiguousarray(frame)
    block_elements = layout.default_block_elements(frame.itemsize)
    header = struct.pack(">QI", frame.nbytes, block_elements * frame.itemsize)
    return header + bitshuffle.compress_lz4(frame, block_elements).tobytes()


def _write_shard(
    model: SyntheticModel,
    path: str,
    start: int,
    stop: int,
    progress_queue: Any = None,
) -> int:
    """Write frames [start, stop) as one shard file; returns the compressed byte count."""
    import h5py
    import hdf5plugin

    det_r, det_c = model.detector_shape
    compressed = 0
    step = 64
    with h5py.File(path, "w") as f:
        dset = f.create_dataset(
            layout.SHARD_DATASET,
            shape=(stop - start, det_r, det_c),
            dtype=model.dtype,
            chunks=(1, det_r, det_c),
            **hdf5plugin.Bitshuffle(nelems=0, cname="lz4"),
        )
        dset.attrs["image_nr_low"] = np.uint64(start + 1)
        dset.attrs["image_nr_high"] = np.uint64(stop)
        for batch_start in range(start, stop, step):
            batch_stop = min(batch_start + step, stop)
            frames = model.make_frames(batch_start, batch_stop)
            for i, frame in enumerate(frames):
                chunk = encode_chunk(frame)
                compressed += len(chunk)
                dset.id.write_direct_chunk((batch_start - start + i, 0, 0), chunk)
            if progress_queue is not None:
                progress_queue.put(batch_stop - batch_start)
    return compressed


def _write_master(
    model: SyntheticModel,
    path: Path,
    shard_names: list[str],
    frames_per_shard: int,
    scan_shape_attr: bool,
) -> None:
    import h5py

    det_r, det_c = model.detector_shape
    with h5py.File(path, "w") as f:
        entry = f.require_group("/entry")
        entry.attrs["NX_class"] = "NXentry"
        data = f.require_group(layout.DATA_GROUP)
        if scan_shape_attr:
            data.attrs[layout.SCAN_SHAPE_ATTR] = np.asarray(model.scan_shape, dtype=np.int64)
        for index, shard_name in enumerate(shard_names, start=layout.SHARD_FIRST_INDEX):
            data[layout.shard_link_name(index)] = h5py.ExternalLink(
                shard_name, layout.SHARD_DATASET
            )
        det = f.require_group(layout.DETECTOR_GROUP)
        det[layout.DESCRIPTION] = np.bytes_(b"Dectris ARINA Si (quantem synthetic)")
        det[layout.BIT_DEPTH_IMAGE] = np.uint32(np.dtype(model.dtype).itemsize * 8)
        det[layout.SATURATION_VALUE] = np.uint32(min(model.saturation_value, 2**32 - 1))
        for name, value, unit in (
            (layout.X_PIXEL_SIZE, 100e-6, "m"),
            (layout.Y_PIXEL_SIZE, 100e-6, "m"),
            (layout.DETECTOR_DISTANCE, 0.1, "m"),
            (layout.COUNT_TIME, 9.5e-6, "s"),
            (layout.FRAME_TIME, 1e-5, "s"),
        ):
            det[name] = np.float64(value)
            det[name].attrs["units"] = unit
        spec = f.require_group(layout.DETECTOR_SPECIFIC_GROUP)
        spec[layout.NTRIGGER] = np.uint64(model.n_frames)
        spec[layout.NIMAGES] = np.uint64(1)
        spec[layout.X_PIXELS] = np.uint32(det_c)
        spec[layout.Y_PIXELS] = np.uint32(det_r)
        spec.create_dataset(layout.PIXEL_MASK, data=model.pixel_mask)


def _use_progress(progress: bool | None) -> bool:
    if progress is None:
        return sys.stderr.isatty()
    return bool(progress)


def write_synthetic_arina(
    out_dir: str | os.PathLike,
    name: str = "synthetic",
    scan_shape: tuple[int, int] = (16, 16),
    detector_shape: tuple[int, int] = (64, 64),
    dtype: str = "uint16",
    frames_per_shard: int = DEFAULT_FRAMES_PER_SHARD,
    dose: float = DEFAULT_DOSE,
    seed: int = 0,
    dead_pixels: int | Sequence[tuple[int, int]] | None = None,
    scan_shape_attr: bool = True,
    processes: int | None = None,
    progress: bool | None = None,
    overwrite: bool = False,
) -> Path:
    """Write a synthetic ARINA acquisition and return its master path.

    Parameters
    ----------
    out_dir
        Folder to write ``<name>_master.h5`` and ``<name>_data_NNNNNN.h5`` into (created).
    scan_shape, detector_shape
        ``(rows, columns)``; any positive sizes, non-square included.
    dtype
        ``"uint8"``, ``"uint16"`` or ``"uint32"`` as stored.
    frames_per_shard
        Frames per data file; the last shard holds the remainder.
    dose
        Mean detected counts per frame.
    seed
        Everything written depends only on the parameters and this seed.
    dead_pixels
        Number of dead pixels placed by the seed, or explicit ``(row, col)`` pairs;
        default ``min(4, det_r * det_c // 16)``.
    scan_shape_attr
        Write the ``scan_shape`` attribute on ``/entry/data`` (without it the reader
        needs a square frame count or an explicit scan shape).
    processes
        Worker processes, one shard at a time each; default: ``os.cpu_count()``, capped
        at the number of shards. ``1`` writes in this process. Workers are *spawned*
        (HDF5 state forked from a parent that used it can deadlock), so a script that
        asks for more than one must guard its entry point with
        ``if __name__ == "__main__":``.
    progress
        Show a rich progress bar; default: only when stderr is a terminal.
    overwrite
        Replace an existing acquisition of the same name; otherwise refuse.

    Files are written under temporary names and renamed when all are complete, so a
    failure never leaves a master that links partial shards.
    """
    model = SyntheticModel(scan_shape, detector_shape, dtype, dose, seed, dead_pixels)
    return _write_acquisition(
        model, out_dir, name, frames_per_shard, scan_shape_attr, processes, progress, overwrite
    )


@dataclass(frozen=True)
class FramesModel:
    """Given frames in the role of a :class:`SyntheticModel`, for :func:`write_arina_frames`."""

    frames: np.ndarray  # (scan_r, scan_c, det_r, det_c)
    pixel_mask: np.ndarray

    @property
    def scan_shape(self) -> tuple[int, int]:
        return tuple(int(v) for v in self.frames.shape[:2])  # type: ignore[return-value]

    @property
    def detector_shape(self) -> tuple[int, int]:
        return tuple(int(v) for v in self.frames.shape[2:])  # type: ignore[return-value]

    @property
    def dtype(self) -> str:
        return self.frames.dtype.name

    @property
    def n_frames(self) -> int:
        return self.scan_shape[0] * self.scan_shape[1]

    @property
    def saturation_value(self) -> int:
        return int(np.iinfo(self.dtype).max) - 1

    def make_frames(self, start: int, stop: int) -> np.ndarray:
        return self.frames.reshape(self.n_frames, *self.detector_shape)[start:stop]


def write_arina_frames(
    out_dir: str | os.PathLike,
    name: str,
    frames: np.ndarray,
    *,
    pixel_mask: np.ndarray | None = None,
    frames_per_shard: int = DEFAULT_FRAMES_PER_SHARD,
    overwrite: bool = False,
) -> Path:
    """Write given frames ``(scan_r, scan_c, det_r, det_c)`` as an ARINA acquisition.

    The same layout, codec and atomic rename as :func:`write_synthetic_arina` (for data
    made elsewhere, e.g. a simulation). ``pixel_mask`` (uint32, Dectris bits; default all
    valid) flags invalid pixels. Returns the master path.
    """
    frames = np.ascontiguousarray(frames)
    if frames.ndim != 4:
        raise ValueError(f"frames must be 4D (scan_r, scan_c, det_r, det_c), got {frames.shape}")
    if frames.dtype.name not in layout.SUPPORTED_DTYPES:
        from quantem.stem4d.errors import UnsupportedDtypeError

        raise UnsupportedDtypeError(
            f"frames dtype {frames.dtype.name!r} is not one of {layout.SUPPORTED_DTYPES}"
        )
    if pixel_mask is None:
        pixel_mask = np.zeros(frames.shape[2:], dtype=np.uint32)
    pixel_mask = np.ascontiguousarray(pixel_mask, dtype=np.uint32)
    if pixel_mask.shape != frames.shape[2:]:
        raise ValueError(
            f"pixel_mask has shape {pixel_mask.shape}, the detector is {frames.shape[2:]}"
        )
    model = FramesModel(frames, pixel_mask)
    return _write_acquisition(model, out_dir, name, frames_per_shard, True, 1, False, overwrite)


def _write_acquisition(
    model: Any,
    out_dir: str | os.PathLike,
    name: str,
    frames_per_shard: int,
    scan_shape_attr: bool,
    processes: int | None,
    progress: bool | None,
    overwrite: bool,
) -> Path:
    if int(frames_per_shard) != frames_per_shard or frames_per_shard < 1:
        raise ValueError(f"frames_per_shard must be a positive integer, got {frames_per_shard!r}")
    if not name or os.sep in name or name.startswith("."):
        raise ValueError(f"name must be a plain file-name prefix, got {name!r}")
    frames_per_shard = int(frames_per_shard)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    master = out / f"{name}{layout.MASTER_SUFFIX}"
    if master.exists() and not overwrite:
        raise FileExistsError(f"{master}: already exists (pass overwrite=True to replace it)")

    ranges = [
        (start, min(start + frames_per_shard, model.n_frames))
        for start in range(0, model.n_frames, frames_per_shard)
    ]
    shard_names = [
        layout.shard_file_name(name, i)
        for i in range(layout.SHARD_FIRST_INDEX, layout.SHARD_FIRST_INDEX + len(ranges))
    ]
    tag = f".tmp-{os.getpid()}"
    temp_paths = [out / f".{shard}{tag}" for shard in shard_names]
    temp_master = out / f".{master.name}{tag}"
    workers = min(processes or os.cpu_count() or 1, len(ranges))
    try:
        _run_shards(model, ranges, temp_paths, workers, _use_progress(progress))
        _write_master(model, temp_master, shard_names, frames_per_shard, scan_shape_attr)
        for temp, shard in zip(temp_paths, shard_names):
            os.replace(temp, out / shard)
        os.replace(temp_master, master)
    finally:
        for temp in [*temp_paths, temp_master]:
            if temp.exists():
                temp.unlink()
    return master


def _spawn_context() -> Any:
    """Fresh worker interpreters: HDF5 state forked from a parent that used it can deadlock."""
    import multiprocessing

    return multiprocessing.get_context("spawn")


@contextlib.contextmanager
def _one_openmp_thread_per_worker() -> Iterator[None]:
    """Spawned workers inherit ``OMP_NUM_THREADS=1`` (the parent's value is restored after).

    bitshuffle's C library opens an OpenMP region on every call; with one worker per core
    each of them would start a thread per core, and the oversubscription made one 192x192
    frame cost about 18 ms instead of 0.07 ms on a 16-core machine. OpenMP reads the variable
    when the library loads, so it must be in the environment the workers are spawned with.
    """
    previous = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = previous


def _run_shards(
    model: SyntheticModel,
    ranges: list[tuple[int, int]],
    paths: list[Path],
    workers: int,
    show_progress: bool,
) -> None:
    if not show_progress:
        if workers <= 1:
            for (start, stop), path in zip(ranges, paths):
                _write_shard(model, str(path), start, stop)
            return
        with (
            _one_openmp_thread_per_worker(),
            ProcessPoolExecutor(workers, mp_context=_spawn_context()) as pool,
        ):
            futures = [
                pool.submit(_write_shard, model, str(path), start, stop)
                for (start, stop), path in zip(ranges, paths)
            ]
            for future in futures:
                future.result()
        return

    import queue

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, transient=False) as bar:
        task = bar.add_task("writing frames", total=model.n_frames)
        if workers <= 1:
            local: queue.SimpleQueue[int] = queue.SimpleQueue()
            for (start, stop), path in zip(ranges, paths):
                _write_shard(model, str(path), start, stop, local)
                while not local.empty():
                    bar.advance(task, local.get())
            return
        context = _spawn_context()
        with (
            _one_openmp_thread_per_worker(),
            context.Manager() as manager,
            ProcessPoolExecutor(workers, mp_context=context) as pool,
        ):
            updates = manager.Queue()
            futures = [
                pool.submit(_write_shard, model, str(path), start, stop, updates)
                for (start, stop), path in zip(ranges, paths)
            ]
            while not all(f.done() for f in futures):
                with contextlib.suppress(queue.Empty):
                    bar.advance(task, updates.get(timeout=0.2))
            for future in futures:
                future.result()
            while not updates.empty():
                bar.advance(task, updates.get())
