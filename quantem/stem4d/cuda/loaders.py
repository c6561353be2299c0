"""``backend="cuda"`` loaders: ARINA HDF5 and ``.qem`` straight into GPU memory.

Both return an :class:`~quantem.stem4d.acquisition.Acquisition` with ``backend="cuda"`` whose
``data`` is a CuPy array on ``device`` (or, for ``.qem`` with ``representation="encoded"``,
no dense array but a resident :class:`~quantem.stem4d.cuda.encoded.EncodedPayload`). The load
options (``dtype``, ``apply_mask``, ``det_bin``) are parsed once into a
:class:`~quantem.stem4d.io.transforms.LoadOptions`, which owns their semantics (frames,
validity, metadata keys) for every loader; its ``finish`` runs with ``xp=cupy`` (per
batch where the dtype or shape changes), so results equal the cpu backend's bit for bit.
"""

from __future__ import annotations

import functools
import os
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.backends import require_backend
from quantem.stem4d.cuda.detector_kernels import zero_invalid_pixels
from quantem.stem4d.cuda.hdf5_pipeline import (
    DEFAULT_BATCH_BYTES,
    DEFAULT_STAGING,
    decode_source_to_device,
)
from quantem.stem4d.cuda.qem_pipeline import DEFAULT_BATCH_BYTES as QEM_BATCH_BYTES
from quantem.stem4d.cuda.registered_files import releasing_changed_on_error
from quantem.stem4d.io.transforms import (
    FrameFinisher,
    LoadOptions,
    empty_info,
    parse_loader_options,
)


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


def _releasing_changed(load: Callable[..., Acquisition]) -> Callable[..., Acquisition]:
    """A failed load releases the kept registrations of files that changed
    (:func:`~quantem.stem4d.cuda.registered_files.releasing_changed_on_error`)."""

    @functools.wraps(load)
    def wrapper(*args: Any, **kwargs: Any) -> Acquisition:
        with releasing_changed_on_error():
            return load(*args, **kwargs)

    return wrapper


@_releasing_changed
def load_hdf5(
    path: str | os.PathLike,
    *,
    device: int = 0,
    dtype: str = "native",
    apply_mask: bool = True,
    det_bin: int = 1,
    scan_shape: tuple[int, int] | None = None,
    fresh_index: bool = False,
    index_dir: str | os.PathLike | None = None,
    threads: int | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    staging: str = DEFAULT_STAGING,
    verify_source: bool = False,
    load_options: LoadOptions | None = None,
) -> Acquisition:
    """Load an ARINA acquisition onto GPU ``device``.

    The compressed chunks (located by the frame index) reach the device in batches and
    are decoded there (bitshuffle-LZ4, every chunk validated); options as
    :func:`quantem.stem4d.io.arina.load_arina`. ``staging`` says how the bytes travel
    (default :data:`~quantem.stem4d.cuda.hdf5_pipeline.DEFAULT_STAGING`): ``"pread"`` reads them
    in parallel into reused pinned buffers and copies those asynchronously;
    ``"mapped"`` page-locks the shards' page-cache pages in place for this load and
    copies them by DMA with no CPU copy (no faster than pread: the registration costs
    about what the copy it saves does); ``"registered"`` does the same with
    registrations kept across loads (:mod:`quantem.stem4d.cuda.registered_files`: the first
    load of the shards in a process stages by pread, the second load of the unchanged,
    resident shards registers them, later loads copy straight from their pages; the pages stay in memory, within a budget, until
    :func:`quantem.stem4d.cuda.release_registered_files`). ``metadata["load_stats"]`` records
    which one ran (and why mapped or registered staging fell back to pread, if it did).

    ``verify_source=True`` checks each raw chunk against the frame index's XXH3-64
    (:func:`quantem.stem4d.io.arina.expected_chunk_hashes`) on the GPU as it is staged, with
    ``xxh3.cu`` on the decode's stream; a chunk that changed raises
    :class:`~quantem.stem4d.errors.SourceIntegrityError` naming the shard and the first such
    frame, and no data is returned. Off by default (no hashing at all).

    Raises
    ------
    ChunkDecodeError
        A chunk is corrupt; the error names the shard file and the frame.
    SourceIntegrityError
        ``verify_source=True`` and a chunk differs from the index (or the index has no
        checksums).
    BackendUnavailableError
        CuPy or a CUDA device is missing.
    """
    require_backend("cuda")
    import cupy

    from quantem.stem4d.cuda.staging import prestart_threads

    prestart_threads(threads, devices=(device,))
    from quantem.stem4d.io.arina import open_arina

    options = parse_loader_options(load_options, dtype, apply_mask, det_bin)
    source = open_arina(path, scan_shape=scan_shape, index_dir=index_dir, fresh_index=fresh_index)
    options.check_detector(source.detector_shape)
    if verify_source:
        from quantem.stem4d.io.arina import expected_chunk_hashes

        expected_chunk_hashes(source)  # refuses an index without checksums before reading
    scan = tuple(int(v) for v in source.scan_shape)
    with cupy.cuda.Device(device), releasing_on_error():
        frames, stats, info = _decode_hdf5(
            source, options, threads, batch_bytes, staging, verify_source=verify_source
        )
        data = frames.reshape(*scan, *frames.shape[1:])
    metadata = dict(source.metadata)
    metadata.update(
        options.metadata(
            info, stored_dtype=source.dtype, stored_detector_shape=source.detector_shape
        )
    )
    metadata["load_stats"] = hdf5_load_stats(stats)
    return Acquisition(data, metadata, options.finish_validity(source.validity), backend="cuda")


def hdf5_load_stats(stats: Any) -> dict[str, Any]:
    """``metadata["load_stats"]`` of one HDF5 pipeline run."""
    load_stats = {
        "compressed_bytes": stats.compressed_bytes,
        "batches": stats.batches,
        "read_seconds": stats.read_seconds,
        "pipeline_seconds": stats.wall_seconds,
        "staging": stats.staging,
    }
    if stats.fallback is not None:
        load_stats["staging_fallback"] = stats.fallback
    if stats.staging == "registered":
        load_stats["registered_bytes"] = stats.registered_bytes
    if stats.stages:  # the staging timeline, when profiling is on (benchmarks)
        load_stats["stages"] = dict(stats.stages)
    return load_stats


def finish_in_place(options: LoadOptions, frames: Any, validity: Any) -> tuple[Any, dict]:
    """``options.finish(frames, validity, cupy, overwrite=True)`` for decoded device frames.

    When the options change neither dtype nor shape, the mask is zeroed by this package's
    own kernel (:func:`~quantem.stem4d.cuda.detector_kernels.zero_invalid_pixels`), not by CuPy
    indexing, whose built-in kernels compile at their first use on a machine (0.1-0.3 s
    each on a load that otherwise runs ahead-of-time fatbins only)."""
    if options.changes_layout(frames.dtype):
        import cupy

        return options.finish(frames, cupy.asarray(validity), cupy, overwrite=True)
    if options.apply_mask:
        zero_invalid_pixels(frames, validity)
    return frames, empty_info()


def _decode_hdf5(
    source: Any,
    options: LoadOptions,
    threads: Any,
    batch_bytes: int,
    staging: str,
    *,
    frame_range: tuple[int, int] | None = None,
    verify_source: bool = False,
) -> tuple:
    """Decode the frames of ``frame_range`` (default: every frame) on the current device,
    finished per batch where the options change the dtype or shape, else masked in place."""
    import cupy

    if not options.changes_layout(source.dtype):
        # The mask is zeroed on the decode's stream right after the last batch (as
        # finish_in_place would after the load): its launch overlaps the decode.
        validity = source.validity
        mask = (lambda out: zero_invalid_pixels(out, validity)) if options.apply_mask else None
        frames, stats = decode_source_to_device(
            source,
            threads=threads,
            batch_bytes=batch_bytes,
            staging=staging,
            frame_range=frame_range,
            verify_source=verify_source,
            finish=mask,
        )
        return frames, stats, empty_info()
    validity = cupy.asarray(source.validity)
    first, last = frame_range if frame_range is not None else (0, int(source.n_frames))
    finisher = FrameFinisher(
        options, last - first, source.dtype, source.detector_shape, validity, cupy
    )
    _, stats = decode_source_to_device(
        source,
        consume=finisher,
        threads=threads,
        batch_bytes=batch_bytes,
        staging=staging,
        frame_range=frame_range,
        verify_source=verify_source,
    )
    return finisher.out, stats, finisher.info


@_releasing_changed
def load_qem(
    path: str | os.PathLike,
    *,
    device: int = 0,
    representation: str = "dense",
    verify: bool = True,
    scan_region: Any = None,
    dtype: str = "native",
    apply_mask: bool = True,
    det_bin: int = 1,
    threads: int | None = None,
    scan_shape: tuple[int, int] | None = None,
    batch_bytes: int = QEM_BATCH_BYTES,
    load_options: LoadOptions | None = None,
) -> Acquisition:
    """Load a ``.qem`` file onto GPU ``device``.

    Parameters
    ----------
    representation
        ``"dense"`` (default): a CuPy array of the frames. ``"encoded"``: the verified
        payload stays resident on the GPU (:class:`~quantem.stem4d.cuda.encoded.EncodedPayload`)
        and detector queries decode on the fly; only the default load options apply.
    verify
        Verify every block's checksum and padding (XXH3-64 on the GPU as each batch
        lands; blocks of 240 bytes or fewer on the CPU). ``False`` skips only those;
        structural and decode checks always run.
    scan_region
        ``(r0, r1, c0, c1)`` (half-open) or two slices: decode only the blocks it touches.
    dtype, apply_mask, det_bin
        As :func:`quantem.stem4d.io.qem.reader.load_qem` (``dtype="source"`` widens to the
        source's dtype).
    load_options
        The parsed :class:`~quantem.stem4d.io.transforms.LoadOptions` (what ``io.load``
        passes), instead of ``dtype``, ``apply_mask`` and ``det_bin``.
    """
    require_backend("cuda")
    import cupy

    from quantem.stem4d.cuda.staging import prestart_threads

    prestart_threads(threads, devices=(device,))
    from quantem.stem4d.cuda.encoded import EncodedPayload
    from quantem.stem4d.io.qem.reader import (
        QemFile,
        acquisition_metadata,
        dense_metadata,
        resolve_load_options,
    )

    if representation not in ("dense", "encoded"):
        raise ValueError(f"representation must be 'dense' or 'encoded', got {representation!r}")
    qem = QemFile(path, verify=False)  # structure checked here; block checksums below
    try:
        options = resolve_load_options(qem, dtype, apply_mask, det_bin, scan_shape, load_options)
        with cupy.cuda.Device(device), releasing_on_error():
            if representation == "encoded":
                # The payload keeps the stored counts (products apply the validity mask
                # themselves), so apply_mask is accepted either way and the metadata
                # describes the stored counts.
                if scan_region is not None or options.changes_layout(qem.dtype):
                    raise ValueError(
                        "representation='encoded' keeps the stored counts: it takes no "
                        "scan_region, dtype or det_bin (load 'dense' for those)"
                    )
                payload = EncodedPayload(
                    qem, verify=verify, threads=threads, batch_bytes=batch_bytes
                )
                metadata = acquisition_metadata(qem, qem.scan_shape)
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
            frames, block_ids, region, stats = _decode_qem_dense(
                qem, scan_region, verify, threads, batch_bytes
            )
            frames, info = finish_in_place(options, frames, qem.validity)
            shape = region[2] if region is not None else tuple(qem.scan_shape)
            data = frames.reshape(*shape, *frames.shape[1:])
        corners = None if region is None else [*region[0], *region[1]]
        metadata = dense_metadata(qem, shape, options, info, block_ids, corners)
        metadata["load_stats"] = {
            "payload_bytes": stats.copied_bytes,
            "batches": stats.batches,
            "read_seconds": stats.read_seconds,
            "pipeline_seconds": stats.wall_seconds,
            "staging": stats.staging,
        }
        if stats.fallback is not None:
            metadata["load_stats"]["staging_fallback"] = stats.fallback
        if stats.staging == "registered":
            metadata["load_stats"]["registered_bytes"] = stats.registered_bytes
        validity = options.finish_validity(qem.validity)
        return Acquisition(data, metadata, validity, backend="cuda")
    finally:
        qem.close()


def _decode_qem_dense(
    qem: Any, scan_region: Any, verify: bool, threads: Any, batch_bytes: int
) -> tuple:
    """Decode the blocks a dense load needs on the current device.

    Returns the stored frames ``(n, det_r, det_c)`` of the scan (or region) in scan
    order, the block ids decoded, ``(rows, cols, shape)`` of the region (None for the
    whole scan) and the staging statistics.
    """
    import cupy

    from quantem.stem4d.cuda.qem_pipeline import block_extents, plan_stage, stage_blocks
    from quantem.stem4d.cuda.rans_decode import DeviceBlockTable, QemBlockDecoder, raise_block_error
    from quantem.stem4d.io.qem.reader import parse_scan_region

    det = tuple(int(v) for v in qem.detector_shape)
    bf = int(qem.block_frames)
    index = qem.block_index
    if scan_region is None:
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
        # block-index entries (2.0: every row band of each frame block), and where the
        # frames of each one's frame block go in ``dense``
        frame_blocks = np.unique(frames // bf)
        block_ids = qem.blocks_for_frames(frames)
        entry_blocks = index["frame_start"][block_ids].astype(np.int64) // bf
        out_frames = np.searchsorted(frame_blocks, entry_blocks).astype(np.int64) * bf
        dense = cupy.empty((frame_blocks.size * bf, *det), dtype=qem.dtype)
        region = (rows, cols, shape)
    # The decoder's scratch and the tables after the output: a pool holding the freed
    # output of an earlier load of the same size gives that block to this output (best
    # fit) instead of carving the small buffers out of it and reserving a second one.
    decoder = QemBlockDecoder(qem)
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
        position = np.full(-(-qem.n_frames // bf), -1, dtype=np.int64)
        position[frame_blocks] = np.arange(frame_blocks.size) * bf
        gather = position[frames // bf] + frames % bf
        if gather.size and np.array_equal(gather, np.arange(gather[0], gather[0] + gather.size)):
            # Whole scan rows (one GPU's share of a sharded load): a view, no copy.
            frames_out = dense[int(gather[0]) : int(gather[0]) + gather.size]
        else:
            frames_out = dense[cupy.asarray(gather)]
        del dense
    return frames_out, block_ids, region, stats
