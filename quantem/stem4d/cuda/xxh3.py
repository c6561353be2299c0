"""Checksum verification on the GPU (XXH3-64 of byte ranges, ``xxh3.cu``): ``.qem`` block
extents, and ARINA raw chunks for ``verify_source`` (:mod:`quantem.stem4d.cuda.hdf5_pipeline`).

Ranges longer than 240 bytes are hashed by the kernel (one warp each); shorter ones, and
empty extents, are flagged for the host, which hashes them with the xxhash library (the
same function the writer used), so every block is verified exactly once either way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

SOURCE_FILE = "xxh3.cu"
WARPS_PER_CTA = 8
FLAG_OK = 0
FLAG_MISMATCH = 1
FLAG_PADDING = 2
FLAG_HOST = 3
MIDSIZE_MAX = 240


def verify_on_device(
    data: Any,
    starts: np.ndarray,
    extents: np.ndarray,
    lengths: np.ndarray,
    expected: np.ndarray,
    flags: Any,
    stream: Any = None,
) -> None:
    """Enqueue the hash of ``data[starts[k] : starts[k] + extents[k]]`` for every k.

    The four per-block inputs are host arrays, or device arrays of the kernel's types
    (int64 starts, extents, lengths; uint64 expected) that the caller already checked.

    ``flags`` (device int32, len(starts)) receives 0, ``FLAG_MISMATCH``, ``FLAG_PADDING``
    (bytes after ``lengths[k]`` not zero) or ``FLAG_HOST`` (too short for the kernel).
    Starts may be at any byte (the kernel funnel-shifts aligned loads); ``data`` must be
    a device allocation covering the aligned 8-byte words that hold each range.
    """
    import cupy

    from quantem.stem4d.cuda.module_loader import load_module

    n = int(starts.size)
    if n == 0:
        return

    def device(values: Any, dtype: Any) -> Any:
        if isinstance(values, cupy.ndarray):
            return values  # already uploaded (int64 / uint64, contiguous) by the caller
        return cupy.asarray(np.ascontiguousarray(values, dtype=dtype))

    kernel = load_module(SOURCE_FILE, {}).get_function("xxh3_verify")
    with stream if stream is not None else cupy.cuda.Stream.null:
        args = (
            data,
            device(starts, np.int64),
            device(extents, np.int64),
            device(lengths, np.int64),
            device(expected, np.uint64),
            np.int32(n),
            flags,
        )
        grid = -(-n // WARPS_PER_CTA)
        kernel((grid,), (32 * WARPS_PER_CTA,), args)


def needs_host(extents: np.ndarray) -> np.ndarray:
    """Which extents the kernel leaves to the host (240 bytes or fewer, empty included)."""
    return np.asarray(extents) <= MIDSIZE_MAX
