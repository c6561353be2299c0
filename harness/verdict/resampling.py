"""Seeded bootstrap of the ratio of medians (candidate over baseline).

The percentile interval: both samples are resampled with replacement, independently,
``resamples`` times, and the interval is the (1-c)/2 and (1+c)/2 quantiles of the
resampled ratios. The generator is numpy's PCG64 seeded with :data:`DEFAULT_SEED`
(or the seed given), so the same trials always give the same interval. The tests
check it against ``scipy.stats.bootstrap(method="percentile")`` within Monte Carlo
error.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

DEFAULT_SEED = 20261201
DEFAULT_RESAMPLES = 4000
DEFAULT_CONFIDENCE = 0.95


def resampled_medians(
    values: Sequence[float], n: int, resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """Medians of ``resamples`` draws of ``n`` values with replacement from ``values``."""
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        raise ValueError("cannot resample no values")
    picks = rng.integers(0, data.size, size=(resamples, n))
    return np.median(data[picks], axis=1)


def ratio_of_medians_interval(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> tuple[float, float]:
    """Percentile bootstrap interval of median(candidate) / median(baseline).

    Raises
    ------
    ValueError
        When a sample is empty, ``confidence`` is outside (0, 1) or a resampled baseline
        median is not positive.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), not {confidence!r}")
    rng = np.random.default_rng(seed)
    base = resampled_medians(baseline, len(baseline), resamples, rng)
    cand = resampled_medians(candidate, len(candidate), resamples, rng)
    if np.any(base <= 0):
        raise ValueError("the baseline's median must be positive for a ratio")
    ratios = cand / base
    tail = (1 - confidence) / 2
    low, high = np.quantile(ratios, [tail, 1 - tail])
    return float(low), float(high)


def paired_median_ratio_interval(
    pairs: Sequence[tuple[float, float]],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> tuple[float, float]:
    """Percentile bootstrap interval of median(candidate) / median(baseline) over paired
    rounds ``(baseline, candidate)``, the rounds resampled together (each round's two
    trials share its moment, so drift between rounds stays in both sides alike).

    Raises
    ------
    ValueError
        When there are no pairs, ``confidence`` is outside (0, 1) or a resampled
        baseline median is not positive.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), not {confidence!r}")
    data = np.asarray(pairs, dtype=np.float64).reshape(-1, 2)
    if data.shape[0] == 0:
        raise ValueError("cannot resample no pairs")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, data.shape[0], size=(resamples, data.shape[0]))
    base = np.median(data[picks, 0], axis=1)
    cand = np.median(data[picks, 1], axis=1)
    if np.any(base <= 0):
        raise ValueError("the baseline's median must be positive for a ratio")
    tail = (1 - confidence) / 2
    low, high = np.quantile(cand / base, [tail, 1 - tail])
    return float(low), float(high)
