"""What an HDF5 load plans before it reads: its batches, file spans and chunk bounds.

A load of frames ``[first, last)`` of an ARINA source decides, from the frame index
alone, how its chunks are batched (:func:`~quantem.stem4d.cuda.staging.plan_batches`, the first
batches smaller: :data:`RAMP_FIRST_BYTES`), which file spans each batch reads
(:func:`plan_span_reads`) and where each chunk lands in its batch's buffer. That depends
only on the index's arrays, the frames and the batch sizes, so a process keeps the plans
of its recent loads (:func:`load_plan`) for indexes whose arrays cannot change: read-only
ones, as the frame index of a verified sidecar is (:mod:`quantem.stem4d.io.frame_index` keeps it
while the sidecar and the shards keep their stat; a changed shard gives a new index, and
so a new plan). Planning a full-size acquisition is a sizeable part of a warm load's fixed
cost on the GPU; a kept plan costs a dictionary lookup. Host-only: importable and tested without a GPU.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from quantem.stem4d.cuda.staging import Batch, plan_batches

#: Chunks of one shard whose file gap is at most this many bytes are read as one span
#: (the gap read and ignored): HDF5 puts a B-tree node of a few KiB between runs of
#: chunks, and reading past it is far cheaper than another read call (measured on the
#: H200: per-run reads of ~0.7 MB reach 10-14 GB/s, 64 MiB pieces of a file 42 GB/s).
SPAN_GAP_BYTES = 1 << 20


def plan_span_reads(
    shard: np.ndarray,
    offset: np.ndarray,
    nbytes: np.ndarray,
    piece_bytes: int,
    gap_bytes: int = SPAN_GAP_BYTES,
) -> tuple[list[tuple[int, int, int, int]], np.ndarray, int]:
    """Cover a batch's chunks with few large file spans.

    Consecutive chunks of one shard in increasing file order, with at most ``gap_bytes``
    between them, form one span, read whole (gaps included) in pieces of at most
    ``piece_bytes``. Returns the reads ``(shard, file_offset, buffer_offset, length)``,
    each chunk's start in the buffer (int64) and the buffer's data length.
    """
    n = int(shard.size)
    if n == 0:
        return [], np.zeros(0, dtype=np.int64), 0
    offset = np.asarray(offset, dtype=np.int64)
    ends = offset + np.asarray(nbytes, dtype=np.int64)
    new = np.ones(n, dtype=bool)
    gap = offset[1:] - ends[:-1]
    new[1:] = (shard[1:] != shard[:-1]) | (gap < 0) | (gap > gap_bytes)
    span_of = np.cumsum(new) - 1
    first = np.flatnonzero(new)
    lo = offset[first]
    hi = np.maximum.reduceat(ends, first)
    length = hi - lo
    buffer_at = np.concatenate(([0], np.cumsum(length)[:-1]))
    starts = buffer_at[span_of] + offset - lo[span_of]
    reads = []
    for k in range(first.size):
        file, file_offset, at, size = (
            int(shard[first[k]]),
            int(lo[k]),
            int(buffer_at[k]),
            int(length[k]),
        )
        for done in range(0, size, piece_bytes):
            reads.append((file, file_offset + done, at + done, min(piece_bytes, size - done)))
    return reads, starts, int(length.sum())


def shard_spans(
    shard: np.ndarray, offset: np.ndarray, nbytes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The shards a load reads, in first-use order, and the file span ``[lo, hi)`` each
    one's loaded chunks cover (int64)."""
    ends = offset + nbytes
    if shard.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    if np.all(shard[1:] >= shard[:-1]):  # shards in order: one pass, no sort
        starts = np.concatenate(([0], np.flatnonzero(shard[1:] != shard[:-1]) + 1))
        return (
            shard[starts].astype(np.int64),
            np.minimum.reduceat(offset, starts),
            np.maximum.reduceat(ends, starts),
        )
    files, first, inverse = np.unique(shard, return_index=True, return_inverse=True)
    lo = np.full(files.size, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.zeros(files.size, dtype=np.int64)
    np.minimum.at(lo, inverse, offset)
    np.maximum.at(hi, inverse, ends)
    order = np.argsort(first, kind="stable")
    return files[order].astype(np.int64), lo[order], hi[order]


#: The first batch of a load holds at most this many compressed bytes, each next one
#: twice as many, up to ``batch_bytes``: the device copies the first batch before any
#: decode can start (128 MiB took 2.3 ms on the H200), so a small first batch starts the
#: decode sooner, and the later, larger ones keep the per-batch costs few.
RAMP_FIRST_BYTES = 8 << 20
#: Plans kept per process (least recently used dropped first).
PLANS_KEPT = 8

_plans: OrderedDict[tuple, tuple[weakref.ref, LoadPlan]] = OrderedDict()
_plans_lock = threading.Lock()


@dataclass(frozen=True)
class RegisteredPlan:
    """Registered staging's plan: the shards read in first-use order with the span
    ``[lo, hi)`` of each one's chunks, each batch's reads (one per span, unsplit), each
    chunk's start and end in its batch's device slot (``bounds``, ``(2, n)`` int64) and
    the largest batch's slot bytes."""

    used: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    reads: tuple[list[tuple[int, int, int, int]], ...]
    bounds: np.ndarray
    slot_bytes: int


@dataclass(frozen=True)
class PreadPlan:
    """Pread staging's plan: each batch's reads and pinned bytes (the chunk spans, then
    each chunk's start and end as int64), and ``(at, starts, ends)`` per batch: where the
    bounds go in the buffer and their values."""

    batches: tuple[Batch, ...]
    bounds: tuple[tuple[int, np.ndarray, np.ndarray], ...]


def _frozen(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


class LoadPlan:
    """The plan of one load; each staging's part is made on first use and kept."""

    def __init__(
        self,
        shard: np.ndarray,
        offset: np.ndarray,
        nbytes: np.ndarray,
        batch_bytes: int,
        batch_frames: int | None,
    ) -> None:
        self.shard, self.offset, self.nbytes = shard, offset, nbytes
        first = RAMP_FIRST_BYTES if batch_bytes > RAMP_FIRST_BYTES else None
        self.batches = plan_batches(nbytes, batch_bytes, batch_frames, first_bytes=first)
        self.compressed_bytes = int(nbytes.sum())
        self._lock = threading.Lock()
        self._parts: dict[Any, Any] = {}

    def _part(self, key: Any, make: Callable[[], Any]) -> Any:
        with self._lock:
            found = self._parts.get(key)
        if found is None:
            found = make()
            with self._lock:
                found = self._parts.setdefault(key, found)
        return found

    def first_bad_chunk(self, low: int, high: int) -> int:
        """The first frame (from the load's first) whose chunk length is outside
        ``[low, high]``; -1 when none is."""

        def find() -> int:
            bad = np.flatnonzero((self.nbytes < low) | (self.nbytes > high))
            return int(bad[0]) if bad.size else -1

        return self._part(("bad", low, high), find)

    def registered(self) -> RegisteredPlan:
        return self._part("registered", self._make_registered)

    def device_bounds(self) -> tuple[Any, Any]:
        """The registered plan's chunk starts and ends on the current device (int64
        CuPy arrays), uploaded once per device and kept with the plan (16 bytes a frame:
        4 MiB for 262,144 frames; a 4 MiB upload from pageable memory cost a warm load
        about 0.5 ms)."""
        import cupy

        device = cupy.cuda.Device().id

        def upload() -> Any:
            return cupy.asarray(self.registered().bounds)

        bounds = self._part(("bounds", device), upload)
        return bounds[0], bounds[1]

    def pread(self, piece_bytes: int) -> PreadPlan:
        return self._part(("pread", piece_bytes), lambda: self._make_pread(piece_bytes))

    def _make_registered(self) -> RegisteredPlan:
        shard, offset, nbytes = self.shard, self.offset, self.nbytes
        used, lo, hi = shard_spans(shard, offset, nbytes)
        reads = []
        bounds = np.empty((2, offset.size), dtype=np.int64)
        slot_bytes = 1
        for a, b in self.batches:
            batch_reads, starts, data = plan_span_reads(
                shard[a:b], offset[a:b], nbytes[a:b], 1 << 62
            )
            reads.append(batch_reads)
            bounds[0, a:b] = starts
            slot_bytes = max(slot_bytes, data)
        np.add(bounds[0], nbytes, out=bounds[1])
        return RegisteredPlan(
            _frozen(used), _frozen(lo), _frozen(hi), tuple(reads), _frozen(bounds), slot_bytes
        )

    def _make_pread(self, piece_bytes: int) -> PreadPlan:
        shard, offset, nbytes = self.shard, self.offset, self.nbytes
        batches, bounds = [], []
        for a, b in self.batches:
            reads, starts, data = plan_span_reads(shard[a:b], offset[a:b], nbytes[a:b], piece_bytes)
            at = -(-data // 8) * 8
            bounds.append((at, _frozen(starts), _frozen(starts + nbytes[a:b])))
            batches.append(Batch(reads, at + 16 * (b - a)))
        return PreadPlan(tuple(batches), tuple(bounds))


def _read_only(*arrays: np.ndarray) -> bool:
    return not any(np.asarray(a).flags.writeable for a in arrays)


def load_plan(
    index: Any, first: int, last: int, batch_bytes: int, batch_frames: int | None = None
) -> LoadPlan:
    """The plan of loading frames ``[first, last)`` of ``index`` (a
    :class:`~quantem.stem4d.io.frame_index.FrameIndex`): kept from an earlier load of the same
    index object when its arrays are read-only, else made for this load alone."""
    shard = np.asarray(index.frame_shard[first:last])
    offset = np.asarray(index.frame_offset[first:last], dtype=np.int64)
    nbytes = np.asarray(index.frame_nbytes[first:last], dtype=np.int64)
    if not _read_only(index.frame_shard, index.frame_offset, index.frame_nbytes, offset, nbytes):
        return LoadPlan(shard, offset, nbytes, batch_bytes, batch_frames)
    key = (id(index), int(first), int(last), int(batch_bytes), batch_frames)
    with _plans_lock:
        kept = _plans.get(key)
        if kept is not None and kept[0]() is index:
            _plans.move_to_end(key)
            return kept[1]
    plan = LoadPlan(shard, offset, nbytes, batch_bytes, batch_frames)
    with _plans_lock:
        _plans[key] = (weakref.ref(index), plan)
        _plans.move_to_end(key)
        while len(_plans) > PLANS_KEPT:
            _plans.popitem(last=False)
    return plan


def forget_plans() -> None:
    """Drop every kept plan (tests, and a caller that wants the memory back)."""
    with _plans_lock:
        _plans.clear()
