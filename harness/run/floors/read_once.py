"""The ``read_once`` floor of a compute workload: one pass over the resident data.

A product of the whole acquisition (a virtual image, a centre of mass, a sideband sum)
reads every byte of the loaded data at least once, so one pass over it at the device's
best bounds every such stage. The pass folds the data's 64-bit words with XOR (no cast,
no temporary the size of the data). On the CPU it is taken by numpy reductions and by a
compiled (numba) fold, each on a thread pool over a sweep of thread counts
(:func:`harness.run.floors.sweep.fastest_pass`: the fastest pass of the best setting is
the floor; the sweep is recorded). The compiled fold reads four streams at a time, either
four consecutive frames (the order in which the frame sum touches them) or the four
quarters of a thread's piece: one stream a core keeps too few cache lines in flight and
reads memory at about half the rate a kernel that sums four frames at a time does. On
cuda it is one device reduction between device barriers. The folded value is checked
after the timer against numpy's fold of the same words, so a pass that skipped bytes fails
instead of looking fast.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numba
import numpy as np

from harness.report import quantile
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
from harness.run.timers import WallTimer

READ_ONCE = "read_once_xor_fold"
#: Streams the compiled fold reads at a time (the frame sum adds four frames a pass).
STREAMS = 4


def _words(array: Any, xp: Any) -> Any:
    """The array's bytes as the widest unsigned words that divide its size."""
    flat = array.reshape(-1).view(xp.uint8)
    for dtype in (xp.uint64, xp.uint32, xp.uint16):
        if flat.size % np.dtype(dtype).itemsize == 0:
            return flat.view(dtype)
    return flat


def _fold_numpy(words: np.ndarray, start: int, stop: int) -> int:
    return words_xor(words[start:stop])


@numba.njit(nogil=True, cache=True)
def _fold_streams(words, start, stop, block):  # pragma: no cover - compiled
    # Groups of four consecutive blocks of ``block`` words, one accumulator a block: four
    # streams in flight, each loop vectorised; what no whole group covers is folded after.
    acc = np.uint64(0)
    first = start
    if block > 0:
        while first + 4 * block <= stop:
            s0 = words[first : first + block]
            s1 = words[first + block : first + 2 * block]
            s2 = words[first + 2 * block : first + 3 * block]
            s3 = words[first + 3 * block : first + 4 * block]
            a0 = a1 = a2 = a3 = np.uint64(0)
            for i in range(block):
                a0 ^= np.uint64(s0[i])
                a1 ^= np.uint64(s1[i])
                a2 ^= np.uint64(s2[i])
                a3 ^= np.uint64(s3[i])
            acc ^= a0 ^ a1 ^ a2 ^ a3
            first += 4 * block
    for i in range(first, stop):
        acc ^= np.uint64(words[i])
    return acc


def _frame_words(array: np.ndarray, words: np.ndarray) -> int:
    """Words in one frame (the last two axes), or 0 where frames are not whole words."""
    if array.ndim < 3 or words.size == 0:
        return 0
    frame_bytes = int(array.shape[-1] * array.shape[-2] * array.itemsize)
    if frame_bytes == 0 or frame_bytes % words.itemsize:
        return 0
    return frame_bytes // words.itemsize


def _quarters(words: np.ndarray, start: int, stop: int) -> int:
    return int(_fold_streams(words, start, stop, (stop - start) // STREAMS))


def _frames(words: np.ndarray, per_frame: int, start: int, stop: int) -> int:
    return int(_fold_streams(words, start, stop, per_frame))


def host_passes(array: np.ndarray, words: np.ndarray, threads: Sequence[int]) -> list[Pass]:
    """The settings swept on the host: numpy, and the compiled fold in frame order (where
    the data has frames of whole words) and in quarter order, at each thread count."""
    per_frame = _frame_words(array, words)
    passes: list[Pass] = []
    for n in threads:
        slabs = split(words.size, n)  # one a thread
        numpy_fold = partial(_fold_numpy, words)
        passes.append(
            Pass(
                {"engine": "numpy", "threads": n},
                partial(fold_pieces, fold=numpy_fold, pieces=slabs),
            )
        )
        if per_frame:
            frames = words.size // per_frame
            pieces = [
                (a * per_frame, b * per_frame) for a, b in split(frames, n * PIECES_PER_THREAD)
            ]
            if pieces[-1][1] < words.size:  # words past the last whole frame
                pieces.append((pieces[-1][1], words.size))
            settings = {"engine": "numba", "threads": n, "streams": STREAMS, "order": "frames"}
            fold = partial(_frames, words, per_frame)
            passes.append(Pass(settings, partial(fold_pieces, fold=fold, pieces=pieces)))
        settings = {"engine": "numba", "threads": n, "streams": STREAMS, "order": "quarters"}
        fold = partial(_quarters, words)
        passes.append(Pass(settings, partial(fold_pieces, fold=fold, pieces=slabs)))
    return passes


def read_once_host(
    array: np.ndarray, threads: Sequence[int] | None = None, repeats: int = REPEATS
) -> dict:
    """One pass over a host array at its best over ``threads``."""
    array = np.ascontiguousarray(array)
    words = _words(array, np)
    expected = words_xor(words)
    passes = host_passes(array, words, tuple(threads or default_threads()))
    sweep, _, best = fastest_pass(passes, expected, READ_ONCE, repeats)
    return {
        "method": READ_ONCE,
        "seconds": best["min"],
        "bytes": int(array.nbytes),
        "settings": {
            **{k: v for k, v in best.items() if k not in ("n", "median", "min")},
            "word_bytes": int(words.itemsize),
        },
        "sweep": sweep,
    }


def read_once_device(array: Any, barrier: Callable[[], None], repeats: int = REPEATS) -> dict:
    """One pass over a CuPy array: a device XOR reduction, timed between barriers."""
    import cupy

    words = _words(cupy.ascontiguousarray(array), cupy)
    fold = cupy.ReductionKernel("T x", "T y", "x", "a ^ b", "y = a", "0", "harness_floor_xor_fold")
    rows = words.reshape(-1, 1024) if words.size % 1024 == 0 else words.reshape(1, -1)
    expected = int(fold(fold(rows, axis=1)))  # another order (rows first), untimed
    runs: list[float] = []
    for _ in range(repeats):
        timer = WallTimer(barrier).start()
        got = fold(words)
        runs.append(timer.stop())
        if int(got) != expected:
            raise RuntimeError(
                f"{READ_ONCE}: the device pass folded {int(got):#x}, not {expected:#x}"
            )
    sweep = [
        {"threads": None, "n": len(runs), "median": quantile(sorted(runs), 0.5), "min": min(runs)}
    ]
    return {
        "method": READ_ONCE,
        "seconds": sweep[0]["min"],
        "bytes": int(array.nbytes),
        "settings": {"word_bytes": int(words.itemsize), "reduction": "cupy.ReductionKernel"},
        "sweep": sweep,
    }


def read_once(
    array: Any, backend: str, barrier: Callable[[], None], repeats: int = REPEATS
) -> dict:
    """The floor of the resident ``array`` on ``backend``."""
    if backend == "cuda":
        return read_once_device(array, barrier, repeats)
    return read_once_host(np.asarray(array), repeats=repeats)


def read_once_floor(state: dict, backend: str, barrier: Callable[[], None]) -> dict | None:
    """The floor of a workload's loaded data (the dense array, or an encoded acquisition's
    resident payload); None when none is resident (a streamed source is read block by
    block: its floor is io-scale's)."""
    acquisition = state.get("acq")
    array = getattr(acquisition, "array", None) if acquisition is not None else None
    if array is not None:
        return read_once(array, backend, barrier)
    # An encoded payload: every product decodes it whole, so reads each of its bytes once.
    encoded = getattr(acquisition, "encoded", None)
    payload = getattr(encoded, "payload", None)
    if payload is None:
        return None
    return {**read_once(payload[: encoded.nbytes], backend, barrier), "data": "encoded_payload"}
