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

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from quantem.stem4d.cuda import lz4_bitshuffle as lz4
from quantem.stem4d.cuda import mapped_staging, registered_files, xxh3
from quantem.stem4d.cuda import staging as staging_module
from quantem.stem4d.cuda.load_plan import (  # noqa: F401 (their home was here)
    SPAN_GAP_BYTES,
    LoadPlan,
    load_plan,
    plan_span_reads,
    shard_spans,
)
from quantem.stem4d.cuda.staging import plan_batches  # noqa: F401 (tests and benchmarks use it here)
from quantem.stem4d.errors import ArinaFormatError, ChunkDecodeError

DEFAULT_BATCH_BYTES = 128 << 20
#: How compressed bytes reach the device (see :func:`decode_source_to_device`).
STAGINGS = ("pread", "mapped", "registered")
#: The staging a load uses unless told otherwise: registered, since a warm load of
#: registered shards is bound by the host-to-device copy, a cold one falls back to pread
#: at no cost, and the first load of files in a process stages by pread (they are
#: registered from the second, ``registered_files.REGISTER_FROM_ENV``).
DEFAULT_STAGING = "registered"


@dataclass
class PipelineStats:
    """Where the time went (seconds) and how many bytes moved."""

    read_seconds: float = 0.0
    wall_seconds: float = 0.0
    compressed_bytes: int = 0
    batches: int = 0
    stages: dict[str, float] = field(default_factory=dict)
    #: ``"pread"``, ``"mapped"`` or ``"registered"``: the staging that moved the bytes.
    staging: str = ""
    #: Why mapped or registered staging was abandoned for pread, if it was.
    fallback: str | None = None
    #: Registered staging: bytes of files registered by this load (0 when every file
    #: was registered by an earlier load).
    registered_bytes: int = 0


@dataclass
class _BatchDecoder:
    """What both stagings need to decode a batch: the frame geometry, the shared decoder
    state, the per-batch launch, how to name a frame in an error, the thread count."""

    frame_bytes: int
    elem: int
    state: dict
    decode_batch: Callable
    describe: Callable
    first: int
    threads: int | None
    #: The ``verify_source`` check, or ``None`` when it is off.
    verify: _SourceCheck | None = None

    def set_block_bytes(self, header: np.ndarray, first_chunk: Callable | None = None) -> None:
        """The first chunk's block size, which the kernels are compiled for.

        ``first_chunk()`` returns the first chunk's bytes: when verifying, a header that
        does not parse is first checked against the index (a changed chunk is reported as
        changed, not as corrupt)."""
        try:
            self.state["block_bytes"] = lz4.parse_chunk_header(header, self.frame_bytes, self.elem)
        except ValueError as exc:
            if self.verify is not None and first_chunk is not None:
                self.verify.check_host(0, first_chunk())
                if self.verify.host_bad[0]:
                    raise self.verify.error(0) from None
            path, fields = self.describe(self.first)
            raise ChunkDecodeError(
                path, f"corrupt chunk: {exc}", frame=self.first, **fields
            ) from None


class _SourceCheck:
    """``verify_source``: every staged raw chunk's XXH3-64 against the frame index's.

    Chunks longer than :data:`~quantem.stem4d.cuda.xxh3.MIDSIZE_MAX` are hashed on the device by
    ``xxh3.cu`` on the decode's stream, just before the decode reads them (no host copy);
    shorter ones (the kernel leaves them to the host) are hashed from the bytes that are
    staged: the pinned buffer (pread) or a pread of the chunk (mapped staging, whose bytes
    the CPU otherwise never touches). ``raise_first`` raises for the first mismatching
    frame after the batches ran.
    """

    def __init__(self, source: Any, first: int, nbytes: np.ndarray) -> None:
        import cupy

        from quantem.stem4d.io.arina import expected_chunk_hashes

        n = int(nbytes.size)
        self.source = source
        self.first = first
        self.expected = np.ascontiguousarray(
            expected_chunk_hashes(source)[first : first + n], dtype=np.uint64
        )
        self.small = xxh3.needs_host(nbytes)
        self.host_bad = np.zeros(n, dtype=bool)
        # Per-chunk kernel inputs uploaded once, sliced per batch.
        self.nbytes_dev = cupy.asarray(np.ascontiguousarray(nbytes, dtype=np.int64))
        self.expected_dev = cupy.asarray(self.expected)
        self.flags = cupy.zeros(n, dtype=cupy.int32)

    def check_host(self, k: int, chunk: Any) -> None:
        """Hash chunk ``k`` (position in the loaded range) on the host; a mismatch is
        noted and reported by :meth:`raise_first`."""
        import xxhash

        if xxhash.xxh3_64_intdigest(memoryview(chunk).cast("B")) != int(self.expected[k]):
            self.host_bad[k] = True

    def check_small(self, a: int, b: int, chunk_of: Callable[[int], Any]) -> None:
        """Hash the host-side chunks of frames ``[a, b)``; ``chunk_of(k)`` gives bytes."""
        for k in (a + np.flatnonzero(self.small[a:b])).tolist():
            self.check_host(k, chunk_of(k))

    def launch(self, a: int, b: int, device_bytes: Any, starts: Any, stream: Any) -> None:
        """Enqueue the device hashes of frames ``[a, b)`` (chunks at ``starts``)."""
        lengths = self.nbytes_dev[a:b]
        xxh3.verify_on_device(
            device_bytes, starts, lengths, lengths, self.expected_dev[a:b], self.flags[a:b],
            stream,
        )  # fmt: skip

    def error(self, k: int) -> Exception:
        from quantem.stem4d.io.arina import chunk_mismatch_error

        return chunk_mismatch_error(self.source, self.first + k)

    def raise_first(self) -> None:
        import cupy

        bad = (cupy.asnumpy(self.flags) == xxh3.FLAG_MISMATCH) | self.host_bad
        hits = np.flatnonzero(bad)
        if hits.size:
            raise self.error(int(hits[0]))


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
    staging: str = DEFAULT_STAGING,
    verify_source: bool = False,
    batch_frames: int | None = None,
    finish: Callable[[Any], None] | None = None,
) -> tuple[Any, PipelineStats]:
    """Decode frames of an ARINA source on the current device.

    ``staging`` picks how the compressed bytes reach the device: ``"pread"`` (parallel
    reads into pinned buffers), ``"mapped"`` (DMA straight from page-cache pages of the
    shards, registered and released per load, :mod:`quantem.stem4d.cuda.mapped_staging`;
    measured no faster than pread on the H200) or ``"registered"`` (the same DMA from
    registrations kept across loads, :mod:`quantem.stem4d.cuda.registered_files`: a warm load
    of registered shards is bound by the host-to-device copy). Default
    :data:`DEFAULT_STAGING`. Mapped and registered staging fall back to pread when the
    driver refuses to page-lock a mapping (registered also when a shard is not wholly in
    the page cache, the registrations would exceed their budget, or a shard changed
    during the load); ``stats.staging`` says which ran and ``stats.fallback`` why.

    Either decodes straight into ``out`` (a contiguous ``(n, det_r, det_c)`` device array of
    the source dtype; allocated when ``None`` and ``consume`` is ``None``), or, when
    ``consume`` is given, into a device scratch batch and calls
    ``consume(start, stop, frames)`` on the compute stream for each batch (frames are valid
    only during the call; ``start``/``stop`` count from the first frame of ``frame_range``).
    Batches hold at most ``batch_bytes`` of compressed chunks and, with ``batch_frames``,
    at most that many frames (which bounds the scratch batch of a ``consume`` run). Raises :class:`ChunkDecodeError` naming the shard and frame of
    the first corrupt chunk.

    ``verify_source=True`` hashes every raw chunk on the device as it is staged (XXH3-64,
    ``xxh3.cu``, on the decode's stream) and compares it with the frame index's
    (:func:`quantem.stem4d.io.arina.expected_chunk_hashes`); a chunk that differs raises
    :class:`~quantem.stem4d.errors.SourceIntegrityError` naming the shard and the first such
    frame, before any decode error (a changed chunk explains a failed decode). Off, it
    costs nothing.

    ``finish(out)`` (only without ``consume``) is called once, with the compute stream
    current, right after the last batch's decode is enqueued: the work it enqueues runs
    on the decoded frames (a load's mask), and its host side overlaps the decode.
    """
    import cupy

    index = source.index
    det_r, det_c = (int(x) for x in source.detector_shape)
    dtype = np.dtype(source.dtype)
    elem = dtype.itemsize
    frame_elems = det_r * det_c
    frame_bytes = frame_elems * elem
    first, last = frame_range if frame_range is not None else (0, int(source.n_frames))
    plan = load_plan(index, first, last, batch_bytes, batch_frames)
    shard, offset, nbytes = plan.shard, plan.offset, plan.nbytes
    n = last - first
    stats = PipelineStats()

    def describe(frame: int) -> tuple[str, dict]:
        s = int(index.frame_shard[frame])
        shard_first = int(np.searchsorted(np.asarray(index.frame_shard), s, side="left"))
        return source.shard_paths[s], {"shard_frame": frame - shard_first}

    limit = lz4.max_chunk_bytes(frame_bytes, elem)
    bad = plan.first_bad_chunk(lz4.HEADER_BYTES, limit)
    if bad >= 0:
        f = first + bad
        path, fields = describe(f)
        raise ChunkDecodeError(
            path,
            f"frame index gives a chunk of {int(nbytes[bad])} bytes, outside "
            f"[{lz4.HEADER_BYTES}, {limit}] for a {frame_bytes}-byte frame",
            frame=f,
            **fields,
        )

    if finish is not None and consume is not None:
        raise ValueError("finish applies to a decode into out, not to a consume run")
    if staging not in STAGINGS:
        raise ValueError(f"staging must be one of {', '.join(STAGINGS)}, not {staging!r}")
    if batch_frames is not None and staging == "mapped":
        raise ValueError("batch_frames applies to pread staging (mapped batches follow the files)")
    if out is None and consume is None:
        out = cupy.empty((n, det_r, det_c), dtype=dtype)
    verify = _SourceCheck(source, first, nbytes) if verify_source and n else None
    if n == 0:
        return out, stats
    batches = plan.batches
    stats.compressed_bytes = plan.compressed_bytes
    threads = threads or min(32, os.cpu_count() or 4)
    state: dict[str, Any] = {}
    short = lambda path, detail: ArinaFormatError(path, detail)  # noqa: E731
    with staging_module.OpenFiles(source.shard_paths, short) as files:
        mapped = None
        if staging == "mapped":
            mapped = _plan_mapped(files, shard, offset, nbytes, batch_bytes, describe, first)
        max_frames = max(b - a for a, b in batches + (mapped[0] if mapped else []))
        errors = cupy.zeros(n, dtype=cupy.int32)
        scratch_out = None
        if consume is not None:
            scratch_out = cupy.empty((max_frames, det_r, det_c), dtype=dtype)

        def decode_batch(
            a: int, b: int, device_bytes: Any, starts: Any, ends: Any, stream: Any
        ) -> None:
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
            if verify is not None:
                verify.launch(a, b, device_bytes, starts, stream)
            target = out[a:b] if consume is None else scratch_out
            state["decoder"].decode(
                device_bytes, starts, b - a, target, errors[a:b], state["scratch"],
                stream=stream, ends=ends,
            )  # fmt: skip
            if consume is not None:
                with stream:
                    consume(a, b, scratch_out[: b - a])
            elif finish is not None and b == n:
                with stream:
                    finish(out)

        batch_decoder = _BatchDecoder(
            frame_bytes, elem, state, decode_batch, describe, first, threads, verify
        )
        staged = None
        if staging in ("mapped", "registered"):
            try:
                if mapped is not None:
                    staged = _run_mapped(files, mapped, offset, nbytes, batch_decoder)
                    stats.batches = len(mapped[0])
                else:
                    staged, stats.registered_bytes = _run_registered(files, plan, batch_decoder)
                    stats.batches = len(batches)
                stats.staging = staging
            except mapped_staging.MappedStagingUnavailable as exc:
                staged = None
                stats.fallback = str(exc)
                errors.fill(0)
                if verify is not None:
                    verify.flags.fill(0)
                    verify.host_bad[:] = False
        if staged is None:
            staged = _run_pread(files, plan, batch_decoder)
            stats.staging = "pread"
            stats.batches = len(batches)
    stats.read_seconds = staged.read_seconds
    stats.wall_seconds = staged.wall_seconds
    stats.stages = dict(staged.extra)
    if verify is not None:
        verify.raise_first()
    # The codes come to the host (4 bytes a frame) rather than through ``errors.max()``:
    # a CuPy reduction compiles at its first use on a machine, on the load's critical path.
    lz4.raise_first_error(cupy.asnumpy(errors), first, describe)
    return out, stats


def _run_pread(files: Any, plan: LoadPlan, decoder: _BatchDecoder) -> Any:
    """Pread staging: each batch's chunk spans in a pinned buffer, then the chunks' starts
    and ends in it (int64 each), copied to the device together."""
    import cupy

    batches = plan.batches
    pread = plan.pread(staging_module.READ_PIECE_BYTES)
    bounds = pread.bounds

    def fill_bounds(i: int, slot: np.ndarray) -> None:
        at, starts, ends = bounds[i]
        n = starts.size
        slot[at : at + 8 * n].view(np.int64)[:] = starts
        slot[at + 8 * n : at + 16 * n].view(np.int64)[:] = ends
        if decoder.verify is not None:
            a = batches[i][0]
            decoder.verify.check_small(
                a, batches[i][1], lambda k: slot[int(starts[k - a]) : int(ends[k - a])]
            )
        if i == 0:
            decoder.set_block_bytes(
                slot[: lz4.HEADER_BYTES], lambda: slot[int(starts[0]) : int(ends[0])]
            )

    def launch(i: int, device_bytes: Any, stream: Any) -> None:
        a, b = batches[i]
        at = bounds[i][0]
        n = b - a
        starts_dev = device_bytes[at : at + 8 * n].view(cupy.int64)
        ends_dev = device_bytes[at + 8 * n : at + 16 * n].view(cupy.int64)
        decoder.decode_batch(a, b, device_bytes[:at], starts_dev, ends_dev, stream)

    return staging_module.run_staged(
        files, pread.batches, launch, on_read=fill_bounds, threads=decoder.threads
    )


def plan_mapped_ranges(
    shard: np.ndarray,
    offset: np.ndarray,
    nbytes: np.ndarray,
    batch_bytes: int,
) -> list[tuple[int, int, mapped_staging.FileRange]]:
    """Split frames into ``(start, stop, range)``: runs of one shard whose chunks a
    page-aligned file range of at most ``batch_bytes`` covers (a lone larger chunk gets
    a range of its own). One numpy pass per range, not per frame."""
    out = []
    n = int(shard.size)
    shard = np.asarray(shard)
    offset = np.asarray(offset, dtype=np.int64)
    ends = offset + np.asarray(nbytes, dtype=np.int64)
    shard_breaks = np.flatnonzero(shard[1:] != shard[:-1]) + 1
    seg_starts = np.concatenate(([0], shard_breaks)).tolist()
    seg_stops = np.concatenate((shard_breaks, [n])).tolist()
    for seg_start, seg_stop in zip(seg_starts, seg_stops):
        file = int(shard[seg_start])
        start = seg_start
        while start < seg_stop:
            # The span of frames [start, k] never shrinks as k grows: the first k over
            # budget is a binary search away.
            lo = np.minimum.accumulate(offset[start:seg_stop])
            hi = np.maximum.accumulate(ends[start:seg_stop])
            span = hi - (lo - lo % mapped_staging.PAGE_SIZE)
            count = max(int(np.searchsorted(span, batch_bytes, side="right")), 1)
            stop = start + count
            out.append(
                (
                    start,
                    stop,
                    mapped_staging.covering_range(file, int(lo[count - 1]), int(hi[count - 1])),
                )
            )
            start = stop
    return out


def _plan_mapped(
    files: Any,
    shard: np.ndarray,
    offset: np.ndarray,
    nbytes: np.ndarray,
    batch_bytes: int,
    describe: Callable,
    first: int,
) -> tuple[list[tuple[int, int]], list[mapped_staging.FileRange]]:
    """Batches and ranges for mapped staging (a range too large for it is refused by
    :func:`~quantem.stem4d.cuda.mapped_staging.run_mapped`, which makes the load fall back).

    Every range is checked against its file's size first: a frame index pointing past
    the end raises :class:`ArinaFormatError` naming the shard, as a short read would.
    """
    planned = plan_mapped_ranges(shard, offset, nbytes, batch_bytes)
    sizes = [os.fstat(fd).st_size for fd in files.fds]
    for a, _, r in planned:
        if r.offset + r.length > sizes[r.file]:
            path, _fields = describe(first + a)
            raise ArinaFormatError(
                path,
                f"file ends before the expected data ({r.offset + r.length - sizes[r.file]} "
                f"bytes missing at offset {sizes[r.file]})",
            )
    return [(a, b) for a, b, _ in planned], [r for _, _, r in planned]


def _run_mapped(
    files: Any,
    mapped: tuple[list[tuple[int, int]], list[mapped_staging.FileRange]],
    offset: np.ndarray,
    nbytes: np.ndarray,
    decoder: _BatchDecoder,
) -> Any:
    """Mapped staging of the planned batches, chunks addressed relative to each range."""
    import cupy

    batches, ranges = mapped
    base = np.concatenate(
        [np.full(b - a, r.offset, dtype=np.int64) for (a, b), r in zip(batches, ranges)]
    )
    starts = offset - base
    starts_dev = cupy.asarray(starts)
    ends_dev = cupy.asarray(starts + nbytes)
    # The block size comes from the first chunk's header, read with pread: the CPU never
    # reads the mappings.
    fd_of = np.concatenate(
        [np.full(b - a, files.fds[r.file], dtype=np.int64) for (a, b), r in zip(batches, ranges)]
    )

    def chunk_of(k: int) -> bytes:
        return os.pread(int(fd_of[k]), int(nbytes[k]), int(offset[k]))

    if decoder.verify is not None:
        # The chunks too short for the kernel are hashed here, from the file.
        decoder.verify.check_small(0, int(offset.size), chunk_of)
    header = os.pread(files.fds[ranges[0].file], lz4.HEADER_BYTES, int(offset[0]))
    decoder.set_block_bytes(np.frombuffer(header, dtype=np.uint8), lambda: chunk_of(0))

    def launch(i: int, device_bytes: Any, stream: Any) -> None:
        a, b = batches[i]
        decoder.decode_batch(a, b, device_bytes, starts_dev[a:b], ends_dev[a:b], stream)

    return mapped_staging.run_mapped(files.fds, ranges, launch, threads=decoder.threads)


def _run_registered(files: Any, plan: LoadPlan, decoder: _BatchDecoder) -> tuple[Any, int]:
    """Registered staging: each batch's chunk spans copied by DMA from the shards'
    registered page-cache pages (kept across loads, :mod:`quantem.stem4d.cuda.registered_files`).

    Shards registered by an earlier load and unchanged since (stat) are used at once;
    while any other was loaded fewer than ``register_from`` times (unchanged) in this
    process the load stages by pread (:meth:`~quantem.stem4d.cuda.registered_files.RegisteredFiles.count_load`);
    otherwise the others are checked to be wholly resident, then registered by one background
    thread in first-use order while earlier batches copy and decode. After the copies
    every shard's stat is checked again: one that changed during the load makes it raise
    :class:`~quantem.stem4d.cuda.registered_files.RegistrationUnavailable` (the caller falls
    back to pread). Returns the staging statistics and the bytes registered by this load.
    """

    cache = registered_files.registered_files()
    fds, paths = files.fds, files.paths
    batches, shard, offset, nbytes = plan.batches, plan.shard, plan.offset, plan.nbytes
    registered_plan = plan.registered()
    used, lo, hi = registered_plan.used, registered_plan.lo, registered_plan.hi
    leases: dict[int, registered_files.Registration] = {}
    futures: dict[int, Any] = {}
    registered = 0
    returned = False  # the leases given back once the copies were done
    try:
        misses = []
        for f, a, b in zip(used.tolist(), lo.tolist(), hi.tolist()):
            st = os.fstat(fds[f])
            # The lookup first: it releases the registration of a file that changed.
            entry = cache.lookup(fds[f], paths[f], a, b, st)
            if entry is not None:
                leases[f] = entry
            else:
                misses.append((f, a, b))
            if b > st.st_size:
                raise ArinaFormatError(
                    paths[f],
                    f"file ends before the expected data ({b - st.st_size} bytes missing at "
                    f"offset {st.st_size})",
                )
        if misses:
            cache.count_load([fds[f] for f, _, _ in misses], [paths[f] for f, _, _ in misses])
            need = sum(
                registered_files.page_ceil(b - registered_files.page_floor(a)) for _, a, b in misses
            )
            if not cache.fits(need):
                raise registered_files.RegistrationUnavailable(
                    f"registering {need} bytes would exceed the budget of {cache.budget} "
                    f"bytes ({registered_files.BUDGET_ENV})"
                )
            for f, a, b in misses:
                cache.check_resident(fds[f], a, b, paths[f])
            registered = need
            pool = staging_module.thread_pool("register", 1)
            futures = {f: pool.submit(cache.register, fds[f], paths[f], a, b) for f, a, b in misses}

        def address(f: int, file_offset: int) -> int:
            entry = leases.get(f)
            if entry is None:
                entry = leases[f] = futures[f].result()
            return entry.address_of(file_offset)

        starts_dev, ends_dev = plan.device_bounds()

        def chunk_of(k: int) -> bytes:  # the CPU reads chunks by pread, never the mappings
            return os.pread(fds[int(shard[k])], int(nbytes[k]), int(offset[k]))

        if decoder.verify is not None:
            decoder.verify.check_small(0, int(offset.size), chunk_of)
        header = os.pread(fds[int(shard[0])], lz4.HEADER_BYTES, int(offset[0]))
        decoder.set_block_bytes(np.frombuffer(header, dtype=np.uint8), lambda: chunk_of(0))

        def launch(i: int, device_bytes: Any, stream: Any) -> None:
            a, b = batches[i]
            decoder.decode_batch(a, b, device_bytes, starts_dev[a:b], ends_dev[a:b], stream)

        def unchanged_while_copied() -> None:
            nonlocal returned
            changed = [f for f, e in leases.items() if not cache.still_current(e, fds[f])]
            for f in changed:
                cache.forget_version(leases[f])
            if changed:
                raise registered_files.RegistrationUnavailable(
                    f"{paths[changed[0]]} changed during the load"
                )
            # Every copy is done: nothing reads the pages again, so the leases go back
            # now, while the last batches decode (every registration was waited for by
            # ``address``, so no future is left).
            for entry in leases.values():
                cache.give_back(entry)
            returned = True

        # The files' stats are checked once the copies are done, while the last batches
        # decode.
        stats = mapped_staging.run_registered(
            registered_plan.reads,
            registered_plan.slot_bytes,
            address,
            launch,
            after_copies=unchanged_while_copied,
        )
        return stats, registered
    finally:
        if not returned:
            for future in futures.values():
                future.cancel()
            for f, future in futures.items():
                if f not in leases and not future.cancelled():
                    with contextlib.suppress(mapped_staging.MappedStagingUnavailable):
                        leases[f] = future.result()
            for entry in leases.values():
                cache.give_back(entry)
