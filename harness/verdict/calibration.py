"""The calibrated null of a host: how far apart two independent A/A runs land.

A calibration holds, per cell (acquisition, format, cache state), the kept trial
seconds of N independent runs of the same code on the same inputs. From them:

- **null ratios** at rep counts (n_base, n_cand): for every ordered pair (i, j) of
  distinct runs, ``draws_per_pair`` resamples of n_base trials of run i and n_cand
  trials of run j (with replacement), and the ratio of their medians. Run-to-run
  drift (the larger part of the noise on a shared machine) is in the pairs;
  within-run scatter at the comparison's rep count is in the resampling.
- **p-value** of an observed ratio R: ``(1 + #{null >= R}) / (1 + M)`` (slower) or
  with ``<=`` (faster), the add-one rule that never returns 0.
- **interval** of the true ratio: ``[R / q_hi, R / q_lo]`` with q the null's
  (1 +- confidence) / 2 quantiles (inverting the null as a pivot).
- **noise floor**: the change an A/A pair exceeds 5% of the time (95th percentile
  of the null ratios, minus one).
- **flag MDC**: the smallest slowdown s that the threshold rule flags (exit 2: an
  observed ratio above 1 + threshold) with probability ``power`` (0.9):
  ``s = (1 + threshold) / q_(1-power) - 1``. It is what a pass rules out: a slowdown
  this large or larger is flagged 9 times in 10, and a flagged cell is rechecked;
- **minimum detectable change** (MDC): the smallest slowdown s that the verdict
  confirms (ratio R above 1 + threshold and the p-value of R / (1 + threshold) at most
  alpha / m, Holm's first step over m cells) with probability ``power`` (0.9):
  ``s = (1 + threshold) * max(1, c) / q_(1-power) - 1`` with c the null's
  (1 - alpha / m) quantile.
- **false-positive rates** by resampling the N runs: the fraction of A/A draws in
  which the threshold rule alone, and the full verdict, flag a cell, per cell and
  per comparison (any cell; the cells of one draw come from the same pair of runs,
  so their correlation is kept).

Everything is seeded (numpy PCG64): the same calibration gives the same numbers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from functools import cache

import numpy as np

from harness.verdict.holm import holm_adjust
from harness.verdict.resampling import DEFAULT_SEED, resampled_medians

CellKey = tuple[str, str, str]

#: Resamples per ordered pair of runs (8 runs: 56 pairs, 4480 null ratios).
DEFAULT_DRAWS_PER_PAIR = 80
MIN_RUNS = 5
DEFAULT_RUNS = 8
DETECTION_POWER = 0.9
NOISE_FLOOR_QUANTILE = 0.95


class CalibratedNull:
    """A/A ratio distributions of one host, per cell; see the module docstring."""

    def __init__(
        self,
        runs_per_cell: Mapping[CellKey, Sequence[Sequence[float]]],
        *,
        draws_per_pair: int = DEFAULT_DRAWS_PER_PAIR,
        seed: int = DEFAULT_SEED,
    ) -> None:
        self.runs: dict[CellKey, list[np.ndarray]] = {}
        for key, runs in runs_per_cell.items():
            arrays = [np.asarray(r, dtype=np.float64) for r in runs]
            self.runs[tuple(key)] = arrays
        self.draws_per_pair = draws_per_pair
        self.seed = seed
        self._null = cache(self._compute_null)
        self._sorted = cache(lambda key, n_base, n_cand: np.sort(self._null(key, n_base, n_cand)))

    @property
    def cells(self) -> list[CellKey]:
        return sorted(self.runs)

    def usable(self, key: CellKey) -> bool:
        """At least two runs with kept trials: enough to form a pair."""
        return sum(1 for r in self.runs.get(key, []) if r.size) >= 2

    def _pairs(self, key: CellKey) -> list[tuple[int, int]]:
        valid = [i for i, r in enumerate(self.runs[key]) if r.size]
        return [(i, j) for i in valid for j in valid if i != j]

    def _rng(self, key: CellKey, n_base: int, n_cand: int, i: int, j: int) -> np.random.Generator:
        label = f"{self.seed}/{'/'.join(key)}/{n_base}/{n_cand}/{i}/{j}".encode()
        return np.random.default_rng(int.from_bytes(hashlib.sha256(label).digest()[:8], "little"))

    def _compute_null(self, key: CellKey, n_base: int, n_cand: int) -> np.ndarray:
        rows = []
        runs = self.runs[key]
        for i, j in self._pairs(key):
            rng = self._rng(key, n_base, n_cand, i, j)
            base = resampled_medians(runs[i], n_base, self.draws_per_pair, rng)
            cand = resampled_medians(runs[j], n_cand, self.draws_per_pair, rng)
            rows.append(cand / base)
        if not rows:
            raise ValueError(f"cell {'/'.join(key)}: fewer than two calibration runs")
        return np.concatenate(rows)  # pair-major: row r of every cell comes from one pair

    def null_ratios(self, key: CellKey, n_base: int, n_cand: int) -> np.ndarray:
        """The A/A ratios of medians at these rep counts (pair-major order)."""
        return self._null(tuple(key), int(n_base), int(n_cand))

    def _sorted_null(self, key: CellKey, n_base: int, n_cand: int) -> np.ndarray:
        return self._sorted(tuple(key), int(n_base), int(n_cand))

    def p_slower(self, key: CellKey, ratio: float, n_base: int, n_cand: int) -> float:
        null = self._sorted_null(key, n_base, n_cand)
        above = null.size - np.searchsorted(null, ratio, side="left")
        return float((1 + above) / (1 + null.size))

    def p_faster(self, key: CellKey, ratio: float, n_base: int, n_cand: int) -> float:
        null = self._sorted_null(key, n_base, n_cand)
        below = np.searchsorted(null, ratio, side="right")
        return float((1 + below) / (1 + null.size))

    def smallest_p(self, key: CellKey, n_base: int, n_cand: int) -> float:
        """The smallest p-value the add-one rule can give here: 1 / (1 + M)."""
        return 1.0 / (1 + self._sorted_null(key, n_base, n_cand).size)

    def interval(
        self, key: CellKey, ratio: float, n_base: int, n_cand: int, confidence: float = 0.95
    ) -> tuple[float, float]:
        """Interval of the true ratio given an observed one (the null inverted as a pivot)."""
        tail = (1 - confidence) / 2
        q_low, q_high = np.quantile(self.null_ratios(key, n_base, n_cand), [tail, 1 - tail])
        return float(ratio / q_high), float(ratio / q_low)

    def noise_floor(self, key: CellKey, n_base: int, n_cand: int) -> float:
        """Percent change that an A/A pair exceeds 5% of the time."""
        null = self.null_ratios(key, n_base, n_cand)
        return float((np.quantile(null, NOISE_FLOOR_QUANTILE) - 1) * 100)

    def flag_mdc(
        self,
        key: CellKey,
        n_base: int,
        n_cand: int,
        *,
        threshold_percent: float,
        power: float = DETECTION_POWER,
    ) -> float:
        """Smallest slowdown (percent) flagged (exit 2) with probability ``power``."""
        null = self.null_ratios(key, n_base, n_cand)
        return float(((1 + threshold_percent / 100) / np.quantile(null, 1 - power) - 1) * 100)

    def mdc(
        self,
        key: CellKey,
        n_base: int,
        n_cand: int,
        *,
        threshold_percent: float,
        alpha: float,
        cells: int,
        power: float = DETECTION_POWER,
    ) -> float:
        """Minimum detectable change (percent) of the full verdict; see the module docstring."""
        null = self.null_ratios(key, n_base, n_cand)
        critical = float(np.quantile(null, 1 - alpha / max(cells, 1)))
        needed = (1 + threshold_percent / 100) * max(1.0, critical)
        return float((needed / np.quantile(null, 1 - power) - 1) * 100)

    def false_positive_rates(
        self,
        n_base: int,
        n_cand: int,
        *,
        threshold_percent: float,
        alpha: float,
        keys: Sequence[CellKey] | None = None,
    ) -> tuple[dict[CellKey, tuple[float, float]], tuple[float, float]]:
        """(rule, verdict) false-positive rates per cell and per comparison (any cell).

        Only cells sharing the same runs (the usual case) are drawn jointly; the
        per-comparison figure uses the cells whose null has the common length.
        """
        keys = [k for k in (keys or self.cells) if self.usable(k)]
        if not keys:
            return {}, (0.0, 0.0)
        limit = 1 + threshold_percent / 100
        nulls = {k: self.null_ratios(k, n_base, n_cand) for k in keys}
        per_cell: dict[CellKey, tuple[float, float]] = {}
        rule_rows, p_rows = [], []
        length = max(len(v) for v in nulls.values())
        for key in keys:
            null = nulls[key]
            ordered = np.sort(null)
            shifted = null / limit  # the verdict tests R / (1 + threshold) against the null
            p = (1 + null.size - np.searchsorted(ordered, shifted, side="left")) / (1 + null.size)
            flagged_rule = null > limit
            per_cell[key] = (float(flagged_rule.mean()), 0.0)
            if null.size == length:
                rule_rows.append(flagged_rule)
                p_rows.append(np.where(flagged_rule, p, 1.0))
        rule_matrix = np.vstack(rule_rows)
        p_matrix = np.vstack(p_rows)
        confirmed = np.zeros_like(rule_matrix)
        for column in range(p_matrix.shape[1]):
            adjusted = holm_adjust([float(v) for v in p_matrix[:, column]])
            confirmed[:, column] = np.asarray(adjusted) <= alpha
        confirmed &= rule_matrix
        joint_keys = [k for k in keys if nulls[k].size == length]
        for row, key in enumerate(joint_keys):
            per_cell[key] = (per_cell[key][0], float(confirmed[row].mean()))
        return per_cell, (
            float(rule_matrix.any(axis=0).mean()),
            float(confirmed.any(axis=0).mean()),
        )
