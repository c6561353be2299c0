"""Staged transfer of ARINA chunks to the GPU: parallel pread -> pinned -> H2D -> decode.

The compressed frames are moved in batches of about ``batch_bytes``. For each batch a
reader thread fills a reused page-locked buffer with ``os.preadv`` straight into pinned
memory (contiguous chunks of one shard coalesce into large reads, split across a thread
pool); the batch is copied to a device staging buffer on a copy stream while the previous
batch is decoded on a compute stream; events order the reuse of every buffer, so reading,
copying and decoding of consecutive batches overlap and the host never waits on the GPU
except to reuse a pinned buffer.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from quantem.cuda import lz4_bitshuffle as lz4
from quantem.cuda import staging
from quantem.errors import ArinaFormatError, ChunkDecodeError

DEFAULT_BATCH_BYTES = 64 << 20
READ_PIECE_BYTES = staging.READ_PIECE_BYTES


@dataclass
class PipelineStats:
    """Where the time went (seconds) and how many bytes moved."""

    read_seconds: float = 0.0
    wall_seconds: float = 0.0
    compressed_bytes: int = 0
    batches: int = 0
    stages: dict[str, float] = field(default_factory=dict)


def plan_batches(nbytes: np.ndarray, batch_bytes: int) -> list[tuple[int, int]]:
    """Split frames into consecutive ``(start, stop)`` runs of at most ``batch_bytes``.

    A single frame larger than ``batch_bytes`` gets a batch of its own.
    """
    n = int(nbytes.size)
    if n == 0:
        return []
    ends = np.cumsum(nbytes, dtype=np.int64)
    batches = []
    start = 0
    base = 0
    while start < n:
        stop = int(np.searchsorted(ends, base + batch_bytes, side="right"))
        stop = max(stop, start + 1)
        batches.append((start, stop))
        base = int(ends[stop - 1])
        start = stop
    return batches


def plan_reads(
    shard: np.ndarray, offset: np.ndarray, nbytes: np.ndarray, piece_bytes: int
) -> list[tuple[int, int, int, int]]:
    """Coalesce a batch's chunks into file reads ``(shard, file_offset, buffer_offset, length)``.

    Frames adjacent in one shard merge; each read is at most ``piece_bytes`` long so the
    pieces spread over the threads.
    """
    reads = []
    buffer_starts = np.concatenate(([0], np.cumsum(nbytes, dtype=np.int64)[:-1]))
    contiguous = (shard[1:] == shard[:-1]) & (offset[1:] == offset[:-1] + nbytes[:-1])
    breaks = np.flatnonzero(~contiguous) + 1
    run_starts = np.concatenate(([0], breaks))
    run_stops = np.concatenate((breaks, [shard.size]))
    for a, b in zip(run_starts.tolist(), run_stops.tolist()):
        file_offset = int(offset[a])
        buffer_offset = int(buffer_starts[a])
        length = int(buffer_starts[b - 1] + nbytes[b - 1]) - buffer_offset
        done = 0
        while done < length:
            piece = min(piece_bytes, length - done)
            reads.append((int(shard[a]), file_offset + done, buffer_offset + done, piece))
            done += piece
    return reads


def decode_source_to_device(
    source: Any,
    *,
    out: Any = None,
    consume: Callable[[int, int, Any], None] | None = None,
    threads: int | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    frame_range: tuple[int, int] | None = None,
    stage_compressed: bool = False,
) -> tuple[Any, PipelineStats]:
    """Decode frames of an ARINA source on the current device.

    Either decodes straight into ``out`` (a contiguous ``(n, det_r, det_c)`` device array of
    the source dtype; allocated when ``None`` and ``consume`` is ``None``), or, when
    ``consume`` is given, into a device scratch batch and calls
    ``consume(start, stop, frames)`` on the compute stream for each batch (frames are valid
    only during the call). Raises :class:`ChunkDecodeError` naming the shard and frame of
    the first corrupt chunk.
    """
    import cupy

    index = source.index
    det_r, det_c = (int(x) for x in source.detector_shape)
    dtype = np.dtype(source.dtype)
    elem = dtype.itemsize
    frame_elems = det_r * det_c
    frame_bytes = frame_elems * elem
    first, last = frame_range if frame_range is not None else (0, int(source.n_frames))
    shard = np.asarray(index.frame_shard[first:last])
    offset = np.asarray(index.frame_offset[first:last], dtype=np.int64)
    nbytes = np.asarray(index.frame_nbytes[first:last], dtype=np.int64)
    n = last - first
    stats = PipelineStats()

    def describe(frame: int) -> tuple[str, dict]:
        s = int(index.frame_shard[frame])
        shard_first = int(np.searchsorted(np.asarray(index.frame_shard), s, side="left"))
        return source.shard_paths[s], {"shard_frame": frame - shard_first}

    limit = lz4.max_chunk_bytes(frame_bytes, elem)
    bad = np.flatnonzero((nbytes < lz4.HEADER_BYTES) | (nbytes > limit))
    if bad.size:
        f = first + int(bad[0])
        path, fields = describe(f)
        raise ChunkDecodeError(
            path,
            f"frame index gives a chunk of {int(nbytes[bad[0]])} bytes, outside "
            f"[{lz4.HEADER_BYTES}, {limit}] for a {frame_bytes}-byte frame",
            frame=f,
            **fields,
        )

    if out is None and consume is None:
        out = cupy.empty((n, det_r, det_c), dtype=dtype)
    if n == 0:
        return out, stats
    batches = plan_batches(nbytes, batch_bytes)
    stats.batches = len(batches)
    stats.compressed_bytes = int(nbytes.sum())
    max_frames = max(b - a for a, b in batches)
    threads = threads or min(32, os.cpu_count() or 4)

    plans = []
    for a, b in batches:
        data = int(nbytes[a:b].sum())
        offsets_at = -(-data // 8) * 8
        reads = plan_reads(shard[a:b], offset[a:b], nbytes[a:b], READ_PIECE_BYTES)
        plans.append(staging.Batch(reads, offsets_at + 8 * (b - a + 1)))

    state: dict[str, Any] = {}

    def fill_offsets(i: int, slot: np.ndarray) -> None:
        a, b = batches[i]
        at = plans[i].copy_bytes - 8 * (b - a + 1)
        offs = slot[at : plans[i].copy_bytes].view(np.int64)
        offs[0] = 0
        np.cumsum(nbytes[a:b], out=offs[1:])
        if i == 0:
            # The first chunk's header fixes the block size the kernels are compiled for.
            try:
                state["block_bytes"] = lz4.parse_chunk_header(
                    slot[: lz4.HEADER_BYTES], frame_bytes, elem
                )
            except ValueError as exc:
                path, fields = describe(first)
                raise ChunkDecodeError(
                    path, f"corrupt chunk: {exc}", frame=first, **fields
                ) from None

    errors = cupy.zeros(n, dtype=cupy.int32)
    scratch_out = None
    if consume is not None:
        scratch_out = cupy.empty((max_frames, det_r, det_c), dtype=dtype)

    def launch(i: int, device_bytes: Any, stream: Any) -> None:
        a, b = batches[i]
        if "decoder" not in state:
            decoder = lz4.ChunkDecoder(
                elem, frame_elems, state["block_bytes"], stage_compressed=stage_compressed
            )
            per_frame = max(decoder.blocks_per_frame, 1)
            state["decoder"] = decoder
            state["scratch"] = (
                cupy.empty(max_frames * per_frame, dtype=cupy.int64),
                cupy.empty(max_frames * per_frame, dtype=cupy.uint32),
            )
        decoder = state["decoder"]
        at = plans[i].copy_bytes - 8 * (b - a + 1)
        offsets_dev = device_bytes[at:].view(cupy.int64)
        target = out[a:b] if consume is None else scratch_out
        decoder.decode(
            device_bytes, offsets_dev, b - a, target, errors[a:b], state["scratch"], stream=stream
        )
        if consume is not None:
            with stream:
                consume(a, b, scratch_out[: b - a])

    short = lambda path, detail: ArinaFormatError(path, detail)  # noqa: E731
    with staging.OpenFiles(source.shard_paths, short) as files:
        staged = staging.run_staged(files, plans, launch, on_read=fill_offsets, threads=threads)
    stats.read_seconds = staged.read_seconds
    stats.wall_seconds = staged.wall_seconds
    if int(errors.max()) != 0:
        lz4.raise_first_error(cupy.asnumpy(errors), first, describe)
    return out, stats
