"""Staged transfer of ``.qem`` blocks to the GPU, with checksums verified on the way.

Blocks are moved in batches of consecutive block ids (about ``batch_bytes`` of block
extents each); reads of adjacent extents coalesce. While a batch sits in its pinned buffer
every block's XXH3-64 and trailing padding (§9, §14 step 11) are verified on the GPU by
``xxh3.cu`` right after the batch lands (extents of 240 bytes or fewer, for which the
kernel has no path, are hashed by the reader thread on the CPU); ``launch`` then sees the
batch's bytes on the device with a block table whose offsets point into them. Checksum
failures are raised after the transfer, before any decode status is looked at.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from quantem.stem4d.cuda import mapped_staging, registered_files, staging, xxh3
from quantem.stem4d.errors import QemFormatError

#: 256 MiB: one warp decodes one block, so a batch needs many blocks to fill the GPU
#: (on the H200, full-size uint16: 64 MiB batches 0.120 s, 256 MiB 0.089 s warm).
DEFAULT_BATCH_BYTES = 256 << 20
EXTENT_ALIGN = 16
#: ``"registered"``: the payload is copied by DMA from its page-cache pages, registered
#: once and kept across loads (:mod:`quantem.stem4d.cuda.registered_files`; pread staging for
#: the file's first load in a process, when it is not wholly resident or over the
#: budget); ``"pread"``: always pread staging.
DEFAULT_STAGING = "registered"


def block_extents(index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """File offset and extent length (block bytes plus padding to 16) of every block."""
    offsets = index["offset"].astype(np.int64)
    ends = offsets + index["length"].astype(np.int64)
    extent = (ends + EXTENT_ALIGN - 1) // EXTENT_ALIGN * EXTENT_ALIGN - offsets
    return offsets, extent


def plan_block_batches(
    block_ids: np.ndarray, extents: np.ndarray, batch_bytes: int
) -> list[tuple[int, int]]:
    """Split positions of ``block_ids`` into ``(a, b)`` runs of about ``batch_bytes``."""
    return staging.plan_batches(extents[block_ids], batch_bytes)


def plan_stage(
    ids: np.ndarray, extents: np.ndarray, batch_bytes: int
) -> tuple[list[tuple[int, int]], np.ndarray]:
    """The batches of :func:`stage_blocks` and every block's start in its batch's buffer
    (extents packed one after the other), so callers can upload per-block tables once."""
    batches = plan_block_batches(ids, extents, batch_bytes)
    starts = np.zeros(ids.size, dtype=np.int64)
    for a, b in batches:
        np.cumsum(extents[ids[a : b - 1]], out=starts[a + 1 : b])
    return batches, starts


def stage_blocks(
    qem: Any,
    block_ids: Sequence[int] | np.ndarray,
    launch: Callable[[int, int, int, Any, np.ndarray, Any], None],
    *,
    verify: bool = True,
    threads: int | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
) -> staging.StageStats:
    """Move the blocks to the device batch by batch.

    ``launch(i, a, b, device_bytes, buffer_offsets, stream)`` is called for positions
    ``[a, b)`` of ``block_ids``; ``buffer_offsets[k]`` is where block ``block_ids[a + k]``
    starts in ``device_bytes``.
    """
    import cupy

    from quantem.stem4d.io.qem.checksum import xxh3 as host_xxh3

    ids = np.asarray(block_ids, dtype=np.int64)
    index = qem.block_index
    file_offsets, extents = block_extents(index)
    batches, all_starts = plan_stage(ids, extents, batch_bytes)
    plans = []
    buffer_offsets = []
    for a, b in batches:
        sizes = extents[ids[a:b]]
        starts = all_starts[a:b]
        buffer_offsets.append(starts)
        # Consecutive blocks whose extents are adjacent in the file merge into one read.
        blocks = ids[a:b]
        adjacent = file_offsets[blocks[1:]] == file_offsets[blocks[:-1]] + sizes[:-1]
        breaks = np.flatnonzero(~adjacent) + 1
        reads: list[tuple[int, int, int, int]] = []
        for r0, r1 in zip(
            np.concatenate(([0], breaks)).tolist(), np.concatenate((breaks, [b - a])).tolist()
        ):
            length = int(starts[r1 - 1] + sizes[r1 - 1] - starts[r0])
            if length:
                reads += staging.split_reads(
                    0, int(file_offsets[blocks[r0]]), int(starts[r0]), length
                )
        plans.append(staging.Batch(reads, max(int(sizes.sum()), EXTENT_ALIGN)))

    checksums = np.asarray(qem.block_checksums, dtype=np.uint64)
    lengths = index["length"].astype(np.int64)
    small = xxh3.needs_host(extents)

    def check_extent(block: int, extent: np.ndarray) -> None:
        if host_xxh3(extent) != int(checksums[block]):
            raise QemFormatError(
                qem.path, "block checksum mismatch", section="PAYLOAD", block=block
            )
        if extent[int(lengths[block]) :].any():
            raise QemFormatError(qem.path, "nonzero block padding", section="PAYLOAD", block=block)

    def check_small(i: int, slot: np.ndarray) -> None:
        # Extents too short for the GPU hash (and empty ones) are verified here.
        a, b = batches[i]
        starts = buffer_offsets[i]
        for k in np.flatnonzero(small[ids[a:b]]).tolist():
            block = int(ids[a + k])
            start = int(starts[k])
            check_extent(block, slot[start : start + int(extents[block])])

    def check_small_from_file(fd: int) -> None:
        # Registered staging: the CPU never reads the mapping, so the short extents are
        # read with pread.
        for block in ids[small[ids]].tolist():
            data = os.pread(fd, int(extents[block]), int(file_offsets[block]))
            if len(data) != int(extents[block]):
                raise QemFormatError(qem.path, "file ends inside a block", section="PAYLOAD")
            check_extent(block, np.frombuffer(data, dtype=np.uint8))

    flags = cupy.zeros(ids.size, dtype=cupy.int32) if verify else None
    if verify:
        # Per-block hash inputs uploaded once, sliced per batch (no uploads in the loop).
        if np.any(all_starts % 8):
            raise ValueError("block extents must start 8-byte aligned in the device buffer")
        device_inputs = (
            cupy.asarray(all_starts),
            cupy.asarray(np.ascontiguousarray(extents[ids], dtype=np.int64)),
            cupy.asarray(np.ascontiguousarray(lengths[ids], dtype=np.int64)),
            cupy.asarray(np.ascontiguousarray(checksums[ids], dtype=np.uint64)),
        )

    def run(i: int, device_bytes: Any, stream: Any) -> None:
        a, b = batches[i]
        if verify:
            starts, sizes, used, expected = (x[a:b] for x in device_inputs)
            xxh3.verify_on_device(device_bytes, starts, sizes, used, expected, flags[a:b], stream)
        launch(i, a, b, device_bytes, buffer_offsets[i], stream)

    short = lambda path, detail: QemFormatError(path, detail, section="PAYLOAD")  # noqa: E731
    with staging.OpenFiles([qem.path], short) as files:
        stats = None
        fallback = None
        if DEFAULT_STAGING == "registered":
            try:
                stats = _stage_registered(
                    qem, files, plans, run, check_small_from_file if verify else None
                )
            except registered_files.RegistrationUnavailable as exc:
                fallback = str(exc)
        if stats is None:
            stats = staging.run_staged(
                files, plans, run, on_read=check_small if verify else None, threads=threads
            )
            stats.staging = "pread"
            stats.fallback = fallback
    if verify:
        raise_checksum_errors(cupy.asnumpy(flags), ids, qem.path)
    return stats


def raise_checksum_errors(flags: np.ndarray, ids: np.ndarray, path: Any) -> None:
    """Raise for the first block the GPU found with a bad checksum or padding."""
    bad = np.flatnonzero((flags == xxh3.FLAG_MISMATCH) | (flags == xxh3.FLAG_PADDING))
    if bad.size == 0:
        return
    k = int(bad[0])
    mismatch = flags[k] == xxh3.FLAG_MISMATCH
    detail = "block checksum mismatch" if mismatch else "nonzero block padding"
    raise QemFormatError(path, detail, section="PAYLOAD", block=int(ids[k]))


def _stage_registered(
    qem: Any,
    files: Any,
    plans: list[staging.Batch],
    run: Callable[[int, Any, Any], None],
    check_small_from_file: Callable[[int], None] | None,
) -> staging.StageStats:
    """The batches copied by DMA from the file's registered page-cache pages.

    Raises :class:`~quantem.stem4d.cuda.registered_files.RegistrationUnavailable` before any
    launch when the payload is not wholly resident, would exceed the budget or cannot
    be page-locked (the caller stages by pread); a file that changed during the copies
    raises :class:`QemFormatError` (the decoded blocks may mix two versions)."""
    cache = registered_files.registered_files()
    fd, path = files.fds[0], files.paths[0]
    reads = [r for plan in plans for r in plan.reads]
    if not reads:
        raise registered_files.RegistrationUnavailable("no payload bytes to copy")
    lo = min(r[1] for r in reads)
    hi = max(r[1] + r[3] for r in reads)
    size = os.fstat(fd).st_size
    if hi > size:
        raise QemFormatError(
            path, f"file ends before the expected data ({hi - size} bytes missing)",
            section="PAYLOAD",
        )  # fmt: skip
    entry = cache.lookup(fd, path, lo, hi)
    registered = 0
    if entry is None:
        cache.count_load([fd], [path])  # pread while the file's loads are fewer than register_from
        need = registered_files.page_ceil(hi - registered_files.page_floor(lo))
        if not cache.fits(need):
            raise registered_files.RegistrationUnavailable(
                f"registering {need} bytes would exceed the budget of {cache.budget} bytes "
                f"({registered_files.BUDGET_ENV})"
            )
        cache.check_resident(fd, lo, hi, path)
        entry = cache.register(fd, path, lo, hi)
        registered = need
    try:
        if check_small_from_file is not None:
            check_small_from_file(fd)
        stats = mapped_staging.run_registered(
            [plan.reads for plan in plans],
            max(plan.copy_bytes for plan in plans),
            lambda _file, offset: entry.address_of(offset),
            run,
            launch_bytes=[plan.copy_bytes for plan in plans],
        )
        if not cache.still_current(entry, fd):
            cache.forget_version(entry)
            raise QemFormatError(path, "the file changed during the load", section="PAYLOAD")
    finally:
        cache.give_back(entry)
    stats.staging = "registered"
    stats.registered_bytes = registered
    return stats
