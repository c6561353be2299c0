"""The ``mask_lines`` floor of a masked product: one pass over the cache lines it must read.

An exact masked sum (a BF or ADF image) reads, in every frame, the pixels of its mask, or
those of the mask's complement within the valid pixels when it subtracts that from the
frame totals (``docs/detector.md``); either way the memory system brings in the whole
64-byte lines those pixels lie in, and no fewer. So one pass over the lines of the smaller
of the two, in every frame, bounds the product; the whole data's ``read_once`` does not
(a BF over a small disk reads a fraction of it, and beat that floor).

The pass folds the 64-bit words of those lines with XOR in a numba kernel over frames (a
sweep of thread counts, the fastest pass kept), checked after its timer against a numpy
fold of the same words. CPU only: the resident data of a cuda run gets no such floor.
"""

from __future__ import annotations

import numba
import numpy as np

from harness.report import quantile
from harness.run.floors.reads import default_threads
from harness.run.timers import WallTimer
from quantem.stem4d.detector.cpu_kernels import mask_spans

MASK_LINES = "mask_lines_xor_fold"
#: Bytes the memory system moves at a time (a cache line).
LINE_BYTES = 64


@numba.njit(parallel=True, nogil=True, cache=True)
def _fold(words: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> np.uint64:
    out = np.zeros(words.shape[0], dtype=np.uint64)
    for f in numba.prange(words.shape[0]):
        acc = np.uint64(0)
        for k in range(starts.size):
            for w in range(starts[k], stops[k]):
                acc ^= np.uint64(words[f, w])
        out[f] = acc
    total = np.uint64(0)
    for f in range(out.size):
        total ^= out[f]
    return total


def line_ranges(mask: np.ndarray, itemsize: int, frame_bytes: int) -> np.ndarray:
    """``(start, stop)`` byte ranges of the whole lines holding ``mask``'s pixels, merged."""
    spans = mask_spans(mask) * itemsize
    if spans.size == 0:
        return np.zeros((0, 2), dtype=np.int64)
    starts = spans[:, 0] // LINE_BYTES * LINE_BYTES
    stops = np.minimum(-(-spans[:, 1] // LINE_BYTES) * LINE_BYTES, frame_bytes)
    merged: list[list[int]] = []
    for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return np.asarray(merged, dtype=np.int64)


def read_lines_bytes(mask: np.ndarray, itemsize: int, frame_bytes: int) -> int:
    ranges = line_ranges(mask, itemsize, frame_bytes)
    return int((ranges[:, 1] - ranges[:, 0]).sum()) if ranges.size else 0


def smaller_read(mask: np.ndarray, validity: np.ndarray, itemsize: int) -> np.ndarray:
    """The mask, or its complement within ``validity``, whichever covers fewer lines."""
    frame_bytes = mask.size * itemsize
    complement = validity & ~mask
    a = read_lines_bytes(mask, itemsize, frame_bytes)
    b = read_lines_bytes(complement, itemsize, frame_bytes)
    return mask if a <= b else complement


def mask_lines_floor(
    array: np.ndarray,
    mask: np.ndarray,
    validity: np.ndarray,
    threads: list[int] | None = None,
    repeats: int = 5,
) -> dict | None:
    """The floor of a masked product over the resident host ``array`` (frames last two axes)."""
    data = np.ascontiguousarray(array)
    det = data.shape[-2:]
    itemsize = data.dtype.itemsize
    frame_bytes = det[0] * det[1] * itemsize
    if frame_bytes % 8:
        return None  # frames not whole 64-bit words: no word fold of this kind
    read = smaller_read(np.asarray(mask, bool), np.asarray(validity, bool), itemsize)
    ranges = line_ranges(read, itemsize, frame_bytes) // 8
    words = data.reshape(-1, det[0] * det[1]).view(np.uint64)  # (frames, words a frame)
    starts = np.ascontiguousarray(ranges[:, 0])
    stops = np.ascontiguousarray(ranges[:, 1])
    expected = 0
    for a, b in ranges.tolist():  # another order: per range over all frames, untimed
        expected ^= int(np.bitwise_xor.reduce(words[:, a:b], axis=None))
    previous = numba.get_num_threads()
    runs: dict[int, list[float]] = {}
    try:
        for n in threads or default_threads():
            numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
            _fold(words[:1], starts, stops)  # compiled and threads started before the timer
            for _ in range(repeats):
                timer = WallTimer().start()
                got = int(_fold(words, starts, stops))
                runs.setdefault(n, []).append(timer.stop())
                if got != expected:
                    raise RuntimeError(f"{MASK_LINES}: the pass folded {got:#x}, not {expected:#x}")
    finally:
        numba.set_num_threads(previous)
    sweep = [
        {"threads": n, "n": len(r), "median": quantile(sorted(r), 0.5), "min": min(r)}
        for n, r in runs.items()
    ]
    best = min(sweep, key=lambda s: s["min"])
    line_bytes = int((ranges[:, 1] - ranges[:, 0]).sum()) * 8 if ranges.size else 0
    return {
        "method": MASK_LINES,
        "seconds": best["min"],
        "bytes": line_bytes * words.shape[0],
        "settings": {
            "threads": best["threads"],
            "line_bytes": LINE_BYTES,
            "read": "complement" if read is not mask else "mask",
            "ranges_per_frame": int(ranges.shape[0]),
        },
        "sweep": sweep,
    }
