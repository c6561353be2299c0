"""The ``read_once`` floor of a compute workload: one pass over the resident data.

A product of the whole acquisition (a virtual image, a centre of mass, a sideband sum)
reads every byte of the loaded data at least once, so one pass over it at the device's
best bounds every such stage. The pass folds the data's 64-bit words with XOR (no cast,
no temporary the size of the data): on the CPU by numpy reductions in a thread pool and by
a compiled (numba) fold, each over a sweep of thread counts (the fastest pass of the best
setting is the floor, as a floor is the best the machine does; the sweep is recorded), on cuda one device reduction between device barriers. The folded value is
checked after the timer against one computed another way, so a pass that skipped bytes
fails instead of looking fast.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import reduce
from operator import xor
from typing import Any

import numba
import numpy as np

from harness.report import quantile
from harness.run.floors.reads import default_threads
from harness.run.timers import WallTimer

READ_ONCE = "read_once_xor_fold"


def _words(array: Any, xp: Any) -> Any:
    """The array's bytes as the widest unsigned words that divide its size."""
    flat = array.reshape(-1).view(xp.uint8)
    for dtype in (xp.uint64, xp.uint32, xp.uint16):
        if flat.size % np.dtype(dtype).itemsize == 0:
            return flat.view(dtype)
    return flat


def _fold_host(words: np.ndarray, threads: int, pool: ThreadPoolExecutor | None) -> int:
    if threads <= 1 or pool is None:
        return int(np.bitwise_xor.reduce(words)) if words.size else 0
    slabs = np.array_split(words, threads)
    parts = pool.map(lambda s: int(np.bitwise_xor.reduce(s)) if s.size else 0, slabs)
    return reduce(xor, parts, 0)


@numba.njit(nogil=True, cache=True)
def _fold_slab(words: np.ndarray) -> np.uint64:  # pragma: no cover - compiled
    acc0 = acc1 = acc2 = acc3 = np.uint64(0)
    n = words.size // 4 * 4
    for i in range(0, n, 4):  # four accumulators: the loop vectorises
        acc0 ^= np.uint64(words[i])
        acc1 ^= np.uint64(words[i + 1])
        acc2 ^= np.uint64(words[i + 2])
        acc3 ^= np.uint64(words[i + 3])
    for i in range(n, words.size):
        acc0 ^= np.uint64(words[i])
    return acc0 ^ acc1 ^ acc2 ^ acc3


@numba.njit(parallel=True, nogil=True, cache=True)
def _fold_compiled(words: np.ndarray, parts: int) -> np.uint64:  # pragma: no cover - compiled
    step = (words.size + parts - 1) // parts
    out = np.zeros(parts, dtype=np.uint64)
    for p in numba.prange(parts):
        out[p] = _fold_slab(words[p * step : min(words.size, (p + 1) * step)])
    total = np.uint64(0)
    for p in range(parts):
        total ^= out[p]
    return total


def _sweep_of(runs: dict[tuple[str, int], list[float]]) -> list[dict]:
    return [
        {"engine": e, "threads": n, "n": len(r), "median": quantile(sorted(r), 0.5), "min": min(r)}
        for (e, n), r in runs.items()
    ]


def read_once_host(
    array: np.ndarray, threads: Sequence[int] | None = None, repeats: int = 5
) -> dict:
    """One pass over a host array at its best over ``threads``."""
    words = _words(np.ascontiguousarray(array), np)
    expected = int(np.bitwise_xor.reduce(words[::-1])) if words.size else 0  # another order
    runs: dict[tuple[str, int], list[float]] = {}
    previous = numba.get_num_threads()
    try:
        for n in threads or default_threads():
            pool = ThreadPoolExecutor(n) if n > 1 else None
            numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
            engines = {
                "numpy": lambda n=n, pool=pool: _fold_host(words, n, pool),
                "numba": lambda n=n: int(_fold_compiled(words, n)) if words.size else 0,
            }
            try:
                if pool is not None:
                    list(pool.map(lambda _: None, range(n)))  # threads started before the timer
                _fold_compiled(words[:64], n)  # compiled before the timer
                for engine, fold in engines.items():
                    for _ in range(repeats):
                        timer = WallTimer().start()
                        got = fold()
                        runs.setdefault((engine, n), []).append(timer.stop())
                        if got != expected:
                            raise RuntimeError(
                                f"{READ_ONCE}: the {engine} pass with {n} threads folded "
                                f"{got:#x}, not {expected:#x}"
                            )
            finally:
                if pool is not None:
                    pool.shutdown()
    finally:
        numba.set_num_threads(previous)
    sweep = _sweep_of(runs)
    best = min(sweep, key=lambda s: s["min"])
    return {
        "method": READ_ONCE,
        "seconds": best["min"],
        "bytes": int(array.nbytes),
        "settings": {
            "engine": best["engine"],
            "threads": best["threads"],
            "word_bytes": int(words.itemsize),
        },
        "sweep": sweep,
    }


def read_once_device(array: Any, barrier: Callable[[], None], repeats: int = 5) -> dict:
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


def read_once(array: Any, backend: str, barrier: Callable[[], None], repeats: int = 5) -> dict:
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
