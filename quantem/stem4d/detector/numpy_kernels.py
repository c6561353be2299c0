"""Exact CPU detector kernels in numpy, without numba: the first call's path.

A one-shot script (load, BF, CoM, exit) would spend most of its time starting numba
(its import, its CPU target, loading the cached kernels of
:mod:`quantem.stem4d.detector.cpu_kernels`). These kernels give the same integers with
numpy's integer reductions alone, for C-contiguous uint8/uint16 data:

* partial sums are taken in uint32 over at most ``(2**32 - 1) // top`` values (``top``
  the type's largest value), so none can overflow, then added in uint64: exact by
  construction, as the numba kernels' narrow partials are;
* a mask's sum adds its contiguous spans in each frame; the moments come from each frame's masked row
  and column sums weighted by their (integer) indices.

No float arithmetic and no BLAS (whose thread pool spins on a busy host). Same
interface and results as ``cpu_kernels`` (``masked_sum``, ``sum_frames``, ``moments``,
``frame``): the session takes this module for the first calls of each kernel in a
process while numba's kernels are not loaded (:func:`suited`), and ``cpu_kernels``
otherwise, where repeated calls run several times faster.
"""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

#: Pixels converted or gathered at a time (a few MB: cache-sized blocks of frames).
BLOCK_PIXELS = 1 << 20

#: Below this many pixels (all frames) a call runs in the calling thread.
PARALLEL_MIN_PIXELS = 1 << 24

#: Calls of each kernel per process that take this module: a script's BF and ADF (three
#: masked sums), its CoM. Later calls are a warm process's: numba's start-up pays off.
FIRST_CALLS = 3

#: Above this many pixels (all frames) numba's start-up (about 0.8 s of CPU) costs less
#: than numpy's slower passes, even for one call.
FIRST_CALL_MAX_PIXELS = 1 << 30

_NUMBA_KERNELS = "quantem.stem4d.detector.cpu_kernels"
_UINT32_MAX = 2**32 - 1
_calls: dict[str, int] = {}
_lock = threading.Lock()


def suited(name: str, data4d: object) -> bool:
    """Whether kernel ``name`` over ``data4d`` runs here, and count the call if so: numba's
    kernels not loaded in this process, fewer than :data:`FIRST_CALLS` calls of ``name``
    so far, C-contiguous native uint8/uint16 numpy data of at most
    :data:`FIRST_CALL_MAX_PIXELS` pixels."""
    if _NUMBA_KERNELS in sys.modules or not isinstance(data4d, np.ndarray):
        return False
    if data4d.ndim != 4 or data4d.dtype.kind != "u" or data4d.dtype.itemsize > 2:
        return False
    if not data4d.flags.c_contiguous or not data4d.dtype.isnative:
        return False
    if data4d.size > FIRST_CALL_MAX_PIXELS:
        return False
    with _lock:
        if _calls.get(name, 0) >= FIRST_CALLS:
            return False
        _calls[name] = _calls.get(name, 0) + 1
    return True


def _limit(dtype: np.dtype) -> int:
    """Values of ``dtype`` a uint32 partial sum holds exactly."""
    return _UINT32_MAX // int(np.iinfo(dtype).max)


def _frames(data4d: np.ndarray) -> np.ndarray:
    """``(n_frames, det_r * det_c)`` view of C-contiguous data."""
    scan_r, scan_c, det_r, det_c = data4d.shape
    return data4d.reshape(scan_r * scan_c, det_r * det_c)


def _blocks(n_frames: int, frame_pixels: int):
    step = max(1, BLOCK_PIXELS // max(frame_pixels, 1))
    return [(first, min(first + step, n_frames)) for first in range(0, n_frames, step)]


def _threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _run_blocks(task, n_frames: int, frame_pixels: int) -> None:
    """``task(first, last)`` over blocks of frames; on every core once the work is large
    (numpy's reductions release the GIL; the blocks write disjoint outputs)."""
    blocks = _blocks(n_frames, frame_pixels)
    workers = min(_threads(), len(blocks))
    if workers <= 1 or n_frames * frame_pixels < PARALLEL_MIN_PIXELS:
        for first, last in blocks:
            task(first, last)
        return
    with ThreadPoolExecutor(workers) as pool:
        for done in [pool.submit(task, first, last) for first, last in blocks]:
            done.result()


def masked_sum(data4d: np.ndarray, mask2d_bool: np.ndarray) -> np.ndarray:
    """Each frame's exact sum over the mask (uint64 ``(scan_r, scan_c)``)."""
    scan_r, scan_c = data4d.shape[:2]
    frames = _frames(data4d)
    spans = _spans(np.asarray(mask2d_bool, dtype=bool).reshape(-1))
    out = np.zeros(frames.shape[0], dtype=np.uint64)
    if not spans:
        return out.reshape(scan_r, scan_c)
    longest = max(stop - start for start, stop in spans)
    partial = np.uint32 if longest <= _limit(data4d.dtype) else np.uint64
    pixels = sum(stop - start for start, stop in spans)

    def task(first: int, last: int) -> None:
        for start, stop in spans:  # a span is contiguous in each frame: no gather
            out[first:last] += np.add.reduce(frames[first:last, start:stop], axis=1, dtype=partial)

    _run_blocks(task, frames.shape[0], pixels)
    return out.reshape(scan_r, scan_c)


def _spans(flat: np.ndarray) -> list[tuple[int, int]]:
    """``(start, stop)`` runs of True in a flat mask."""
    edges = np.diff(np.concatenate([[0], flat.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()))


def moments(
    data4d: np.ndarray, mask2d_bool: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(total, sum_r, sum_c)`` over the mask, exact uint64 ``(scan_r, scan_c)`` each."""
    scan_r, scan_c, det_r, det_c = data4d.shape
    n = scan_r * scan_c
    mask = np.asarray(mask2d_bool, dtype=bool)
    cube = data4d.reshape(n, det_r, det_c)
    # a row sum adds det_c values, a column sum det_r: uint32 holds them when this passes
    narrow = max(det_r, det_c) <= _limit(data4d.dtype)
    partial = np.uint32 if narrow else np.uint64
    keep = None if mask.all() else mask.astype(data4d.dtype)
    rows = np.empty((n, det_r), dtype=np.uint64)
    cols = np.empty((n, det_c), dtype=np.uint64)

    def task(first: int, last: int) -> None:
        block = cube[first:last] if keep is None else cube[first:last] * keep
        rows[first:last] = block.sum(axis=2, dtype=partial)
        cols[first:last] = block.sum(axis=1, dtype=partial)

    _run_blocks(task, n, det_r * det_c)
    total = rows.sum(axis=1, dtype=np.uint64)
    sum_r = rows @ np.arange(det_r, dtype=np.uint64)
    sum_c = cols @ np.arange(det_c, dtype=np.uint64)
    return tuple(a.reshape(scan_r, scan_c) for a in (total, sum_r, sum_c))


def sum_frames(data4d: np.ndarray) -> np.ndarray:
    """The exact sum over all frames per detector pixel (uint64 ``(det_r, det_c)``)."""
    det_r, det_c = data4d.shape[2:]
    frames = _frames(data4d)
    n = frames.shape[0]
    # ranges of at most _limit frames: a pixel's uint32 partial cannot overflow
    parts = max(
        -(-n // _limit(data4d.dtype)), _threads() if n * det_r * det_c >= PARALLEL_MIN_PIXELS else 1
    )
    ranges = [(k * n // parts, (k + 1) * n // parts) for k in range(parts)]
    partials = np.zeros((parts, det_r * det_c), dtype=np.uint32)

    def task(k: int) -> None:
        first, last = ranges[k]
        np.add.reduce(frames[first:last], axis=0, dtype=np.uint32, out=partials[k])

    if parts == 1:
        task(0)
    else:
        with ThreadPoolExecutor(min(parts, _threads())) as pool:
            list(pool.map(task, range(parts)))
    total = partials.sum(axis=0, dtype=np.uint64)
    return total.reshape(det_r, det_c)


def frame(data4d: np.ndarray, i: int) -> np.ndarray:
    """Frame ``i`` (row-major scan index) as a view, raw values in the data's dtype."""
    scan_c = data4d.shape[1]
    n_frames = data4d.shape[0] * scan_c
    if not 0 <= i < n_frames:
        raise IndexError(f"frame index {i} is out of range for {n_frames} frames")
    return data4d[i // scan_c, i % scan_c]


__all__ = [
    "FIRST_CALLS",
    "FIRST_CALL_MAX_PIXELS",
    "frame",
    "masked_sum",
    "moments",
    "suited",
    "sum_frames",
]
