"""``backend="cuda"`` loaders: ARINA HDF5 and ``.qem`` straight into GPU memory.

Both return an :class:`~quantem.acquisition.Acquisition` with ``backend="cuda"`` whose
``data`` is a CuPy array on ``device`` (or, for ``.qem`` with ``representation="encoded"``,
no dense array but a resident :class:`~quantem.cuda.encoded.EncodedPayload`). The load
options (``dtype``, ``apply_mask``, ``det_bin``) go through the one implementation of
their semantics, :func:`quantem.io.transforms.finish_frames`, run with ``xp=cupy`` per
batch of decoded frames, so results equal the cpu backend's bit for bit.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from quantem.acquisition import Acquisition
from quantem.backends import require_backend
from quantem.cuda.hdf5_pipeline import DEFAULT_BATCH_BYTES, decode_source_to_device
from quantem.cuda.qem_pipeline import DEFAULT_BATCH_BYTES as QEM_BATCH_BYTES

IDENTITY_OPTIONS = {"dtype": "native", "apply_mask": False, "det_bin": 1}


@contextmanager
def releasing_on_error() -> Iterator[None]:
    """On an exception, clear the locals of the frames it unwound through.

    A traceback keeps every frame it passed alive, with their device buffers (staging,
    scratch, half-decoded output), until the exception object is dropped; clearing the
    finished frames gives that memory back at once while keeping the traceback's lines.
    """
    try:
        yield
    except BaseException as exc:
        traceback.clear_frames(exc.__traceback__)
        raise


class FrameFinisher:
    """Applies ``finish_frames`` batch by batch into one preallocated device array.

    ``finish_frames`` acts on each frame independently (mask, narrowing, binning), so
    finishing per batch equals finishing the whole stack; integer fields of its ``info``
    (such as ``clipped_pixels``) are summed over the batches.
    """

    def __init__(self, n_frames: int, sample: Any, validity: Any, options: dict[str, Any]) -> None:
        import cupy

        from quantem.io.transforms import finish_frames

        self._finish = finish_frames
        self.validity = validity
        self.options = options
        probe, _ = finish_frames(sample, validity, xp=cupy, **options)
        self.out = cupy.empty((n_frames, *probe.shape[1:]), dtype=probe.dtype)
        self.info: dict[str, Any] = {}

    def __call__(self, start: int, stop: int, frames: Any) -> None:
        import cupy

        result, info = self._finish(frames, self.validity, xp=cupy, **self.options)
        self.out[start:stop] = result
        for key, value in info.items():
            if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
                self.info[key] = int(self.info.get(key, 0)) + int(value)
            else:
                self.info.setdefault(key, value)


def load_hdf5(
    path: str | os.PathLike,
    *,
    device: int = 0,
    dtype: str = "native",
    apply_mask: bool = False,
    det_bin: int = 1,
    scan_shape: tuple[int, int] | None = None,
    fresh_index: bool = False,
    index_dir: str | os.PathLike | None = None,
    threads: int | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    staging: str = "pread",
) -> Acquisition:
    """Load an ARINA acquisition onto GPU ``device``.

    The compressed chunks (located by the frame index) reach the device in batches and
    are decoded there (bitshuffle-LZ4, every chunk validated); options as
    :func:`quantem.io.arina.load_arina`. ``staging`` says how the bytes travel:
    ``"pread"`` (default) reads them in parallel into reused pinned buffers and copies
    those asynchronously; ``"mapped"`` page-locks the shards' page-cache pages in place
    and copies them by DMA with no CPU copy (correct, but no faster than pread on the
    H200 with 128 shards: the per-shard registration costs about what the copy it
    saves does; see ``docs/performance/results.md``). ``metadata["load_stats"]``
    records which one ran (and why mapped staging fell back, if it did).

    Raises
    ------
    ChunkDecodeError
        A chunk is corrupt; the error names the shard file and the frame.
    BackendUnavailableError
        CuPy or a CUDA device is missing.
    """
    require_backend("cuda")
    import cupy

    from quantem.cuda.staging import prestart_threads

    prestart_threads(threads)
    from quantem.io.arina import open_arina
    from quantem.io.transforms import parse_load_options

    parsed = parse_load_options(dtype, apply_mask, det_bin)
    source = open_arina(path, scan_shape=scan_shape, index_dir=index_dir, fresh_index=fresh_index)
    options = {"dtype": parsed.dtype, "apply_mask": parsed.apply_mask, "det_bin": parsed.det_bin}
    scan = tuple(int(v) for v in source.scan_shape)
    with cupy.cuda.Device(device), releasing_on_error():
        frames, stats, totals = _decode_hdf5(source, parsed, options, threads, batch_bytes, staging)
        data = frames.reshape(*scan, *frames.shape[1:])
    # The same metadata keys and values as quantem.io.arina.load_arina.
    metadata = dict(source.metadata)
    metadata.update(
        {
            "stored_dtype": np.dtype(source.dtype).name,
            "dtype": np.dtype(data.dtype).name,
            "stored_detector_shape": source.detector_shape,
            "detector_shape": tuple(int(v) for v in data.shape[-2:]),
            "load_options": dict(options),
            "clipped_pixels": int(totals["clipped_pixels"]),
            "bin_saturated_pixels": int(totals["bin_saturated_pixels"]),
            "det_bin_dropped": list(totals["det_bin_dropped"]),
        }
    )
    metadata["load_stats"] = {
        "compressed_bytes": stats.compressed_bytes,
        "batches": stats.batches,
        "read_seconds": stats.read_seconds,
        "pipeline_seconds": stats.wall_seconds,
        "staging": stats.staging,
    }
    if stats.fallback is not None:
        metadata["load_stats"]["staging_fallback"] = stats.fallback
    if stats.stages:  # the staging timeline, when profiling is on (benchmarks)
        metadata["load_stats"]["stages"] = dict(stats.stages)
    validity = _finished_validity(source.validity, options)
    return Acquisition(data, metadata, validity, backend="cuda")


def _decode_hdf5(
    source: Any, parsed: Any, options: dict, threads: Any, batch_bytes: int, staging: str
) -> tuple:
    """Decode every frame on the current device, finishing them per batch when needed."""
    import cupy

    totals: dict[str, Any] = {
        "clipped_pixels": 0,
        "bin_saturated_pixels": 0,
        "det_bin_dropped": [0, 0],
    }
    if parsed.is_identity:
        frames, stats = decode_source_to_device(
            source, threads=threads, batch_bytes=batch_bytes, staging=staging
        )
        return frames, stats, totals
    validity = cupy.asarray(source.validity)
    det = tuple(int(v) for v in source.detector_shape)
    sample = cupy.zeros((1, *det), dtype=np.dtype(source.dtype))
    finisher = FrameFinisher(int(source.n_frames), sample, validity, options)
    _, stats = decode_source_to_device(
        source, consume=finisher, threads=threads, batch_bytes=batch_bytes, staging=staging
    )
    totals.update(finisher.info)
    return finisher.out, stats, totals


def _finished_validity(validity: np.ndarray, options: dict[str, Any]) -> np.ndarray:
    """The validity mask for the loaded detector shape: a binned pixel is valid iff every
    source pixel in it is (the cpu loaders' rule)."""
    det_bin = int(options["det_bin"])
    if det_bin == 1:
        return validity
    rows, cols = validity.shape[0] // det_bin, validity.shape[1] // det_bin
    cropped = validity[: rows * det_bin, : cols * det_bin]
    return cropped.reshape(rows, det_bin, cols, det_bin).all(axis=(1, 3))


def load_qem(
    path: str | os.PathLike,
    *,
    device: int = 0,
    representation: str = "dense",
    verify: bool = True,
    scan_region: Any = None,
    dtype: str = "native",
    apply_mask: bool = False,
    det_bin: int = 1,
    threads: int | None = None,
    scan_shape: tuple[int, int] | None = None,
    batch_bytes: int = QEM_BATCH_BYTES,
) -> Acquisition:
    """Load a ``.qem`` file onto GPU ``device``.

    Parameters
    ----------
    representation
        ``"dense"`` (default): a CuPy array of the frames. ``"encoded"``: the verified
        payload stays resident on the GPU (:class:`~quantem.cuda.encoded.EncodedPayload`)
        and detector queries decode on the fly; only the default load options apply.
    verify
        Verify every block's checksum and padding (XXH3-64 on the GPU as each batch
        lands; blocks of 240 bytes or fewer on the CPU). ``False`` skips only those;
        structural and decode checks always run.
    scan_region
        ``(r0, r1, c0, c1)`` (half-open) or two slices: decode only the blocks it touches.
    dtype, apply_mask, det_bin
        As :func:`quantem.io.qem.reader.load_qem` (``dtype="source"`` widens to the
        source's dtype).
    """
    require_backend("cuda")
    import cupy

    from quantem.cuda.staging import prestart_threads

    prestart_threads(threads)
    from quantem.cuda.encoded import EncodedPayload
    from quantem.cuda.qem_pipeline import block_extents
    from quantem.errors import QemFormatError
    from quantem.io.qem.reader import QemFile, acquisition_metadata
    from quantem.io.transforms import parse_load_options

    if representation not in ("dense", "encoded"):
        raise ValueError(f"representation must be 'dense' or 'encoded', got {representation!r}")
    qem = QemFile(path, verify=False)  # structure checked here; block checksums below
    try:
        if scan_shape is not None and tuple(scan_shape) != tuple(qem.scan_shape):
            raise QemFormatError(
                qem.path,
                f"scan_shape {tuple(scan_shape)} differs from the stored {qem.scan_shape}",
                section="header",
            )
        requested = dtype
        if dtype == "source":
            dtype = qem.header.source_dtype.name
        parsed = parse_load_options(dtype, apply_mask, det_bin)
        options = {
            "dtype": parsed.dtype,
            "apply_mask": parsed.apply_mask,
            "det_bin": parsed.det_bin,
        }
        with cupy.cuda.Device(device), releasing_on_error():
            if representation == "encoded":
                identity = requested == "native" and not apply_mask and int(det_bin) == 1
                if scan_region is not None or not identity:
                    raise ValueError(
                        "representation='encoded' keeps the stored counts: it takes no "
                        "scan_region, dtype, apply_mask or det_bin (load 'dense' for those)"
                    )
                payload = EncodedPayload(
                    qem, verify=verify, threads=threads, batch_bytes=batch_bytes
                )
                metadata = acquisition_metadata(qem, qem.scan_shape, qem.dtype)
                metadata["resident_bytes"] = payload.nbytes
                return Acquisition(
                    None,
                    metadata,
                    qem.validity,
                    "cuda",
                    encoded=payload,
                    representation="encoded",
                    on_close=[payload.close],
                )
            data, info, block_ids, region, stats = _decode_qem_dense(
                qem, scan_region, parsed, options, verify, threads, batch_bytes
            )
            shape = tuple(int(v) for v in data.shape[:2])
        # The same metadata keys and values as quantem.io.qem.reader.load_qem.
        metadata = acquisition_metadata(qem, shape, data.dtype)
        _, extents = block_extents(qem.block_index)
        metadata.update(
            {
                "detector_shape": tuple(int(v) for v in data.shape[-2:]),
                "load_options": dict(options),
                "clipped_pixels": int(info["clipped_pixels"]),
                "bin_saturated_pixels": int(info["bin_saturated_pixels"]),
                "det_bin_dropped": list(info["det_bin_dropped"]),
                "compressed_bytes": int(extents[block_ids].sum()),
            }
        )
        if region is not None:
            metadata["scan_region"] = [region[0][0], region[0][1], region[1][0], region[1][1]]
        metadata["load_stats"] = {
            "payload_bytes": stats.copied_bytes,
            "batches": stats.batches,
            "read_seconds": stats.read_seconds,
            "pipeline_seconds": stats.wall_seconds,
        }
        validity = _finished_validity(qem.validity, options)
        return Acquisition(data, metadata, validity, backend="cuda")
    finally:
        qem.close()


def _decode_qem_dense(
    qem: Any,
    scan_region: Any,
    parsed: Any,
    options: dict,
    verify: bool,
    threads: Any,
    batch_bytes: int,
) -> tuple:
    """Decode the blocks a dense load needs on the current device and finish the frames."""
    import cupy

    from quantem.cuda.qem_pipeline import block_extents, plan_stage, stage_blocks
    from quantem.cuda.rans_decode import DeviceBlockTable, QemBlockDecoder, raise_block_error
    from quantem.io.qem.reader import parse_scan_region
    from quantem.io.transforms import finish_frames

    decoder = QemBlockDecoder(qem)
    det = tuple(int(v) for v in qem.detector_shape)
    bf = int(qem.block_frames)
    index = qem.block_index
    if scan_region is None:
        shape = tuple(int(v) for v in qem.scan_shape)
        block_ids = np.arange(qem.n_blocks, dtype=np.int64)
        out_frames = index["frame_start"].astype(np.int64)
        dense = cupy.empty((qem.n_frames, *det), dtype=qem.dtype)
        region = None
    else:
        rows, cols = parse_scan_region(scan_region, qem.scan_shape)
        shape = (rows[1] - rows[0], cols[1] - cols[0])
        scan_c = int(qem.scan_shape[1])
        frames = (
            np.arange(rows[0], rows[1])[:, None] * scan_c + np.arange(cols[0], cols[1])[None, :]
        ).reshape(-1)
        block_ids = qem.blocks_for_frames(frames)
        out_frames = np.arange(block_ids.size, dtype=np.int64) * bf
        dense = cupy.empty((block_ids.size * bf, *det), dtype=qem.dtype)
        region = (rows, cols, frames)
    status = cupy.zeros(block_ids.size, dtype=cupy.int32)
    # The block table of every batch, uploaded once before the transfer (sliced per batch:
    # no host-to-device uploads between the batches' launches).
    _, extents = block_extents(index)
    _, buffer_starts = plan_stage(block_ids, extents, batch_bytes)
    table = DeviceBlockTable.from_index(index[block_ids], buffer_starts, out_frames)
    cupy.cuda.Stream.null.synchronize()

    def launch(i: int, a: int, b: int, device_bytes: Any, starts: np.ndarray, stream: Any) -> None:
        decoder.decode_dense(device_bytes, table.slice(a, b), dense, status[a:b], stream=stream)

    stats = stage_blocks(
        qem, block_ids, launch, verify=verify, threads=threads, batch_bytes=batch_bytes
    )
    if int(status.max()) != 0:
        raise_block_error(cupy.asnumpy(status), block_ids, qem.path)
    if region is None:
        frames_out = dense
    else:
        rows, cols, frames = region
        position = np.full(qem.n_blocks, -1, dtype=np.int64)
        position[block_ids] = np.arange(block_ids.size) * bf
        gather = position[frames // bf] + frames % bf
        frames_out = dense[cupy.asarray(gather)]
        del dense
    info = {"clipped_pixels": 0, "bin_saturated_pixels": 0, "det_bin_dropped": [0, 0]}
    if not parsed.is_identity:
        validity_dev = cupy.asarray(qem.validity)
        frames_out, info = finish_frames(frames_out, validity_dev, xp=cupy, **options)
    data = frames_out.reshape(*shape, *frames_out.shape[1:])
    return data, info, block_ids, region, stats
