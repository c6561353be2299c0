"""Staged transfer of ``.qem`` blocks to the GPU, with checksums verified on the way.

Blocks are moved in batches of consecutive block ids (about ``batch_bytes`` of block
extents each); reads of adjacent extents coalesce. While a batch sits in its pinned buffer
the reader verifies every block's XXH3-64 and trailing padding (§9, §14 step 11) on the
CPU, overlapped with the GPU's work on the previous batch; ``launch`` then sees the
batch's bytes on the device with a block table whose offsets point into them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from quantem.cuda import staging
from quantem.errors import QemFormatError

DEFAULT_BATCH_BYTES = 64 << 20
EXTENT_ALIGN = 16


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
    sizes = extents[block_ids]
    ends = np.cumsum(sizes)
    batches = []
    a = 0
    base = 0
    while a < block_ids.size:
        b = int(np.searchsorted(ends, base + batch_bytes, side="right"))
        b = max(b, a + 1)
        batches.append((a, b))
        base = int(ends[b - 1])
        a = b
    return batches


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
    ids = np.asarray(block_ids, dtype=np.int64)
    index = qem.block_index
    file_offsets, extents = block_extents(index)
    batches = plan_block_batches(ids, extents, batch_bytes)
    plans = []
    buffer_offsets = []
    for a, b in batches:
        sizes = extents[ids[a:b]]
        starts = np.zeros(b - a, dtype=np.int64)
        np.cumsum(sizes[:-1], out=starts[1:])
        buffer_offsets.append(starts)
        reads: list[tuple[int, int, int, int]] = []
        k = a
        while k < b:
            # Merge consecutive blocks whose extents are adjacent in the file.
            m = k + 1
            while m < b and file_offsets[ids[m]] == file_offsets[ids[m - 1]] + extents[ids[m - 1]]:
                m += 1
            length = int(starts[m - 1 - a] + sizes[m - 1 - a] - starts[k - a])
            if length:
                reads += staging.split_reads(
                    0, int(file_offsets[ids[k]]), int(starts[k - a]), length
                )
            k = m
        plans.append(staging.Batch(reads, max(int(sizes.sum()), EXTENT_ALIGN)))

    checksums = qem.block_checksums
    lengths = index["length"].astype(np.int64)
    verifier = ThreadPoolExecutor(threads or 8) if verify else None

    def check(i: int, slot: np.ndarray) -> None:
        from quantem.io.qem.checksum import xxh3

        a, b = batches[i]
        starts = buffer_offsets[i]

        def one(k: int) -> int | None:
            block = int(ids[a + k])
            start = int(starts[k])
            extent = slot[start : start + int(extents[block])]
            if xxh3(extent) != int(checksums[block]):
                return block
            if extent[int(lengths[block]) :].any():
                return -1 - block
            return None

        for result in verifier.map(one, range(b - a)):
            if result is not None:
                if result >= 0:
                    raise QemFormatError(
                        qem.path, "block checksum mismatch", section="PAYLOAD", block=result
                    )
                raise QemFormatError(
                    qem.path, "nonzero block padding", section="PAYLOAD", block=-1 - result
                )

    def run(i: int, device_bytes: Any, stream: Any) -> None:
        a, b = batches[i]
        launch(i, a, b, device_bytes, buffer_offsets[i], stream)

    short = lambda path, detail: QemFormatError(path, detail, section="PAYLOAD")  # noqa: E731
    try:
        with staging.OpenFiles([qem.path], short) as files:
            return staging.run_staged(
                files, plans, run, on_read=check if verify else None, threads=threads
            )
    finally:
        if verifier is not None:
            verifier.shutdown()
