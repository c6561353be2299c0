"""Staged host-to-device transfer: parallel pread into pinned memory, async copy, launch.

Work comes in batches. For batch ``i`` a reader thread fills a reused page-locked buffer
(``os.preadv`` straight into pinned memory, the reads spread over a thread pool), runs the
caller's ``on_read`` hook there (e.g. checksum verification, which overlaps the GPU work),
then the main thread copies the buffer to a device staging buffer on a copy stream and the
caller's ``launch`` enqueues the kernels of batch ``i`` on a compute stream (``READERS``
batches are read at once). Events order the reuse of every buffer: reading of the next
batches, copying of ``i + 1`` and decoding of ``i`` overlap, and the host waits on the GPU
only to reuse a pinned buffer.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from quantem.stem4d.cuda import pinned

PINNED_SLOTS = 4
DEVICE_SLOTS = 2
#: Batches read at the same time (each spread over the pread thread pool). Two keep the
#: pool busy across the end of one batch's reads and the start of the next.
READERS = 2
#: Reads are at most this long. Every read is a trip through the GIL, so many small
#: reads serialise the threads: few large pieces keep the pool at the page cache's speed.
READ_PIECE_BYTES = 8 << 20
CUDA_MEMCPY_HOST_TO_DEVICE = 1
#: Record a per-batch timeline (host clocks and timing CUDA events) in ``StageStats.extra``;
#: benchmarks switch it on, loads leave it off (timing events cost a little).
PROFILE = False


_pools_lock = threading.Lock()
_pools: dict[tuple[str, int], ThreadPoolExecutor] = {}


def thread_pool(kind: str, threads: int) -> ThreadPoolExecutor:
    """The process-wide pool of ``threads`` workers for ``kind`` (``"pread"`` pieces or
    ``"reader"`` batches), created on first use and kept: starting 18 threads cost a
    first load ~0.12 s on the H200 VM and every later load a few milliseconds."""
    key = (kind, int(threads))
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            pool = ThreadPoolExecutor(int(threads), thread_name_prefix=f"quantem-{kind}")
            _pools[key] = pool
    return pool


def reader_kind(device: int) -> str:
    """The reader pool of ``device``: each GPU of a sharded load has its own batch readers
    (the pread piece pool is shared: the host's read bandwidth is one floor for all)."""
    return "reader" if int(device) == 0 else f"reader-{int(device)}"


#: The pools :func:`prestart_threads` has started (their threads are kept).
_prestarted: set[tuple[str, int]] = set()


def prestart_threads(threads: int | None = None, devices: Sequence[int] = (0,)) -> None:
    """Start the staging pools' threads in the background (a loader calls this first, so
    a first load's thread starts overlap opening the source). Returns at once; once a
    pool's threads were started, later calls leave it be (a warm load paid 0.6 ms for a
    new starter thread and its busy tasks)."""
    threads = threads or min(32, os.cpu_count() or 4)
    wanted = [("pread", threads)] + [(reader_kind(d), READERS) for d in devices]
    with _pools_lock:
        kinds = [kind for kind in wanted if kind not in _prestarted]
        _prestarted.update(kinds)
    if not kinds:
        return

    def start() -> None:
        for kind, n in kinds:
            pool = thread_pool(kind, n)
            # Busy tasks make the pool start a thread for each (idle ones are reused).
            for _ in range(n):
                try:
                    pool.submit(time.sleep, 0.002)
                except RuntimeError:  # the interpreter is shutting down
                    return

    threading.Thread(target=start, name="quantem-prestart", daemon=True).start()


@dataclass
class Batch:
    """One batch: file reads ``(file, file_offset, buffer_offset, length)`` and its size.

    ``copy_bytes`` bytes from the start of the pinned buffer go to the device (reads plus
    anything ``on_read`` writes after them).
    """

    reads: list[tuple[int, int, int, int]]
    copy_bytes: int


@dataclass
class StageStats:
    """Seconds spent reading (summed over batches), wall seconds, bytes, batch count."""

    read_seconds: float = 0.0
    wall_seconds: float = 0.0
    copied_bytes: int = 0
    batches: int = 0
    extra: dict[str, float] = field(default_factory=dict)
    #: The staging that moved the bytes, when a caller chose between several.
    staging: str = ""
    #: Why a preferred staging gave way to pread, if it did.
    fallback: str | None = None
    #: Bytes registered by this call (registered staging).
    registered_bytes: int = 0


def plan_batches(
    nbytes: np.ndarray,
    batch_bytes: int,
    max_items: int | None = None,
    *,
    first_bytes: int | None = None,
) -> list[tuple[int, int]]:
    """Split items of ``nbytes`` bytes (frames, blocks) into consecutive ``(start, stop)``
    runs of at most ``batch_bytes`` (and at most ``max_items`` items, when given); a single
    item larger than that gets a run of its own. With ``first_bytes``, the first run holds
    at most that many bytes and each next one at most twice the one before, up to
    ``batch_bytes`` (a ramp: the first batch reaches the device sooner).
    """
    if max_items is not None and max_items < 1:
        raise ValueError(f"max_items must be >= 1, got {max_items}")
    if first_bytes is not None and first_bytes < 1:
        raise ValueError(f"first_bytes must be >= 1, got {first_bytes}")
    n = int(nbytes.size)
    if n == 0:
        return []
    ends = np.cumsum(nbytes, dtype=np.int64)
    batches = []
    start = 0
    base = 0
    limit = batch_bytes if first_bytes is None else min(first_bytes, batch_bytes)
    while start < n:
        stop = int(np.searchsorted(ends, base + limit, side="right"))
        limit = min(2 * limit, batch_bytes)
        stop = max(stop, start + 1)
        if max_items is not None:
            stop = min(stop, start + int(max_items))
        batches.append((start, stop))
        base = int(ends[stop - 1])
        start = stop
    return batches


def split_reads(
    file: int,
    file_offset: int,
    buffer_offset: int,
    length: int,
    piece_bytes: int | None = None,
) -> list[tuple[int, int, int, int]]:
    """One contiguous file range as reads of at most ``piece_bytes`` (default
    :data:`READ_PIECE_BYTES`)."""
    piece_bytes = piece_bytes or READ_PIECE_BYTES
    return [
        (file, file_offset + done, buffer_offset + done, min(piece_bytes, length - done))
        for done in range(0, length, piece_bytes)
    ]


class OpenFiles:
    """Read-only descriptors of the files a load reads; ``read_into`` fills a buffer."""

    def __init__(
        self, paths: Sequence[str | os.PathLike], short_read_error: Callable[[str, str], Exception]
    ) -> None:
        self.paths = [os.fspath(p) for p in paths]
        self._short = short_read_error
        self.fds: list[int] = []
        try:
            for path in self.paths:
                self.fds.append(os.open(path, os.O_RDONLY))
        except OSError:
            self.close()
            raise

    def read_into(self, view: memoryview, file: int, file_offset: int) -> None:
        done = 0
        total = len(view)
        while done < total:
            got = os.preadv(self.fds[file], [view[done:]], file_offset + done)
            if got <= 0:
                raise self._short(
                    self.paths[file],
                    f"file ends before the expected data ({total} bytes at offset {file_offset})",
                )
            done += got

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []

    def __enter__(self) -> OpenFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DeviceLanes:
    """The device side both stagings share: a copy stream, a compute stream, one pair of
    events per batch and ``DEVICE_SLOTS`` rotating device buffers.

    :meth:`copy_and_launch` enqueues batch ``i``: the copy into a slot once the kernels
    that last used it are done, then ``launch`` on the compute stream after the copy.
    """

    def __init__(self, n_batches: int, slot_bytes: int, profile: bool = False) -> None:
        import cupy

        # Work the caller queued on other streams (zeroed outputs) must land before ours.
        cupy.cuda.runtime.deviceSynchronize()
        self.copy_stream = cupy.cuda.Stream(non_blocking=True)
        self.compute_stream = cupy.cuda.Stream(non_blocking=True)
        untimed = not profile
        self.h2d_done = [cupy.cuda.Event(disable_timing=untimed) for _ in range(n_batches)]
        self.work_done = [cupy.cuda.Event(disable_timing=untimed) for _ in range(n_batches)]
        self.profile = profile
        # With profiling: when each copy and each launch started on the GPU.
        self.h2d_start = [cupy.cuda.Event() for _ in range(n_batches)] if profile else []
        self.work_start = [cupy.cuda.Event() for _ in range(n_batches)] if profile else []
        self.origin = cupy.cuda.Event() if profile else None
        if profile:
            self.origin.record(self.copy_stream)
        n_device = min(DEVICE_SLOTS, n_batches)
        self.slots = [cupy.empty(slot_bytes, dtype=cupy.uint8) for _ in range(n_device)]

    def copy_and_launch(
        self, i: int, host_pointer: int, nbytes: int, launch: Callable[[int, Any, Any], None]
    ) -> None:
        self.copy_many_and_launch(i, [(0, host_pointer, nbytes)], nbytes, launch)

    def copy_many_and_launch(
        self,
        i: int,
        copies: Sequence[tuple[int, int, int]],
        nbytes: int,
        launch: Callable[[int, Any, Any], None],
    ) -> None:
        """:meth:`copy_and_launch` for a batch gathered from several host ranges:
        ``copies`` are ``(slot_offset, host_pointer, length)``; ``launch`` sees the first
        ``nbytes`` of the slot."""
        import cupy

        n_device = len(self.slots)
        slot = self.slots[i % n_device]
        if i >= n_device:
            self.copy_stream.wait_event(self.work_done[i - n_device])
        if self.profile:
            self.h2d_start[i].record(self.copy_stream)
        base = slot.data.ptr
        stream = self.copy_stream.ptr
        for at, host_pointer, length in copies:
            cupy.cuda.runtime.memcpyAsync(
                base + at, host_pointer, length, CUDA_MEMCPY_HOST_TO_DEVICE, stream
            )
        self.h2d_done[i].record(self.copy_stream)
        self.compute_stream.wait_event(self.h2d_done[i])
        if self.profile:
            self.work_start[i].record(self.compute_stream)
        launch(i, slot[:nbytes], self.compute_stream)
        self.work_done[i].record(self.compute_stream)

    def drain(self) -> None:
        """Wait for everything enqueued on both streams."""
        self.compute_stream.synchronize()
        self.copy_stream.synchronize()

    def timeline(self, n: int) -> dict[str, float]:
        """GPU-side totals of a profiled run (after :meth:`drain`), in seconds: copy-engine
        busy time, compute busy time, compute idle between the first launch and the last
        completion, and the span from the first copy to the last completion."""
        import cupy

        def at(event: Any) -> float:
            return cupy.cuda.get_elapsed_time(self.origin, event) / 1e3

        if not self.profile or n == 0:
            return {}
        h2d = [(at(self.h2d_start[i]), at(self.h2d_done[i])) for i in range(n)]
        work = [(at(self.work_start[i]), at(self.work_done[i])) for i in range(n)]
        busy_work = sum(b - a for a, b in work)
        return {
            "gpu_h2d_busy_s": sum(b - a for a, b in h2d),
            "gpu_compute_busy_s": busy_work,
            "gpu_compute_idle_s": (work[-1][1] - work[0][0]) - busy_work,
            "gpu_first_copy_s": h2d[0][0],
            "gpu_span_s": work[-1][1] - h2d[0][0],
        }


def run_staged(
    files: OpenFiles,
    batches: Sequence[Batch],
    launch: Callable[[int, Any, Any], None],
    *,
    on_read: Callable[[int, np.ndarray], None] | None = None,
    threads: int | None = None,
    profile: bool | None = None,
) -> StageStats:
    """Move every batch to the device and ``launch(i, device_bytes, compute_stream)`` it.

    Returns after the compute stream has finished all launched work. With ``profile``
    (default :data:`PROFILE`), ``stats.extra`` holds the timeline totals (host: seconds
    the main thread waited for reads, readers waited for a free pinned slot, main-thread
    seconds spent enqueueing; GPU: :meth:`DeviceLanes.timeline`).
    """

    stats = StageStats(batches=len(batches))
    if not batches:
        return stats
    profile = PROFILE if profile is None else profile
    slot_bytes = max(b.copy_bytes for b in batches)
    stats.copied_bytes = int(sum(b.copy_bytes for b in batches))
    threads = threads or min(32, os.cpu_count() or 4)
    lanes = DeviceLanes(len(batches), slot_bytes, profile=profile)
    wall0 = time.perf_counter()
    read_seconds = [0.0] * len(batches)
    slot_wait = [0.0] * len(batches)
    main_wait = 0.0
    enqueue = 0.0
    n_pinned = min(PINNED_SLOTS, len(batches))

    import cupy

    pool = thread_pool("pread", threads)
    device = cupy.cuda.Device().id
    reader = thread_pool(reader_kind(device), READERS)
    with pinned.LazySlots(n_pinned, slot_bytes, device) as slots:

        def read_batch(i: int) -> np.ndarray:
            slot = slots.get(i % n_pinned)  # page-locked on first use (a first load)
            t0 = time.perf_counter()
            if i >= n_pinned:
                lanes.h2d_done[i - n_pinned].synchronize()  # the slot's previous copy is done
            slot_wait[i] = time.perf_counter() - t0
            t0 = time.perf_counter()
            view = memoryview(slot)
            pieces = [
                pool.submit(files.read_into, view[r[2] : r[2] + r[3]], r[0], r[1])
                for r in batches[i].reads
            ]
            # Every piece finishes (or fails) before the slot can be handed on.
            wait(pieces)
            for piece in pieces:
                piece.result()
            if on_read is not None:
                on_read(i, slot)
            read_seconds[i] = time.perf_counter() - t0
            return slot

        futures = (
            {i: reader.submit(read_batch, i) for i in range(n_pinned - 1)} if n_pinned > 1 else {}
        )
        try:
            for i, batch in enumerate(batches):
                if i not in futures:
                    futures[i] = reader.submit(read_batch, i)
                t0 = time.perf_counter()
                slot = futures.pop(i).result()
                t1 = time.perf_counter()
                main_wait += t1 - t0
                ahead = i + n_pinned - 1
                if n_pinned > 1 and ahead < len(batches) and ahead not in futures:
                    futures[ahead] = reader.submit(read_batch, ahead)
                lanes.copy_and_launch(i, slot.ctypes.data, batch.copy_bytes, launch)
                enqueue += time.perf_counter() - t1
        finally:
            for future in futures.values():
                future.cancel()
            # The pools outlive this call: reads still running must end before their
            # pinned slots go back to the cache.
            wait(list(futures.values()))
            lanes.drain()
    stats.read_seconds = float(sum(read_seconds))
    stats.wall_seconds = time.perf_counter() - wall0
    if profile:
        stats.extra.update(
            {
                "host_main_wait_read_s": main_wait,
                "host_enqueue_s": enqueue,
                "host_slot_wait_s": float(sum(slot_wait)),
                **lanes.timeline(len(batches)),
            }
        )
    return stats
