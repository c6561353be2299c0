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


def _rounded(nbytes: int) -> int:
    return max(SIZE_STEP, -(-nbytes // SIZE_STEP) * SIZE_STEP)


class LazySlots:
    """``count`` pinned buffers of at least ``nbytes``, each taken from the cache or
    allocated when first asked for (:meth:`get`, thread-safe), so a first load starts
    reading into slot 0 while later slots are still being page-locked by the threads that
    first need them. Allocation happens with ``device`` current. Use as a context
    manager; every buffer taken goes back to the cache on exit."""

    def __init__(self, count: int, nbytes: int, device: int | None = None) -> None:
        self.count = count
        self.nbytes = _rounded(nbytes)
        self.device = device
        self._slots: list[np.ndarray | None] = [None] * count
        self._locks = [threading.Lock() for _ in range(count)]

    def get(self, k: int) -> np.ndarray:
        with self._locks[k]:
            slot = self._slots[k]
            if slot is None:
                with _lock:
                    spare = _cache.get(self.nbytes, [])
                    slot = spare.pop() if spare else None
                if slot is None:
                    slot = self._allocate()
                self._slots[k] = slot
            return slot

    def _allocate(self) -> np.ndarray:
        if self.device is None:
            return _allocate(self.nbytes)
        import cupy

        with cupy.cuda.Device(self.device):
            return _allocate(self.nbytes)

    def __enter__(self) -> LazySlots:
        return self

    def __exit__(self, *exc: object) -> None:
        taken = [slot for slot in self._slots if slot is not None]
        self._slots = [None] * self.count
        _give_back(taken, self.nbytes)


def _give_back(taken: list[np.ndarray], nbytes: int) -> None:
    with _lock:
        held = sum(size * len(buffers) for size, buffers in _cache.items())
        for buffer in taken:
            if held + nbytes <= MAX_CACHED_BYTES:
                _cache.setdefault(nbytes, []).append(buffer)
                held += nbytes


@contextmanager
def borrow(count: int, nbytes: int) -> Iterator[list[np.ndarray]]:
    """Lend ``count`` pinned ``uint8`` buffers of at least ``nbytes`` each; they return on exit."""
    nbytes = _rounded(nbytes)
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
        _give_back(taken, nbytes)
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
