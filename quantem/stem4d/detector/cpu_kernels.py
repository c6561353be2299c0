"""CPU detector kernels (numba): per-frame masked sums, the sum over frames, first moments.

This module is the CPU half of the backend kernel interface of ``docs/detector.md``
(the CUDA half is ``quantem.stem4d.cuda.detector_kernels``). Every function takes the dense 4D
array ``(scan_r, scan_c, det_r, det_c)`` and, where it applies, a boolean detector mask
that the caller has already intersected with the acquisition's validity.

Exactness rules
---------------
* Unsigned integer data (uint8, uint16, uint32, including ``det_bin``'d uint32) is
  accumulated in uint64, so every result is the exact integer sum.
* Float data (float32, float64) is accumulated in float64 in a fixed order that does not
  depend on the number of threads, so results are bit-for-bit reproducible (but rounded).

The kernels are serial numba functions that release the GIL; each call splits its frames
into ranges and runs them on a thread pool made for that call (``threads`` workers,
default: the CPUs this process may use). Ranges write disjoint outputs, so results never
depend on the thread count. Plain threads rather than numba's ``parallel=True`` keep the
kernels fork-safe (no OpenMP runtime is started), cheap to compile, and quick on small
inputs, which run inline.

Speed
-----
Where a frame's pixels are contiguous in memory (dense C-order data, or a scan
region of it) and the data is uint8/uint16:

* sums run in uint32 partials, each over at most :func:`narrow_run_limit` values so none
  can overflow, then added in uint64: the same exact integer, twice the vector lanes;
* masked sums read the flattened frame as spans (:func:`mask_spans`: a full or ADF mask
  is a few long spans, not one run per row);
* the CoM's column moment comes from per-column sums at the end of each frame, not from
  a multiplication per pixel;
* the masked sum and the CoM prefetch the pixels they will read in a later frame
  (:mod:`quantem.stem4d.detector.cpu_prefetch`), which one core needs to stream uint16 near the
  rate at which it streams uint64 (the masked sum only for a mask of under half the frame:
  longer runs the hardware prefetcher follows);
* the masked sum reads four frames per pass (four streams in flight a core: one stream
  reads memory at about half the rate);
* the frame sum adds four frames per pass over one flat uint32 partial per frame range.

Float and uint32 data keep one float64/uint64 accumulator added strictly in pixel order
(their masked sums walk the same spans, which changes no addition), and so do frames
that are not contiguous: float results are the same bits as before these paths existed.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numba as nb
import numpy as np

from quantem.stem4d.detector.cpu_prefetch import frames_ahead, prefetch_pixels, prefetch_steps
from quantem.stem4d.detector.dtypes import SUPPORTED_DTYPES, accumulator_dtype

#: The frame sum splits the frames into at most this many chunks, one partial sum each.
#: The number is fixed (not the thread count) so float results never depend on threads.
SUM_FRAMES_MAX_CHUNKS = 64

#: Upper bound on the memory the frame sum's partial sums may take.
SUM_FRAMES_PARTIAL_BYTES = 256 * 1024 * 1024

#: Below this many pixel visits a call runs in the calling thread: a pool costs more.
PARALLEL_MIN_WORK = 1 << 20

#: Frame ranges per worker thread, for load balance across uneven cores.
CHUNKS_PER_THREAD = 4


def mask_runs(mask: np.ndarray) -> np.ndarray:
    """Encode a boolean 2D mask as runs ``(row, start_col, stop_col)`` (int64, shape (n, 3)).

    Disk and annulus masks are one or two runs per detector row, so summing contiguous
    runs lets the inner loop stream (and vectorise) instead of gathering pixel by pixel.
    """
    mask = np.asarray(mask, dtype=bool)
    padded = np.zeros((mask.shape[0], mask.shape[1] + 2), dtype=np.int8)
    padded[:, 1:-1] = mask
    edges = np.diff(padded, axis=1)
    start_rows, start_cols = np.nonzero(edges == 1)
    _, stop_cols = np.nonzero(edges == -1)
    # np.nonzero walks row-major, so starts and stops pair up in order.
    return np.ascontiguousarray(
        np.stack([start_rows, start_cols, stop_cols], axis=1).astype(np.int64)
    ).reshape(-1, 3)


#: uint32 partial sums are exact while they stay at or below this.
_UINT32_MAX = 2**32 - 1


def narrow_run_limit(dtype: np.dtype | str) -> int:
    """How many values of ``dtype`` a uint32 partial sum may take exactly (0: never narrow).

    ``(2**32 - 1) // top`` for uint8 and uint16 data (``top`` the largest value of the
    type): 16843009 and 65537 values. Every other type returns 0 (uint64/float64 only).
    """
    dtype = np.dtype(dtype)
    if dtype.kind != "u" or dtype.itemsize > 2:
        return 0
    return _UINT32_MAX // int(np.iinfo(dtype).max)


def mask_spans(mask: np.ndarray) -> np.ndarray:
    """Encode a boolean 2D mask as spans ``(start, stop)`` of its row-major flattening.

    Rows that the mask covers whole merge with their neighbours: the complement of a
    disk (an ADF detector reaching the edge) is about one span per disk row.
    """
    flat = np.asarray(mask, dtype=bool).reshape(-1)
    padded = np.zeros(flat.size + 2, dtype=np.int8)
    padded[1:-1] = flat
    edges = np.diff(padded)
    starts = np.flatnonzero(edges == 1)
    stops = np.flatnonzero(edges == -1)
    return np.ascontiguousarray(np.stack([starts, stops], axis=1).astype(np.int64)).reshape(-1, 2)


def split_runs(runs: np.ndarray, max_length: int) -> np.ndarray:
    """Cut every run/span (last two columns: start, stop) into pieces of ``<= max_length``."""
    if max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}")
    runs = np.asarray(runs, dtype=np.int64)
    lengths = runs[:, -1] - runs[:, -2]
    if runs.shape[0] == 0 or int(lengths.max()) <= max_length:
        return np.ascontiguousarray(runs)
    pieces = (lengths + max_length - 1) // max_length
    out = np.repeat(runs, pieces, axis=0)
    offset = np.arange(out.shape[0]) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    out[:, -2] = out[:, -2] + offset * max_length
    out[:, -1] = np.minimum(out[:, -2] + max_length, np.repeat(runs[:, -1], pieces))
    return np.ascontiguousarray(out)


def _flat_frames(data4d: np.ndarray) -> np.ndarray | None:
    """``(scan_r, scan_c, det_r * det_c)`` read-only view when each frame is contiguous."""
    scan_r, scan_c, det_r, det_c = data4d.shape
    item = data4d.itemsize
    strides = data4d.strides
    if det_c > 1 and strides[3] != item:
        return None
    if det_r > 1 and strides[2] != det_c * item:
        return None
    return np.lib.stride_tricks.as_strided(
        data4d, (scan_r, scan_c, det_r * det_c), (strides[0], strides[1], item), writeable=False
    )


def _check_data(data4d: np.ndarray) -> np.dtype:
    if not isinstance(data4d, np.ndarray):
        raise TypeError(f"cpu detector kernels need a numpy array, got {type(data4d).__name__}")
    if data4d.ndim != 4:
        raise ValueError(
            f"detector kernels need 4D data (scan_r, scan_c, det_r, det_c), got shape {data4d.shape}"
        )
    return accumulator_dtype(data4d.dtype)


def _check_mask(data4d: np.ndarray, mask2d: np.ndarray) -> np.ndarray:
    mask2d = np.asarray(mask2d)
    if mask2d.dtype != np.bool_:
        raise TypeError(f"kernel masks must be boolean, got {mask2d.dtype}")
    if mask2d.shape != data4d.shape[2:]:
        raise ValueError(
            f"mask shape {mask2d.shape} does not match the detector shape {data4d.shape[2:]}"
        )
    return mask2d


@nb.njit(nogil=True, cache=True)
def _masked_sum_runs(data, runs, zero, out, start, stop):  # pragma: no cover - compiled
    scan_c = data.shape[1]
    n_runs = runs.shape[0]
    for f in range(start, stop):
        i = f // scan_c
        j = f - i * scan_c
        frame = data[i, j]
        acc = zero
        for k in range(n_runs):
            # Indexing a slice from 0 lets numba drop negative-index handling, so the
            # integer loop vectorises; floats still add strictly in order.
            segment = frame[runs[k, 0], runs[k, 1] : runs[k, 2]]
            for c in range(segment.shape[0]):
                acc += segment[c]
        out[i, j] = acc


@nb.njit(nogil=True, cache=True)
def _masked_sum_spans(frames, spans, zero, out, start, stop):  # pragma: no cover - compiled
    # One accumulator, pixels in row-major order: the same additions, in the same order,
    # as _masked_sum_runs (float results are bit-identical), over fewer, longer spans.
    scan_c = frames.shape[1]
    n_spans = spans.shape[0]
    for f in range(start, stop):
        i = f // scan_c
        j = f - i * scan_c
        frame = frames[i, j]
        acc = zero
        for k in range(n_spans):
            segment = frame[spans[k, 0] : spans[k, 1]]
            for c in range(segment.shape[0]):
                acc += segment[c]
        out[i, j] = acc


@nb.njit(nogil=True, cache=True)
def _masked_sum_spans_narrow(
    frames, spans, out, start, stop, ahead, line, block
):  # pragma: no cover - compiled
    # uint8/uint16 only, blocks of at most narrow_run_limit pixels: each uint32 partial
    # is exact. Four frames a pass (four streams in flight a core; ``out`` is flat, one
    # value a frame); before each block, the same pixels of the frames ``ahead`` later are
    # prefetched (``ahead`` 0: none).
    n_spans = spans.shape[0]
    f = start
    while f + 3 < stop:
        x0 = _frame_at(frames, f)
        x1 = _frame_at(frames, f + 1)
        x2 = _frame_at(frames, f + 2)
        x3 = _frame_at(frames, f + 3)
        a0 = a1 = a2 = a3 = np.uint64(0)
        for k in range(n_spans):
            for first in range(spans[k, 0], spans[k, 1], block):
                last = min(first + block, spans[k, 1])
                if ahead:
                    for g in range(4):
                        prefetch_pixels(frames, f + ahead + g, first, last, line)
                s0 = x0[first:last]
                s1 = x1[first:last]
                s2 = x2[first:last]
                s3 = x3[first:last]
                p0 = p1 = p2 = p3 = np.uint32(0)
                for c in range(s0.shape[0]):
                    p0 = np.uint32(p0 + np.uint32(s0[c]))
                    p1 = np.uint32(p1 + np.uint32(s1[c]))
                    p2 = np.uint32(p2 + np.uint32(s2[c]))
                    p3 = np.uint32(p3 + np.uint32(s3[c]))
                a0 += np.uint64(p0)
                a1 += np.uint64(p1)
                a2 += np.uint64(p2)
                a3 += np.uint64(p3)
        out[f] = a0
        out[f + 1] = a1
        out[f + 2] = a2
        out[f + 3] = a3
        f += 4
    while f < stop:
        frame = _frame_at(frames, f)
        acc = np.uint64(0)
        for k in range(n_spans):
            for first in range(spans[k, 0], spans[k, 1], block):
                last = min(first + block, spans[k, 1])
                if ahead:
                    prefetch_pixels(frames, f + ahead, first, last, line)
                segment = frame[first:last]
                part = np.uint32(0)
                for c in range(segment.shape[0]):
                    part = np.uint32(part + np.uint32(segment[c]))
                acc += np.uint64(part)
        out[f] = acc
        f += 1


@nb.njit(nogil=True, cache=True)
def _moments_runs_narrow(
    data, frames, runs, total, sum_r, sum_c, start, stop, ahead, line
):  # pragma: no cover - compiled
    # uint8/uint16 only; runs cut to narrow_run_limit and det_r * top <= 2**32 - 1, so the
    # uint32 row partials and per-column sums are exact. The column moment comes from the
    # per-column sums at the end of the frame: no multiplication per pixel. Each run of
    # frame f + ahead is prefetched before the run of frame f is summed.
    scan_c = data.shape[1]
    det_c = data.shape[3]
    n_runs = runs.shape[0]
    column = np.zeros(det_c, dtype=np.uint32)
    for f in range(start, stop):
        i = f // scan_c
        j = f - i * scan_c
        frame = data[i, j]
        column[:] = 0
        acc_t = np.uint64(0)
        acc_r = np.uint64(0)
        for k in range(n_runs):
            r = runs[k, 0]
            prefetch_pixels(frames, f + ahead, r * det_c + runs[k, 1], r * det_c + runs[k, 2], line)
            segment = frame[r, runs[k, 1] : runs[k, 2]]
            target = column[runs[k, 1] : runs[k, 2]]
            row_part = np.uint32(0)
            for c in range(segment.shape[0]):
                value = np.uint32(segment[c])
                row_part = np.uint32(row_part + value)
                target[c] = np.uint32(target[c] + value)
            acc_t += np.uint64(row_part)
            acc_r += np.uint64(row_part) * np.uint64(r)
        acc_c = np.uint64(0)
        for c in range(det_c):
            acc_c += np.uint64(column[c]) * np.uint64(c)
        total[i, j] = acc_t
        sum_r[i, j] = acc_r
        sum_c[i, j] = acc_c


@nb.njit(nogil=True, cache=True)
def _moments_runs(
    data, runs, row_weight, col_weight, zero, total, sum_r, sum_c, start, stop
):  # pragma: no cover - compiled
    scan_c = data.shape[1]
    n_runs = runs.shape[0]
    for f in range(start, stop):
        i = f // scan_c
        j = f - i * scan_c
        frame = data[i, j]
        acc_t = zero
        acc_r = zero
        acc_c = zero
        for k in range(n_runs):
            r = runs[k, 0]
            segment = frame[r, runs[k, 1] : runs[k, 2]]
            weights = col_weight[runs[k, 1] : runs[k, 2]]
            row_acc = zero
            for c in range(segment.shape[0]):
                value = segment[c]
                row_acc += value
                acc_c += value * weights[c]
            acc_t += row_acc
            acc_r += row_acc * row_weight[r]
        total[i, j] = acc_t
        sum_r[i, j] = acc_r
        sum_c[i, j] = acc_c


@nb.njit(nogil=True, cache=True, inline="always")
def _frame_at(frames, f):  # pragma: no cover - compiled
    row = f // frames.shape[1]
    return frames[row, f - row * frames.shape[1]]


@nb.njit(nogil=True, cache=True)
def _sum_frame_range_narrow(frames, acc, start, stop):  # pragma: no cover - compiled
    # uint8/uint16 into a flat uint32 partial (the caller bounds the frames per partial,
    # so no pixel can pass 2**32 - 1, nor can any intermediate: the sums only grow).
    # Four frames per pass over the partial: a quarter of the partial's loads and stores,
    # four streams in flight (measured: 6.1 -> 10.2 GB/s on one core).
    pixels = frames.shape[2]
    f = start
    while f + 3 < stop:
        a = _frame_at(frames, f)
        b = _frame_at(frames, f + 1)
        c = _frame_at(frames, f + 2)
        d = _frame_at(frames, f + 3)
        for p in range(pixels):
            acc[p] = np.uint32(
                acc[p] + np.uint32(a[p]) + np.uint32(b[p]) + np.uint32(c[p]) + np.uint32(d[p])
            )
        f += 4
    while f < stop:
        a = _frame_at(frames, f)
        for p in range(pixels):
            acc[p] = np.uint32(acc[p] + np.uint32(a[p]))
        f += 1


@nb.njit(nogil=True, cache=True)
def _sum_frame_range(data, acc, start, stop):  # pragma: no cover - compiled
    scan_c = data.shape[1]
    det_r = data.shape[2]
    det_c = data.shape[3]
    for f in range(start, stop):
        i = f // scan_c
        j = f - i * scan_c
        frame = data[i, j]
        for r in range(det_r):
            source = frame[r]
            target = acc[r]
            for c in range(det_c):
                target[c] += source[c]


def default_threads() -> int:
    """Worker threads the kernels use by default: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _parse_threads(threads: int | None) -> int:
    if threads is None:
        return default_threads()
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
    return int(threads)


def _split(n_items: int, n_parts: int) -> list[tuple[int, int]]:
    n_parts = max(1, min(n_parts, n_items))
    return [(k * n_items // n_parts, (k + 1) * n_items // n_parts) for k in range(n_parts)]


def _run_ranges(task, ranges: list[tuple[int, int]], threads: int) -> None:
    """Run ``task(start, stop)`` for every range, on ``threads`` threads (the GIL is free).

    A pool is made per call (not kept at module level), so a process forked while no
    call runs inherits no worker state; small inputs run inline without any pool.
    """
    if threads == 1 or len(ranges) <= 1:
        for start, stop in ranges:
            task(start, stop)
        return
    with ThreadPoolExecutor(max_workers=min(threads, len(ranges))) as pool:
        for future in [pool.submit(task, start, stop) for start, stop in ranges]:
            future.result()


def _frame_ranges(data4d: np.ndarray, work_per_frame: int, threads: int) -> list[tuple[int, int]]:
    n_frames = data4d.shape[0] * data4d.shape[1]
    if n_frames == 0:
        return []
    if n_frames * max(work_per_frame, 1) < PARALLEL_MIN_WORK:
        return [(0, n_frames)]
    return _split(n_frames, threads * CHUNKS_PER_THREAD)


def masked_sum(
    data4d: np.ndarray, mask2d_bool: np.ndarray, *, threads: int | None = None
) -> np.ndarray:
    """Sum of each frame over the pixels where ``mask2d_bool`` is True.

    Returns
    -------
    numpy.ndarray
        ``(scan_r, scan_c)``, uint64 for integer data (exact), float64 for float data.
    """
    acc = _check_data(data4d)
    mask = _check_mask(data4d, mask2d_bool)
    threads = _parse_threads(threads)
    out = np.zeros(data4d.shape[:2], dtype=acc)
    zero = acc.type(0)
    ranges = _frame_ranges(data4d, int(np.count_nonzero(mask)), threads)
    frames = _flat_frames(data4d)
    limit = narrow_run_limit(data4d.dtype)
    if frames is None:  # frames not contiguous (a strided view): row runs, one accumulator
        runs = mask_runs(mask)

        def task(a: int, b: int) -> None:
            _masked_sum_runs(data4d, runs, zero, out, a, b)
    elif limit:
        spans = mask_spans(mask)
        line, block = prefetch_steps(data4d.dtype)
        block = min(block, limit)  # one uint32 partial per block
        n_read = int(np.count_nonzero(mask))
        # Frames are read four at a time, so prefetched a whole group later; a mask of half
        # the frame or more is long runs the hardware prefetcher follows, and prefetching
        # it as well only evicts lines before their use.
        ahead = 4 * frames_ahead(4 * n_read, data4d.dtype) if 2 * n_read < mask.size else 0
        flat_out = out.reshape(-1)

        def task(a: int, b: int) -> None:
            _masked_sum_spans_narrow(frames, spans, flat_out, a, b, ahead, line, block)
    else:
        spans = mask_spans(mask)

        def task(a: int, b: int) -> None:
            _masked_sum_spans(frames, spans, zero, out, a, b)

    _run_ranges(task, ranges, threads)
    return out


def moments(
    data4d: np.ndarray, mask2d_bool: np.ndarray, *, threads: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Zeroth and first moments of each frame over the masked pixels.

    Returns ``(total, sum_r, sum_c)``, each ``(scan_r, scan_c)``: ``total`` is the masked
    sum, ``sum_r = sum(row * value)`` and ``sum_c = sum(col * value)`` with row and column
    indices counted from pixel (0, 0). uint64 for integer data (exact), float64 for floats.
    """
    acc = _check_data(data4d)
    mask = _check_mask(data4d, mask2d_bool)
    threads = _parse_threads(threads)
    det_r, det_c = data4d.shape[2:]
    total = np.zeros(data4d.shape[:2], dtype=acc)
    sum_r = np.zeros_like(total)
    sum_c = np.zeros_like(total)
    limit = narrow_run_limit(data4d.dtype)
    frames = _flat_frames(data4d)
    if limit and det_r <= limit and frames is not None:  # a column sums det_r values
        runs = split_runs(mask_runs(mask), limit)
        line, _ = prefetch_steps(data4d.dtype)
        ahead = frames_ahead(int(np.count_nonzero(mask)), data4d.dtype)

        def task(start: int, stop: int) -> None:
            _moments_runs_narrow(
                data4d, frames, runs, total, sum_r, sum_c, start, stop, ahead, line
            )
    else:
        runs = mask_runs(mask)
        row_weight = np.arange(det_r, dtype=acc)
        col_weight = np.arange(det_c, dtype=acc)
        zero = acc.type(0)

        def task(start: int, stop: int) -> None:
            _moments_runs(
                data4d, runs, row_weight, col_weight, zero, total, sum_r, sum_c, start, stop
            )

    ranges = _frame_ranges(data4d, 2 * int(np.count_nonzero(mask)), threads)
    _run_ranges(task, ranges, threads)
    return total, sum_r, sum_c


def sum_frames(data4d: np.ndarray, *, threads: int | None = None) -> np.ndarray:
    """Sum over all frames, per detector pixel (``(det_r, det_c)``, uint64 or float64).

    Float data: the frames are split into a fixed number of chunks
    (:data:`SUM_FRAMES_MAX_CHUNKS`, fewer for huge detectors), each summed into its own
    partial, and the partials are added in chunk order: the float result does not depend
    on the thread count. Integer data is exact whatever the grouping: uint8/uint16 frames
    are summed into a few uint32 partials (:func:`_sum_frames_narrow`) when they fit.
    """
    acc = _check_data(data4d)
    threads = _parse_threads(threads)
    det_r, det_c = data4d.shape[2:]
    n_frames = data4d.shape[0] * data4d.shape[1]
    if n_frames == 0 or det_r * det_c == 0:
        return np.zeros((det_r, det_c), dtype=acc)
    narrow = _sum_frames_narrow(data4d, threads)
    if narrow is not None:
        return narrow
    per_chunk = det_r * det_c * acc.itemsize
    n_chunks = max(1, min(SUM_FRAMES_MAX_CHUNKS, n_frames, SUM_FRAMES_PARTIAL_BYTES // per_chunk))
    partial = np.zeros((n_chunks, det_r, det_c), dtype=acc)
    chunks = _split(n_frames, n_chunks)

    def task(first: int, last: int) -> None:
        for k in range(first, last):
            _sum_frame_range(data4d, partial[k], *chunks[k])

    if n_frames * det_r * det_c < PARALLEL_MIN_WORK:
        task(0, n_chunks)
    else:
        _run_ranges(task, [(k, k + 1) for k in range(n_chunks)], threads)
    out = partial[0].copy()
    for k in range(1, n_chunks):  # fixed order
        out += partial[k]
    return out


def _sum_frames_narrow(data4d: np.ndarray, threads: int) -> np.ndarray | None:
    """The frame sum of uint8/uint16 data in uint32 partials, or None where not exact.

    One partial per frame range (a few per thread, not a fixed 64: fewer fresh pages to
    fault in and to add up), each range at most :func:`narrow_run_limit` frames so that
    no pixel's uint32 partial can overflow; the partials are then added in uint64.
    """
    limit = narrow_run_limit(data4d.dtype)
    frames = _flat_frames(data4d)
    if not limit or frames is None:
        return None
    det_r, det_c = data4d.shape[2:]
    ranges = _frame_ranges(data4d, det_r * det_c, threads)
    n_frames = data4d.shape[0] * data4d.shape[1]
    n_chunks = max(len(ranges), -(-n_frames // limit))
    if n_chunks * det_r * det_c * 4 > SUM_FRAMES_PARTIAL_BYTES:
        return None
    if n_chunks > len(ranges):
        ranges = _split(n_frames, n_chunks)
    partial = np.zeros((len(ranges), det_r * det_c), dtype=np.uint32)

    def task(first: int, last: int) -> None:
        for k in range(first, last):
            _sum_frame_range_narrow(frames, partial[k], *ranges[k])

    _run_ranges(task, [(k, k + 1) for k in range(len(ranges))], threads)
    return partial.sum(axis=0, dtype=np.uint64).reshape(det_r, det_c)


def frame(data4d: np.ndarray, i: int) -> np.ndarray:
    """Frame ``i`` (row-major scan index) as a view, raw values in the data's dtype."""
    if data4d.ndim != 4:
        raise ValueError(f"detector kernels need 4D data, got shape {data4d.shape}")
    scan_r, scan_c = data4d.shape[:2]
    n_frames = scan_r * scan_c
    if not 0 <= i < n_frames:
        raise IndexError(f"frame index {i} is out of range for {n_frames} frames")
    return data4d[i // scan_c, i % scan_c]


__all__ = [
    "SUPPORTED_DTYPES",
    "accumulator_dtype",
    "default_threads",
    "frame",
    "mask_runs",
    "mask_spans",
    "masked_sum",
    "moments",
    "narrow_run_limit",
    "split_runs",
    "sum_frames",
]
