"""The calibrated A/A null (harness/verdict/calibration.py) against the formulas its
module docstring states, computed here from its public null ratios: kills survivors of
the mutmut run over harness/verdict/ (tests/mutation-survivors.md)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from harness.verdict.calibration import CalibratedNull
from harness.verdict.changes import e_divisive
from harness.verdict.holm import holm_adjust
from harness.verdict.resampling import resampled_medians

A, B = ("scan-a", "hdf5", "cold"), ("scan-b", "qem", "cached")
RUNS = [[1.0 + 0.3 * ((i * 7 + j) % 5 - 2) / 2 for j in range(3)] for i in range(4)]


def test_usable_cells_need_two_runs_with_trials():
    null = CalibratedNull({A: [[1.0], [], [1.1]], B: [[1.0], []]})
    assert null.usable(A) and not null.usable(B) and not null.usable(("x", "y", "z"))
    assert CalibratedNull({A: [[1.0], [1.0, 2.0], [], []]}).usable(A) is not False
    assert CalibratedNull({A: [[1.0], [1.0]]}).usable(A)
    assert not CalibratedNull({A: [[1.0]]}).usable(A)
    with pytest.raises(ValueError) as info:
        CalibratedNull({B: [[1.0], []]}).null_ratios(B, 3, 3)
    assert str(info.value) == "cell scan-b/qem/cached: fewer than two calibration runs"


def test_each_pair_draws_from_its_own_seeded_generator():
    null = CalibratedNull({A: RUNS}, draws_per_pair=3, seed=11)
    expected = []
    for i in range(4):
        for j in range(4):
            if i != j:
                label = f"11/scan-a/hdf5/cold/2/5/{i}/{j}".encode()
                rng = np.random.default_rng(
                    int.from_bytes(hashlib.sha256(label).digest()[:8], "little")
                )
                base = resampled_medians(RUNS[i], 2, 3, rng)
                expected.append(resampled_medians(RUNS[j], 5, 3, rng) / base)
    np.testing.assert_array_equal(null.null_ratios(A, 2, 5), np.concatenate(expected))
    other = CalibratedNull({A: RUNS}, draws_per_pair=3, seed=12)
    assert not np.array_equal(other.null_ratios(A, 2, 5), null.null_ratios(A, 2, 5))


def test_noise_floor_and_mdc_follow_their_formulas():
    null = CalibratedNull({A: RUNS})
    ratios = null.null_ratios(A, 3, 3)
    assert null.noise_floor(A, 3, 3) == float((np.quantile(ratios, 0.95) - 1) * 100)
    for cells, alpha in ((1, 0.05), (4, 0.05), (2, 0.2)):
        critical = float(np.quantile(ratios, 1 - alpha / cells))
        needed = 1.2 * max(1.0, critical)
        expected = float((needed / np.quantile(ratios, 0.1) - 1) * 100)
        got = null.mdc(A, 3, 3, threshold_percent=20, alpha=alpha, cells=cells)
        assert got == pytest.approx(expected, rel=1e-12)
    assert null.mdc(A, 3, 3, threshold_percent=20, alpha=0.05, cells=0) == null.mdc(
        A, 3, 3, threshold_percent=20, alpha=0.05, cells=1
    )


def _rates_by_hand(null, keys, limit, alpha):
    """Brute force: for every joint draw, each cell flagged by the rule, confirmed when
    its p (add-one, R / limit against its null) survives Holm over the cells."""
    nulls = {k: null.null_ratios(k, 3, 3) for k in keys}
    length = max(v.size for v in nulls.values())
    joint = [k for k in keys if nulls[k].size == length]
    rule = {k: float(np.mean(nulls[k] > limit)) for k in keys}
    confirmed = {k: 0 for k in joint}
    any_rule = any_confirmed = 0
    for d in range(length):
        flags, ps = [], []
        for k in joint:
            r = nulls[k][d]
            flags.append(r > limit)
            p = (1 + np.sum(nulls[k] >= r / limit)) / (1 + nulls[k].size)
            ps.append(p if r > limit else 1.0)
        adjusted = holm_adjust(ps)
        hits = [f and a <= alpha for f, a in zip(flags, adjusted, strict=True)]
        for k, hit in zip(joint, hits, strict=True):
            confirmed[k] += hit
        any_rule += any(flags)
        any_confirmed += any(hits)
    per_cell = {k: (rule[k], confirmed[k] / length if k in joint else 0.0) for k in keys}
    return per_cell, (any_rule / length, any_confirmed / length)


def test_false_positive_rates_match_a_brute_force_count():
    noisy = [[1.0 + 0.5 * ((i * 7 + j * 3) % 7 - 3) / 3 for j in range(3)] for i in range(5)]
    c = ("scan-c", "hdf5", "cold")
    null = CalibratedNull({A: noisy, B: noisy[::-1], c: noisy[:3]}, draws_per_pair=40)
    per_cell, overall = null.false_positive_rates(3, 3, threshold_percent=20, alpha=0.2)
    expected_cells, expected_overall = _rates_by_hand(null, [A, B, c], 1.2, 0.2)
    assert per_cell == pytest.approx(expected_cells)
    assert overall == pytest.approx(expected_overall)
    assert per_cell[A][1] > 0 and per_cell[c] == (pytest.approx(per_cell[c][0]), 0.0)
    assert overall[0] > overall[1] > 0


def test_e_divisive_is_seeded_with_zero_by_default():
    values = [1.0, 1.02, 0.99, 1.01, 1.03, 1.0, 1.05, 1.02, 1.04, 1.01, 1.06, 1.03]
    found = e_divisive(values, permutations=999, p_threshold=1.0)
    assert found == e_divisive(values, permutations=999, p_threshold=1.0, seed=0)
    assert found != e_divisive(values, permutations=999, p_threshold=1.0, seed=1)


def test_change_point_p_values_count_permutations_by_the_add_one_rule():
    """(reached + 1) / (permutations + 1), reached counting permutations whose best split
    is at least as strong: 10 + 10 values in two levels are never matched by chance
    (2 of 184,756 orders), 4 + 4 are matched by 2 of their 70 orders."""
    (far,) = e_divisive([1.0] * 10 + [2.0] * 10, permutations=199, p_threshold=0.5)
    assert (far.index, far.p_value) == (10, 1 / 200)
    (near,) = e_divisive([1.0] * 4 + [2.0] * 4, permutations=999, p_threshold=0.5)
    assert near.index == 4
    assert 0.018 < near.p_value < 0.04  # about 2 / 70, from 999 permutations


def test_holm_adjusts_in_the_order_given_and_caps_at_one():
    assert holm_adjust([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert holm_adjust([0.0, 0.6, 0.6]) == [0.0, 1.0, 1.0]  # 0 allowed; 2 x 0.6 capped
    assert holm_adjust([0.9]) == [0.9]
    with pytest.raises(ValueError) as info:
        holm_adjust([0.2, 1.5])
    assert str(info.value) == "p-values must lie in [0, 1], not 1.5"
