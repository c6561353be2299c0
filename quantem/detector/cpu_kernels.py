"""CPU detector kernels (numba): per-frame masked sums, the sum over frames, first moments.

This module is the CPU half of the backend kernel interface of ``docs/detector.md``
(the CUDA half is ``quantem.cuda.detector_kernels``). Every function takes the dense 4D
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
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numba as nb
import numpy as np

from quantem.errors import UnsupportedDtypeError

#: Element types the CPU kernels accept.
SUPPORTED_DTYPES = tuple(
    np.dtype(name) for name in ("uint8", "uint16", "uint32", "float32", "float64")
)

#: The frame sum splits the frames into at most this many chunks, one partial sum each.
#: The number is fixed (not the thread count) so float results never depend on threads.
SUM_FRAMES_MAX_CHUNKS = 64

#: Upper bound on the memory the frame sum's partial sums may take.
SUM_FRAMES_PARTIAL_BYTES = 256 * 1024 * 1024

#: Below this many pixel visits a call runs in the calling thread: a pool costs more.
PARALLEL_MIN_WORK = 1 << 20

#: Frame ranges per worker thread, for load balance across uneven cores.
CHUNKS_PER_THREAD = 4


def accumulator_dtype(dtype: np.dtype | str) -> np.dtype:
    """The dtype products of ``dtype`` data are accumulated in: uint64 or float64.

    Raises
    ------
    UnsupportedDtypeError
        For signed integers, booleans, float16, complex, non-native byte order, or any
        other type the kernels do not support.
    """
    dtype = np.dtype(dtype)
    if not dtype.isnative:
        raise UnsupportedDtypeError(
            f"detector products need native byte order data, got {dtype.str}; "
            "convert with data.astype(data.dtype.newbyteorder('='))"
        )
    if dtype not in SUPPORTED_DTYPES:
        names = ", ".join(str(d) for d in SUPPORTED_DTYPES)
        raise UnsupportedDtypeError(f"detector products support {names} data, got {dtype}")
    return np.dtype(np.uint64) if dtype.kind == "u" else np.dtype(np.float64)


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
    runs = mask_runs(mask)
    zero = acc.type(0)
    ranges = _frame_ranges(data4d, int(np.count_nonzero(mask)), threads)
    _run_ranges(lambda a, b: _masked_sum_runs(data4d, runs, zero, out, a, b), ranges, threads)
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
    runs = mask_runs(mask)
    row_weight = np.arange(det_r, dtype=acc)
    col_weight = np.arange(det_c, dtype=acc)
    zero = acc.type(0)

    def task(start: int, stop: int) -> None:
        _moments_runs(data4d, runs, row_weight, col_weight, zero, total, sum_r, sum_c, start, stop)

    ranges = _frame_ranges(data4d, 2 * int(np.count_nonzero(mask)), threads)
    _run_ranges(task, ranges, threads)
    return total, sum_r, sum_c


def sum_frames(data4d: np.ndarray, *, threads: int | None = None) -> np.ndarray:
    """Sum over all frames, per detector pixel (``(det_r, det_c)``, uint64 or float64).

    The frames are split into a fixed number of chunks (:data:`SUM_FRAMES_MAX_CHUNKS`,
    fewer for huge detectors), each summed into its own partial, and the partials are
    added in chunk order: the float result does not depend on the thread count.
    """
    acc = _check_data(data4d)
    threads = _parse_threads(threads)
    det_r, det_c = data4d.shape[2:]
    n_frames = data4d.shape[0] * data4d.shape[1]
    if n_frames == 0 or det_r * det_c == 0:
        return np.zeros((det_r, det_c), dtype=acc)
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
    "masked_sum",
    "moments",
    "sum_frames",
]
