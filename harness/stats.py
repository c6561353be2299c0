"""Small statistics for comparing trial timings: Mann-Whitney U, the Wilcoxon signed-rank
test of paired differences, and relative spread.

Written here rather than pulled from scipy to keep the harness's runtime dependency
set small (the device images carry no scipy); the tests check the values against
published tables, brute-force enumeration and ``scipy.stats.mannwhitneyu`` (scipy is
in the ``dev`` extra).

The p-value (two-sided, or one-sided with ``alternative="less"``/``"greater"``, the
alternative being that the *first* sample tends to be smaller/larger) is exact (the
permutation distribution of U, counted by dynamic programming) when there are no ties
and both samples have at most :data:`EXACT_MAX_N` values, as scipy's
``method="auto"`` does; otherwise it uses the normal approximation with tie correction
and continuity correction. ``method="exact"`` forces the exact distribution (no ties).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from harness.report import quantile

#: Largest sample size for which the exact distribution is used (as scipy's
#: ``method="auto"``, so the two agree value for value).
EXACT_MAX_N = 8


@dataclass(frozen=True)
class MannWhitneyResult:
    """U statistic of the first sample, two-sided p-value and which method gave it."""

    u: float
    p_value: float
    method: str  # "exact" or "normal"


def rank_with_ties(values: Sequence[float]) -> list[float]:
    """Ranks (1-based) with tied values sharing the mean of their ranks."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        mean_rank = (start + end) / 2 + 1
        for position in range(start, end + 1):
            ranks[order[position]] = mean_rank
        start = end + 1
    return ranks


@cache
def _u_counts(n1: int, n2: int) -> tuple[int, ...]:
    """Number of arrangements giving each U = 0..n1*n2 (no ties)."""
    # counts[m][n] as a polynomial in U, built with f(m, n) = f(m-1, n) shifted by n + f(m, n-1)
    table: dict[tuple[int, int], list[int]] = {}
    for m in range(n1 + 1):
        for n in range(n2 + 1):
            if m == 0 or n == 0:
                table[m, n] = [1]
                continue
            a = table[m - 1, n]
            b = table[m, n - 1]
            size = m * n + 1
            counts = [0] * size
            for u, c in enumerate(a):
                counts[u + n] += c
            for u, c in enumerate(b):
                counts[u] += c
            table[m, n] = counts
    return tuple(table[n1, n2])


ALTERNATIVES = ("two-sided", "less", "greater")


def mann_whitney_u(
    first: Sequence[float],
    second: Sequence[float],
    *,
    alternative: str = "two-sided",
    method: str = "auto",
) -> MannWhitneyResult:
    """Mann-Whitney U test of ``first`` against ``second``.

    ``alternative="greater"`` tests whether ``first`` tends to be larger than
    ``second`` (a slowdown, when ``first`` holds the candidate's seconds).

    Raises
    ------
    ValueError
        When either sample is empty, ``alternative`` or ``method`` is unknown, or
        ``method="exact"`` is asked for tied values.
    """
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, not {alternative!r}")
    if method not in ("auto", "exact", "normal"):
        raise ValueError(f"method must be auto, exact or normal, not {method!r}")
    n1, n2 = len(first), len(second)
    if n1 == 0 or n2 == 0:
        raise ValueError("Mann-Whitney U needs at least one value in each sample")
    combined = [float(v) for v in first] + [float(v) for v in second]
    ranks = rank_with_ties(combined)
    u1 = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    has_ties = len(set(combined)) < len(combined)
    if method == "exact" and has_ties:
        raise ValueError("the exact Mann-Whitney distribution assumes no tied values")
    if method == "exact" or (method == "auto" and not has_ties and max(n1, n2) <= EXACT_MAX_N):
        return MannWhitneyResult(u=u1, p_value=_exact_p(u1, n1, n2, alternative), method="exact")
    mean = n1 * n2 / 2
    n = n1 + n2
    tie_term = 0.0
    for value in set(combined):
        t = combined.count(value)
        tie_term += t**3 - t
    variance = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1)))
    if variance <= 0:
        return MannWhitneyResult(u=u1, p_value=1.0, method="normal")
    p_value = _normal_p(u1, mean, math.sqrt(variance), alternative)
    return MannWhitneyResult(u=u1, p_value=p_value, method="normal")


def _normal_p(statistic: float, mean: float, sd: float, alternative: str) -> float:
    """Normal-approximation p-value of a rank statistic, with continuity correction
    (towards the mean for one-sided tests, as scipy does)."""
    if alternative == "two-sided":
        z = (abs(statistic - mean) - 0.5) / sd
        return min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2)))
    if alternative == "greater":
        z = (statistic - mean - 0.5) / sd
    else:
        z = (mean - statistic - 0.5) / sd
    return min(1.0, 0.5 * math.erfc(z / math.sqrt(2)))


def _exact_p(u1: float, n1: int, n2: int, alternative: str) -> float:
    counts = _u_counts(n1, n2)
    total = math.comb(n1 + n2, n1)
    u = round(u1)
    if alternative == "greater":  # P(U >= u1)
        return sum(counts[u:]) / total
    if alternative == "less":  # P(U <= u1)
        return sum(counts[: u + 1]) / total
    u_small = min(u, n1 * n2 - u)
    return min(1.0, 2 * sum(counts[: u_small + 1]) / total)


def smallest_possible_p(n1: int, n2: int, *, alternative: str = "two-sided") -> float:
    """The smallest exact p-value samples of these sizes can give (no ties)."""
    sides = 2 if alternative == "two-sided" else 1
    return min(1.0, sides / math.comb(n1 + n2, n1))


@dataclass(frozen=True)
class SignedRankResult:
    """Wilcoxon's W+ (the sum of the ranks of the positive differences), p and method."""

    w_plus: float
    p_value: float
    method: str  # "exact" or "normal"
    n: int  # differences used (zeros dropped)


#: Largest number of differences for which the exact signed-rank distribution is used.
SIGNED_RANK_EXACT_MAX_N = 25


@cache
def _w_counts(n: int) -> tuple[int, ...]:
    """Number of sign assignments giving each W+ = 0..n(n+1)/2 (ranks 1..n, no ties)."""
    counts = [1]
    for rank in range(1, n + 1):
        grown = counts + [0] * rank
        for w, c in enumerate(counts):
            grown[w + rank] += c
        counts = grown
    return tuple(counts)


def wilcoxon_signed_rank(
    differences: Sequence[float], *, alternative: str = "two-sided"
) -> SignedRankResult:
    """Wilcoxon signed-rank test that the differences are centred on zero.

    ``alternative="greater"``: they tend to be positive (a paired slowdown, when each
    difference is log(candidate / baseline) less the threshold's log). Zero differences
    are dropped (Wilcoxon's rule, scipy's ``zero_method="wilcox"``). Exact (every sign
    assignment, counted by dynamic programming) without ties up to
    :data:`SIGNED_RANK_EXACT_MAX_N` differences; otherwise the normal approximation with
    tie and continuity correction. No differences left: p = 1.
    """
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, not {alternative!r}")
    kept = [float(d) for d in differences if d != 0]
    n = len(kept)
    if n == 0:
        return SignedRankResult(w_plus=0.0, p_value=1.0, method="exact", n=0)
    magnitudes = [abs(d) for d in kept]
    ranks = rank_with_ties(magnitudes)
    w_plus = sum(r for r, d in zip(ranks, kept) if d > 0)
    has_ties = len(set(magnitudes)) < n
    if not has_ties and n <= SIGNED_RANK_EXACT_MAX_N:
        counts = _w_counts(n)
        total = 2**n
        w = round(w_plus)
        upper = sum(counts[w:]) / total  # P(W+ >= w)
        lower = sum(counts[: w + 1]) / total  # P(W+ <= w)
        if alternative == "greater":
            p_value = upper
        elif alternative == "less":
            p_value = lower
        else:
            p_value = min(1.0, 2 * min(upper, lower))
        return SignedRankResult(w_plus=w_plus, p_value=p_value, method="exact", n=n)
    mean = n * (n + 1) / 4
    tie_term = sum(t**3 - t for t in (magnitudes.count(v) for v in set(magnitudes)))
    variance = n * (n + 1) * (2 * n + 1) / 24 - tie_term / 48
    if variance <= 0:
        return SignedRankResult(w_plus=w_plus, p_value=1.0, method="normal", n=n)
    p_value = _normal_p(w_plus, mean, math.sqrt(variance), alternative)
    return SignedRankResult(w_plus=w_plus, p_value=p_value, method="normal", n=n)


def smallest_signed_rank_p(n: int, *, alternative: str = "two-sided") -> float:
    """The smallest exact p-value ``n`` paired differences can give (no ties, no zeros)."""
    sides = 2 if alternative == "two-sided" else 1
    return min(1.0, sides / 2**n) if n else 1.0


def hodges_lehmann(values: Sequence[float]) -> float:
    """The Hodges-Lehmann estimate of the centre of ``values``: the median of the Walsh
    averages ``(x_i + x_j) / 2`` over ``i <= j`` (the pseudo-median that Wilcoxon's
    signed-rank test is about; for symmetric data about 95% as efficient as the mean,
    where the median is 64%)."""
    data = [float(v) for v in values]
    if not data:
        raise ValueError("the Hodges-Lehmann estimate needs at least one value")
    n = len(data)
    return median([(data[i] + data[j]) / 2 for i in range(n) for j in range(i, n)])


def median(values: Sequence[float]) -> float:
    """Median with linear interpolation (the harness's one quantile rule)."""
    if not values:
        raise ValueError("the median of no values is undefined")
    return quantile(sorted(float(v) for v in values), 0.5)


def relative_spread(values: Sequence[float]) -> float | None:
    """Interquartile range over median (linear quantiles); None for no values or a zero median."""
    if not values:
        return None
    ordered = sorted(float(v) for v in values)
    median = quantile(ordered, 0.5)
    if median == 0:
        return None
    return (quantile(ordered, 0.75) - quantile(ordered, 0.25)) / median
