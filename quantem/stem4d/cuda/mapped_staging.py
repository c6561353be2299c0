"""Mapped staging: the GPU copies file ranges straight out of the page cache.

For a warm page cache the pread staging (``quantem.stem4d.cuda.staging``) is bound by the CPU
copying every compressed byte from the page cache into pinned memory. Here each range is
instead mapped read-only (``mmap``), page-locked in place with ``cudaHostRegister``
(read-only flag) and copied to the device by DMA; no CPU touches the bytes. Ranges are
registered a few ahead by a thread pool while earlier ranges are copied and decoded, and
each is unregistered and unmapped once its copy has completed.

Measured on the H200 against pread staging, it is no faster: each range pays a
registration and an unregistration, which costs about what the CPU copy it replaces
does. It is therefore an explicit option
(``staging="mapped"``), not the default.

The CPU never dereferences a mapping, so a file truncated underneath cannot fault the
process: registration of pages past the end fails with a CUDA error instead, which
:class:`MappedStagingUnavailable` reports for the caller to fall back to pread staging.
The kernels validate every chunk inside the copied range before reading it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from quantem.stem4d.cuda import staging as _staging
from quantem.stem4d.cuda.staging import DeviceLanes, StageStats
from quantem.stem4d.io.page_cache import PAGE_SIZE, ReadOnlyMapping, page_ceil, page_floor

#: ``cudaHostRegisterReadOnly``: the device only reads the pages (required for a
#: read-only file mapping).
HOST_REGISTER_READ_ONLY = 0x08
#: ``cudaHostRegisterPortable``: pinned for every context, whichever device the
#: registering worker thread has current.
HOST_REGISTER_PORTABLE = 0x01
#: Ranges registered ahead of the one being copied.
REGISTER_AHEAD = 4
#: The largest range mapped staging handles; a batch above it uses pread staging.
MAX_RANGE_BYTES = 1 << 30


_live_lock = threading.Lock()
_live_registrations = 0


def live_registrations() -> int:
    """Ranges currently page-locked by this module (0 whenever no load is running)."""
    return _live_registrations


def _count(delta: int) -> None:
    global _live_registrations
    with _live_lock:
        _live_registrations += delta


class MappedStagingUnavailable(RuntimeError):
    """A range could not be mapped or page-locked; the load should use pread staging."""


@dataclass(frozen=True)
class FileRange:
    """``length`` bytes of file ``file`` from the page-aligned ``offset``."""

    file: int
    offset: int
    length: int


def covering_range(file: int, lo: int, hi: int) -> FileRange:
    """The page-aligned range of ``file`` covering bytes ``[lo, hi)``."""
    start = page_floor(lo)
    return FileRange(file, start, hi - start)


class _Registered:
    """One mapped, page-locked range; :meth:`release` undoes both (idempotent)."""

    def __init__(self, fd: int, r: FileRange) -> None:
        import cupy

        self.mapping = ReadOnlyMapping(fd, r.offset, r.length)
        self.locked_bytes = page_ceil(r.length)
        self.registered = False
        try:
            cupy.cuda.runtime.hostRegister(
                self.mapping.address,
                self.locked_bytes,
                HOST_REGISTER_READ_ONLY | HOST_REGISTER_PORTABLE,
            )
        except Exception as exc:  # CUDARuntimeError: unsupported flag, pages past the end
            self.mapping.close()
            raise MappedStagingUnavailable(
                f"cudaHostRegister of {r.length} mapped bytes failed: {exc}"
            ) from exc
        self.registered = True
        _count(+1)

    @property
    def address(self) -> int:
        assert self.mapping.address is not None
        return self.mapping.address

    def release(self) -> None:
        import cupy

        if self.registered:
            self.registered = False
            _count(-1)
            cupy.cuda.runtime.hostUnregister(self.mapping.address)
        self.mapping.close()


def run_mapped(
    fds: Sequence[int],
    ranges: Sequence[FileRange],
    launch: Callable[[int, Any, Any], None],
    *,
    threads: int | None = None,
) -> StageStats:
    """Copy every range to the device and ``launch(i, device_bytes, compute_stream)`` it.

    ``device_bytes`` is a device uint8 array holding range ``i`` (file offset
    ``ranges[i].offset`` at index 0). Returns after all launched work has finished and
    every range is unregistered and unmapped. Raises :class:`MappedStagingUnavailable`
    when a range cannot be mapped or page-locked (nothing has been launched for it).
    """
    stats = StageStats(batches=len(ranges))
    if not ranges:
        return stats
    if max(r.length for r in ranges) > MAX_RANGE_BYTES:
        raise MappedStagingUnavailable(f"a range exceeds {MAX_RANGE_BYTES} bytes")
    slot_bytes = page_ceil(max(r.length for r in ranges))
    stats.copied_bytes = int(sum(r.length for r in ranges))
    threads = max(1, min(REGISTER_AHEAD, threads or os.cpu_count() or 1))
    lanes = DeviceLanes(len(ranges), slot_bytes)
    wall0 = time.perf_counter()
    register_seconds = [0.0] * len(ranges)
    live: dict[int, _Registered] = {}

    def register(i: int) -> _Registered:
        t0 = time.perf_counter()
        entry = _Registered(fds[ranges[i].file], ranges[i])
        register_seconds[i] = time.perf_counter() - t0
        return entry

    def release(i: int, entry: _Registered) -> None:
        lanes.h2d_done[i].synchronize()
        entry.release()

    with ThreadPoolExecutor(threads) as registrar, ThreadPoolExecutor(1) as releaser:
        first = range(min(REGISTER_AHEAD, len(ranges)))
        futures = {i: registrar.submit(register, i) for i in first}
        releases = []
        try:
            for i, r in enumerate(ranges):
                live[i] = futures.pop(i).result()
                ahead = i + REGISTER_AHEAD
                if ahead < len(ranges):
                    futures[ahead] = registrar.submit(register, ahead)
                lanes.copy_and_launch(i, live[i].address, r.length, launch)
                releases.append(releaser.submit(release, i, live.pop(i)))
        finally:
            for future in futures.values():
                future.cancel()
            lanes.drain()
            for future in releases:
                future.result()
            for future in futures.values():  # registered ahead but never copied
                if not future.cancelled():
                    with contextlib.suppress(MappedStagingUnavailable):
                        future.result().release()
            for entry in live.values():
                entry.release()
    stats.read_seconds = float(sum(register_seconds))
    stats.wall_seconds = time.perf_counter() - wall0
    return stats


def run_registered(
    batches: Sequence[Sequence[tuple[int, int, int, int]]],
    slot_bytes: int,
    address: Callable[[int, int], int],
    launch: Callable[[int, Any, Any], None],
    *,
    launch_bytes: Sequence[int] | None = None,
    profile: bool | None = None,
    after_copies: Callable[[], None] | None = None,
) -> StageStats:
    """Copy batches out of registered host pages and ``launch(i, device_bytes, stream)``.

    Batch ``i`` is a list of file reads ``(file, file_offset, buffer_offset, length)``;
    ``address(file, file_offset)`` gives the host address of a byte of a registered range
    (and may wait for that file's registration). Each batch is gathered into a device
    slot of ``slot_bytes`` by DMA (one copy per read, no CPU copy) and ``launch`` sees the
    slot up to the batch's last byte (or ``launch_bytes[i]`` bytes, when given). Returns once all launched work has finished;
    ``stats.read_seconds`` is the time spent waiting for addresses (registrations).
    ``after_copies()`` runs once every copy is done, while the last launches may still
    run (host checks of the copied pages overlap the decode); what it raises is raised
    after the launched work has finished.
    """
    stats = StageStats(batches=len(batches))
    if not batches:
        return stats
    profile = _staging.PROFILE if profile is None else profile
    lanes = DeviceLanes(len(batches), slot_bytes, profile=profile)
    wall0 = time.perf_counter()
    waited = 0.0
    try:
        for i, reads in enumerate(batches):
            t0 = time.perf_counter()
            copies = [(at, address(file, offset), length) for file, offset, at, length in reads]
            waited += time.perf_counter() - t0
            used = (
                max((at + length for _, _, at, length in reads), default=0)
                if launch_bytes is None
                else int(launch_bytes[i])
            )
            stats.copied_bytes += sum(length for _, _, _, length in reads)
            lanes.copy_many_and_launch(i, copies, used, launch)
        if after_copies is not None:
            lanes.copy_stream.synchronize()
            after_copies()
    finally:
        lanes.drain()
    stats.read_seconds = waited
    stats.wall_seconds = time.perf_counter() - wall0
    if profile:
        stats.extra.update({"host_wait_registration_s": waited, **lanes.timeline(len(batches))})
    return stats


__all__ = [
    "PAGE_SIZE",
    "FileRange",
    "MappedStagingUnavailable",
    "covering_range",
    "live_registrations",
    "run_mapped",
    "run_registered",
]
