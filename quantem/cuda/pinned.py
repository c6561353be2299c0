"""Reused page-locked (pinned) host staging buffers.

Asynchronous host-to-device copies need page-locked memory, and pinning hundreds of
megabytes costs tens of milliseconds, so loaders borrow buffers from this process-wide
cache and give them back when done: the second load in a process pins nothing. The cache
holds at most :data:`MAX_CACHED_BYTES`; :func:`free_cached` returns everything to the
driver.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

MAX_CACHED_BYTES = 2 << 30
SIZE_STEP = 8 << 20  # sizes round up to this step so similar loads share buffers

_lock = threading.Lock()
_cache: dict[int, list[np.ndarray]] = {}


def _allocate(nbytes: int) -> np.ndarray:
    import cupy

    memory = cupy.cuda.alloc_pinned_memory(nbytes)
    # The array keeps `memory` alive through its base object.
    return np.frombuffer(memory, dtype=np.uint8, count=nbytes)


def cached_bytes() -> int:
    """Bytes of pinned memory held by the cache (not lent out)."""
    with _lock:
        return sum(size * len(buffers) for size, buffers in _cache.items())


@contextmanager
def borrow(count: int, nbytes: int) -> Iterator[list[np.ndarray]]:
    """Lend ``count`` pinned ``uint8`` buffers of at least ``nbytes`` each; they return on exit."""
    nbytes = max(SIZE_STEP, -(-nbytes // SIZE_STEP) * SIZE_STEP)
    taken: list[np.ndarray] = []
    with _lock:
        spare = _cache.get(nbytes, [])
        while spare and len(taken) < count:
            taken.append(spare.pop())
    try:
        while len(taken) < count:
            taken.append(_allocate(nbytes))
        yield taken
    finally:
        with _lock:
            held = sum(size * len(buffers) for size, buffers in _cache.items())
            for buffer in taken:
                if held + nbytes <= MAX_CACHED_BYTES:
                    _cache.setdefault(nbytes, []).append(buffer)
                    held += nbytes
        taken.clear()


def free_cached() -> None:
    """Drop every cached buffer and give the pinned memory back to the driver."""
    with _lock:
        _cache.clear()
    try:
        import cupy
    except ImportError:
        return
    cupy.get_default_pinned_memory_pool().free_all_blocks()
