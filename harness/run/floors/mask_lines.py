"""The ``mask_lines`` floor of a masked product: one pass over the cache lines it must read.

An exact masked sum (a BF or ADF image) reads, in every frame, the pixels of its mask, or
those of the mask's complement within the valid pixels when it subtracts that from the
frame totals (``docs/detector.md``); either way the memory system brings in the whole
64-byte lines those pixels lie in, and no fewer. So one pass over the lines of the mask, in
every frame, bounds the product, or over the smaller of the mask and its complement where
the frame totals are already known (without them, the totals cost a read of every valid
line first); the whole data's ``read_once`` does not (a BF over a small disk reads a
fraction of it, and beat that floor).

The pass folds the 64-bit words of those lines with XOR in a numba kernel, four frames at a
time, over frame ranges on a thread pool (a sweep of thread counts, the fastest pass kept:
:func:`harness.run.floors.sweep.fastest_pass`), checked after its timer against a numpy
fold of the same words. CPU only: the resident data of a cuda run gets no such floor.
"""

from __future__ import annotations

from functools import partial

import numba
import numpy as np

from harness.run.floors.reads import default_threads
from harness.run.floors.sweep import (
    PIECES_PER_THREAD,
    REPEATS,
    Pass,
    fastest_pass,
    fold_pieces,
    split,
    words_xor,
)
from quantem.stem4d.detector.cpu_kernels import mask_spans

MASK_LINES = "mask_lines_xor_fold"
#: Bytes the memory system moves at a time (a cache line).
LINE_BYTES = 64


@numba.njit(nogil=True, cache=True)
def _fold(words, starts, stops, first, last):  # pragma: no cover - compiled
    # Frames [first, last) of ``words`` (frames, words a frame), four frames a pass over
    # each range: four streams in flight, as the masked sum's prefetch keeps several.
    acc = np.uint64(0)
    f = first
    while f + 3 < last:
        a = words[f]
        b = words[f + 1]
        c = words[f + 2]
        d = words[f + 3]
        for k in range(starts.size):
            for w in range(starts[k], stops[k]):
                acc ^= np.uint64(a[w]) ^ np.uint64(b[w]) ^ np.uint64(c[w]) ^ np.uint64(d[w])
        f += 4
    while f < last:
        a = words[f]
        for k in range(starts.size):
            for w in range(starts[k], stops[k]):
                acc ^= np.uint64(a[w])
        f += 1
    return acc


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
    repeats: int = REPEATS,
    totals_known: bool = False,
) -> dict | None:
    """The floor of a masked product over the resident host ``array`` (frames last two axes).

    The complement is a read of its own only where each frame's total is already known
    (``totals_known``); otherwise an exact sum reads the mask's lines, or the valid lines
    for the totals and the complement's lines again, which is never fewer.
    """
    data = np.ascontiguousarray(array)
    det = data.shape[-2:]
    itemsize = data.dtype.itemsize
    frame_bytes = det[0] * det[1] * itemsize
    if frame_bytes % 8:
        return None  # frames not whole 64-bit words: no word fold of this kind
    mask = np.asarray(mask, bool)
    read = smaller_read(mask, np.asarray(validity, bool), itemsize) if totals_known else mask
    ranges = line_ranges(read, itemsize, frame_bytes) // 8
    words = data.reshape(-1, det[0] * det[1]).view(np.uint64)  # (frames, words a frame)
    starts = np.ascontiguousarray(ranges[:, 0])
    stops = np.ascontiguousarray(ranges[:, 1])
    expected = 0
    for a, b in ranges.tolist():  # another order: per range over all frames, numpy
        expected ^= words_xor(words[:, a:b])
    fold = partial(_fold, words, starts, stops)
    passes = [
        Pass(
            {"threads": n},
            partial(fold_pieces, fold=fold, pieces=split(words.shape[0], n * PIECES_PER_THREAD)),
        )
        for n in threads or default_threads()
    ]
    sweep, _, best = fastest_pass(passes, expected, MASK_LINES, repeats)
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
