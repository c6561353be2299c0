"""The fastest checked pass over a sweep of settings: how a resident-data floor is measured.

A floor is the best the machine does, so each candidate pass (an engine at a thread
count, a piece size) is timed ``repeats`` times and the fastest time of the best setting
is the floor. The settings are timed in interleaved rounds, not one after the other, so
a load that comes and goes on a shared host slows them all alike instead of one. Every
pass returns the value it folded; it is checked against ``expected`` after its timer, so a
pass that skipped bytes fails instead of looking fast. Each thread count gets one pool,
started before the timers (a pass submits its pieces to it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from functools import reduce
from operator import xor

import numpy as np

from harness.report import quantile
from harness.run.timers import WallTimer

#: Timed passes of every setting (the fastest is kept).
REPEATS = 7
#: Pieces per thread of a pass over frames (as the kernels split their frames).
PIECES_PER_THREAD = 4


@dataclass(frozen=True)
class Pass:
    """One setting of a sweep: ``fold(pool)`` makes the pass and returns its folded value;
    ``settings`` (``threads`` among them: the pool's size) is what the record names."""

    settings: dict
    fold: Callable[[ThreadPoolExecutor], int]

    @property
    def threads(self) -> int:
        return int(self.settings["threads"])

    def describe(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in self.settings.items())


def split(n_items: int, n_parts: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of ``n_parts`` near-equal consecutive pieces (fewer for few items)."""
    n_parts = max(1, min(n_parts, n_items))
    return [(k * n_items // n_parts, (k + 1) * n_items // n_parts) for k in range(n_parts)]


def fold_pieces(
    pool: ThreadPoolExecutor, fold: Callable[[int, int], int], pieces: Sequence[tuple[int, int]]
) -> int:
    """XOR of ``fold(start, stop)`` over ``pieces``, the pieces run on ``pool``."""
    futures = [pool.submit(fold, a, b) for a, b in pieces]
    return reduce(xor, (int(f.result()) for f in futures), 0)


def fastest_pass(
    passes: Sequence[Pass], expected: int, method: str, repeats: int
) -> tuple[list[dict], Pass, dict]:
    """Time every pass ``repeats`` times (interleaved rounds), checking each; returns the
    sweep (one row per pass: its settings, ``n``, ``median``, ``min``), the best pass (the
    lowest ``min``) and its row."""
    if not passes:
        raise ValueError(f"{method}: no setting to measure")
    runs: list[list[float]] = [[] for _ in passes]
    with ExitStack() as stack:
        pools: dict[int, ThreadPoolExecutor] = {}
        for p in passes:
            if p.threads not in pools:
                pool = stack.enter_context(ThreadPoolExecutor(p.threads))
                list(pool.map(_touch, range(p.threads)))  # its threads started before a timer
                pools[p.threads] = pool
        for p in passes:  # compiled and warm before the timers
            _check(p, p.fold(pools[p.threads]), expected, method)
        for _ in range(repeats):
            for p, times in zip(passes, runs, strict=True):
                timer = WallTimer().start()
                got = p.fold(pools[p.threads])
                times.append(timer.stop())
                _check(p, got, expected, method)
    sweep = [
        {**p.settings, "n": len(t), "median": quantile(sorted(t), 0.5), "min": min(t)}
        for p, t in zip(passes, runs, strict=True)
    ]
    k = min(range(len(sweep)), key=lambda i: sweep[i]["min"])
    return sweep, passes[k], sweep[k]


def _touch(_: int) -> None:
    return None


def _check(p: Pass, got: int, expected: int, method: str) -> None:
    if int(got) != int(expected):
        raise RuntimeError(
            f"{method}: the pass with {p.describe()} folded {int(got):#x}, not {int(expected):#x}"
        )


def words_xor(words: np.ndarray) -> int:
    """numpy's XOR of ``words`` (the reference a floor's fold is checked against)."""
    return int(np.bitwise_xor.reduce(words, axis=None)) if words.size else 0
