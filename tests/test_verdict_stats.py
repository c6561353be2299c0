"""Every statistic of the verdicts against scipy (dev extra) or an independent brute force."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
import scipy.stats

from harness.stats import (
    hodges_lehmann,
    mann_whitney_u,
    smallest_possible_p,
    smallest_signed_rank_p,
    wilcoxon_signed_rank,
)
from harness.verdict.calibration import CalibratedNull
from harness.verdict.changes import divergence_curve, e_divisive
from harness.verdict.holm import holm_adjust
from harness.verdict.resampling import paired_median_ratio_interval, ratio_of_medians_interval

# --- Mann-Whitney U, one-sided and two-sided -------------------------------------------


@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
def test_mann_whitney_matches_scipy_exact_and_normal(alternative: str) -> None:
    rng = random.Random(11)
    for _ in range(40):
        n1, n2 = rng.randint(1, 8), rng.randint(1, 8)
        a = [rng.gauss(1.0, 0.2) for _ in range(n1)]
        b = [rng.gauss(1.1, 0.2) for _ in range(n2)]
        ours = mann_whitney_u(a, b, alternative=alternative)
        theirs = scipy.stats.mannwhitneyu(a, b, alternative=alternative, method="auto")
        assert ours.method == "exact"
        assert ours.u == pytest.approx(theirs.statistic)
        assert ours.p_value == pytest.approx(theirs.pvalue, rel=1e-12)
    for _ in range(40):  # ties and larger samples: the normal approximation
        a = [round(rng.gauss(1.0, 0.2), 1) for _ in range(rng.randint(3, 25))]
        b = [round(rng.gauss(1.1, 0.2), 1) for _ in range(rng.randint(3, 25))]
        ours = mann_whitney_u(a, b, alternative=alternative)
        theirs = scipy.stats.mannwhitneyu(a, b, alternative=alternative)
        assert ours.p_value == pytest.approx(theirs.pvalue, rel=1e-9, abs=1e-12)


def test_forced_exact_method_matches_scipy_beyond_eight() -> None:
    rng = random.Random(5)
    a = [rng.random() for _ in range(12)]
    b = [rng.random() + 0.3 for _ in range(10)]
    for alternative in ("two-sided", "less", "greater"):
        ours = mann_whitney_u(a, b, alternative=alternative, method="exact")
        theirs = scipy.stats.mannwhitneyu(a, b, alternative=alternative, method="exact")
        assert ours.p_value == pytest.approx(theirs.pvalue, rel=1e-12)
    with pytest.raises(ValueError, match="tied"):
        mann_whitney_u([1, 1, 2], [3, 4], method="exact")


def test_one_sided_exact_p_by_enumeration() -> None:
    # candidate (first) all above baseline: P(U >= 9) for 3 vs 3 = 1 / C(6, 3)
    assert mann_whitney_u([4, 5, 6], [1, 2, 3], alternative="greater").p_value == pytest.approx(
        1 / 20
    )
    assert smallest_possible_p(5, 5, alternative="greater") == pytest.approx(1 / 252)
    # brute force over every assignment of ranks 1..7 to a 3-sample
    first_ranks = (2, 5, 7)
    u = sum(first_ranks) - 6
    splits = list(itertools.combinations(range(1, 8), 3))
    expected = sum(1 for s in splits if sum(s) - 6 >= u) / len(splits)
    values = {r: float(r) for r in range(1, 8)}
    first = [values[r] for r in first_ranks]
    second = [values[r] for r in range(1, 8) if r not in first_ranks]
    assert mann_whitney_u(first, second, alternative="greater").p_value == pytest.approx(expected)


# --- Holm -----------------------------------------------------------------------------


def _holm_sequential(p: list[float], alpha: float) -> list[bool]:
    """Holm's original sequential rule: reject while p(k) <= alpha / (m - k)."""
    order = sorted(range(len(p)), key=lambda i: p[i])
    rejected = [False] * len(p)
    for k, index in enumerate(order):
        if p[index] > alpha / (len(p) - k):
            break
        rejected[index] = True
    return rejected


@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
def test_signed_rank_matches_scipy_exact_and_normal(alternative: str) -> None:
    rng = np.random.default_rng(11)
    for n in (1, 2, 5, 8, 13, 25, 26, 40):
        d = rng.normal(0.2, 1.0, n)
        ours = wilcoxon_signed_rank(d, alternative=alternative)
        method = "exact" if n <= 25 else "approx"
        theirs = scipy.stats.wilcoxon(d, alternative=alternative, method=method, correction=True)
        assert ours.method == ("exact" if n <= 25 else "normal")
        assert ours.p_value == pytest.approx(theirs.pvalue, rel=1e-9, abs=1e-12)
    # ties and zeros: the normal approximation with tie correction, zeros dropped
    d = [0.0, 0.1, -0.1, 0.2, 0.2, 0.3, -0.05, 0.4, 0.4, 0.5]
    ours = wilcoxon_signed_rank(d, alternative=alternative)
    theirs = scipy.stats.wilcoxon(
        d, alternative=alternative, method="approx", correction=True, zero_method="wilcox"
    )
    assert ours.method == "normal" and ours.n == 9
    assert ours.p_value == pytest.approx(theirs.pvalue, rel=1e-9)


def test_signed_rank_exact_tail_by_enumeration() -> None:
    d = [0.3, -0.1, 0.5, 0.2, -0.4, 0.6]
    ranks = {abs(v): i + 1 for i, v in enumerate(sorted(d, key=abs))}
    observed = sum(ranks[abs(v)] for v in d if v > 0)
    count = 0
    for signs in itertools.product((1, -1), repeat=len(d)):
        w = sum(ranks[abs(v)] for v, s in zip(d, signs) if s > 0)
        count += w >= observed
    assert wilcoxon_signed_rank(d, alternative="greater").p_value == count / 2 ** len(d)
    assert smallest_signed_rank_p(5, alternative="greater") == 1 / 32
    assert wilcoxon_signed_rank([0.0, 0.0]).p_value == 1.0


def test_holm_adjusted_values_agree_with_the_sequential_rule() -> None:
    rng = random.Random(2)
    for _ in range(300):
        p = [rng.random() ** 3 for _ in range(rng.randint(1, 10))]
        adjusted = holm_adjust(p)
        for alpha in (0.01, 0.05, 0.1):
            assert [a <= alpha for a in adjusted] == _holm_sequential(p, alpha)
        assert all(a >= q for a, q in zip(adjusted, p))


def test_holm_textbook_example() -> None:
    # four p-values 0.01, 0.04, 0.03, 0.005: adjusted 4*0.005=0.02, 3*0.01=0.03, 2*0.03=0.06,
    # then max(0.06, 1*0.04) = 0.06
    assert holm_adjust([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    with pytest.raises(ValueError):
        holm_adjust([0.5, 1.5])


# --- bootstrap of the ratio of medians -------------------------------------------------


def test_bootstrap_interval_is_deterministic_and_agrees_with_scipy() -> None:
    rng = np.random.default_rng(4)
    base = list(rng.normal(1.0, 0.05, 9))
    cand = list(rng.normal(1.3, 0.05, 9))
    first = ratio_of_medians_interval(base, cand, resamples=20000)
    assert ratio_of_medians_interval(base, cand, resamples=20000) == first
    theirs = scipy.stats.bootstrap(
        (np.asarray(cand), np.asarray(base)),
        lambda c, b, axis: np.median(c, axis=axis) / np.median(b, axis=axis),
        n_resamples=20000,
        method="percentile",
        paired=False,
        vectorized=True,
        random_state=np.random.default_rng(9),
    ).confidence_interval
    assert first[0] == pytest.approx(theirs.low, rel=0.01)
    assert first[1] == pytest.approx(theirs.high, rel=0.01)
    assert first[0] < np.median(cand) / np.median(base) < first[1]


# --- the paired change: Hodges-Lehmann ------------------------------------------------


def test_hodges_lehmann_by_hand_and_as_the_signed_rank_balance() -> None:
    # Walsh averages of [1, 2, 3, 10]: 1, 1.5, 2, 5.5, 2, 2.5, 6, 3, 6.5, 10 -> median 2.75
    assert hodges_lehmann([1, 2, 3, 10]) == 2.75
    assert hodges_lehmann([4.0]) == 4.0
    with pytest.raises(ValueError):
        hodges_lehmann([])
    rng = np.random.default_rng(7)
    for n in (5, 8, 11):
        x = rng.normal(0.1, 0.05, n)
        est = hodges_lehmann(x)
        walsh = [(x[i] + x[j]) / 2 for i, j in itertools.combinations_with_replacement(range(n), 2)]
        assert est == pytest.approx(float(np.median(walsh)), abs=0)
        assert hodges_lehmann(x + 3.0) == pytest.approx(est + 3.0)  # shift-equivariant
        # the estimate is where scipy's signed-rank statistic of the shifted data balances
        w = scipy.stats.wilcoxon(x - est, method="exact" if n < 10 else "approx").statistic
        assert abs(w - n * (n + 1) / 4) <= n / 2 + 1


def test_paired_interval_resamples_whole_rounds_and_agrees_with_scipy() -> None:
    rng = np.random.default_rng(3)
    base = rng.normal(1.0, 0.05, 9)
    pairs = list(zip(base, base * rng.normal(1.25, 0.04, 9)))
    low, high = paired_median_ratio_interval(pairs, resamples=4000)
    assert (low, high) == paired_median_ratio_interval(pairs, resamples=4000)  # seeded
    ratio = np.median([c for _, c in pairs]) / np.median([b for b, _ in pairs])
    assert low < ratio < high
    theirs = scipy.stats.bootstrap(
        (np.asarray([b for b, _ in pairs]), np.asarray([c for _, c in pairs])),
        lambda b, c, axis: np.median(c, axis=axis) / np.median(b, axis=axis),
        paired=True,
        n_resamples=4000,
        method="percentile",
        random_state=np.random.default_rng(11),
    ).confidence_interval
    assert low == pytest.approx(theirs.low, rel=0.01)
    assert high == pytest.approx(theirs.high, rel=0.01)
    assert paired_median_ratio_interval([(1.0, 1.1)] * 5) == pytest.approx((1.1, 1.1))
    with pytest.raises(ValueError, match="no pairs"):
        paired_median_ratio_interval([])
    with pytest.raises(ValueError, match="confidence"):
        paired_median_ratio_interval([(1.0, 1.1)], confidence=1.0)
    with pytest.raises(ValueError, match="positive"):
        paired_median_ratio_interval([(0.0, 1.1)])


# --- calibrated null --------------------------------------------------------------------


def _calibration(noise: float, runs: int = 6, reps: int = 5, drift: float = 0.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    key = ("a", "qem", "cold")
    data = []
    for _ in range(runs):
        level = 1.0 + rng.normal(0, drift)
        data.append(list(level * (1 + rng.normal(0, noise, reps))))
    return key, CalibratedNull({key: data}), data


def test_calibrated_p_value_is_the_add_one_tail_fraction() -> None:
    key, null, _ = _calibration(0.05)
    ratios = null.null_ratios(key, 3, 3)
    assert ratios.size == 6 * 5 * null.draws_per_pair
    for observed in (0.9, 1.0, 1.05, 1.2, 2.0):
        expected = (1 + np.count_nonzero(ratios >= observed)) / (1 + ratios.size)
        assert null.p_slower(key, observed, 3, 3) == pytest.approx(expected)
        expected = (1 + np.count_nonzero(ratios <= observed)) / (1 + ratios.size)
        assert null.p_faster(key, observed, 3, 3) == pytest.approx(expected)
    # seeded: a second object over the same data gives the same null
    again = CalibratedNull({key: null.runs[key]})
    assert np.array_equal(again.null_ratios(key, 3, 3), ratios)


def test_mdc_is_detected_with_ninety_percent_power() -> None:
    key, null, data = _calibration(0.03, runs=8, drift=0.02)
    mdc = null.mdc(key, 5, 5, threshold_percent=5, alpha=0.05, cells=8)
    critical = 1.05 * max(1.0, float(np.quantile(null.null_ratios(key, 5, 5), 1 - 0.05 / 8)))
    # an independent A/A draw scaled by the MDC crosses the critical ratio 90% of the time
    rng = np.random.default_rng(99)
    hits = 0
    trials = 4000
    for _ in range(trials):
        i, j = rng.choice(len(data), 2, replace=False)
        b = np.median(rng.choice(data[i], 5))
        c = np.median(rng.choice(data[j], 5)) * (1 + mdc / 100)
        hits += c / b > critical
    assert hits / trials == pytest.approx(0.9, abs=0.03)


def test_false_positive_rates_by_resampling() -> None:
    key, null, _ = _calibration(0.2, runs=6)
    per_cell, overall = null.false_positive_rates(3, 3, threshold_percent=20, alpha=0.05)
    ratios = null.null_ratios(key, 3, 3)
    assert per_cell[key][0] == pytest.approx(np.mean(ratios > 1.2))
    assert overall[0] == pytest.approx(per_cell[key][0])
    assert 0 <= per_cell[key][1] <= per_cell[key][0]
    # with one cell, Holm is the plain test: confirmed when ratio > 1.2 and the p-value of
    # ratio / 1.2 (H0: at most 20% slower) is <= 0.05
    p = np.array([(1 + np.count_nonzero(ratios >= r / 1.2)) / (1 + ratios.size) for r in ratios])
    assert per_cell[key][1] == pytest.approx(np.mean((ratios > 1.2) & (p <= 0.05)))


def test_calibrated_interval_inverts_the_null() -> None:
    key, null, _ = _calibration(0.05)
    low, high = null.interval(key, 1.5, 5, 5)
    q_low, q_high = np.quantile(null.null_ratios(key, 5, 5), [0.025, 0.975])
    assert (low, high) == pytest.approx((1.5 / q_high, 1.5 / q_low))


# --- E-Divisive -------------------------------------------------------------------------


def _brute_q(z: np.ndarray, tau: int) -> float:
    x, y = z[:tau], z[tau:]
    m, n = len(x), len(y)
    cross = np.abs(x[:, None] - y[None, :]).sum() * 2 / (m * n)
    within_x = sum(abs(a - b) for a, b in itertools.combinations(x, 2)) / math.comb(m, 2)
    within_y = sum(abs(a - b) for a, b in itertools.combinations(y, 2)) / math.comb(n, 2)
    return m * n / (m + n) * (cross - within_x - within_y)


def test_divergence_curve_matches_brute_force_energy_statistic() -> None:
    z = np.random.default_rng(3).normal(0, 1, 17)
    curve = divergence_curve(z)
    for tau in range(3, 15):
        assert curve[tau] == pytest.approx(_brute_q(z, tau), rel=1e-10, abs=1e-12)
    # energy distance agrees with scipy's (exponent 1: E = 2E|X-Y| - E|X-X'| - E|Y-Y'|, with
    # V-statistics in scipy; compare the cross term through it on equal halves)
    x, y = z[:8], z[8:16]
    cross = np.abs(x[:, None] - y[None, :]).mean()
    v_within = (np.abs(x[:, None] - x[None, :]).mean() + np.abs(y[:, None] - y[None, :]).mean()) / 2
    assert scipy.stats.energy_distance(x, y) == pytest.approx(
        math.sqrt(2 * cross - 2 * v_within), rel=1e-9
    )


def test_e_divisive_finds_a_step_and_nothing_in_noise() -> None:
    rng = np.random.default_rng(8)
    series = np.r_[rng.normal(1.0, 0.03, 11), rng.normal(1.3, 0.03, 9)]
    changes = e_divisive(series)
    (change,) = [c for c in changes if c.index == 11]  # the 12th point starts the new level
    assert change.statistic == max(c.statistic for c in changes)
    assert change.change_percent == pytest.approx(30, abs=5)
    assert change.p_value <= 0.01
    two = np.r_[rng.normal(1, 0.02, 15), rng.normal(1.5, 0.02, 15), rng.normal(1.1, 0.02, 15)]
    assert [c.index for c in e_divisive(two)] == [15, 30]
    quiet = [
        c for seed in range(10) for c in e_divisive(np.random.default_rng(seed).normal(1, 0.05, 30))
    ]
    assert len(quiet) <= 1  # p <= 0.01 per series: rarely a false change point
