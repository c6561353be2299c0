"""The verdict of each cell: ``slower``, ``possibly_slower``, ``faster`` or ``unchanged``.

Rules (docs/verdicts.md):

- the **change** is median(candidate) / median(baseline) - 1; the threshold
  (``--regression-percent``, 20 by default) is the review trigger;
- the **p-value** is one-sided and tests the threshold, not mere difference: H0 is
  "the candidate is at most ``threshold`` slower" (the candidate's seconds divided by
  1 + threshold). With a calibration that covers the cell it is the calibrated null's
  (the observed ratio over 1 + threshold against this host's A/A ratios at the same
  rep counts); without one, Mann-Whitney U of the trials (exact for small samples),
  which sees no run-to-run drift and so needs the margin most. Holm's correction over
  the cells of the comparison gives the adjusted p-value compared with alpha (0.05);
- ``slower``: change above the threshold and adjusted p <= alpha (exit 2);
- ``possibly_slower``: change above the threshold, not significant (exit 2, recheck
  advised; with too few trials to ever reach significance it says so);
- ``faster``: the mirror image: the baseline more than the threshold slower than the
  candidate (ratio below 1 / (1 + threshold)), significantly so (Holm over the cells);
- ``unchanged``: everything else; a significant change within the threshold is
  stated in the notes, not flagged.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from harness.stats import (
    hodges_lehmann,
    mann_whitney_u,
    median,
    relative_spread,
    smallest_possible_p,
    smallest_signed_rank_p,
    wilcoxon_signed_rank,
)
from harness.verdict.calibration import CalibratedNull
from harness.verdict.holm import holm_adjust
from harness.verdict.resampling import (
    DEFAULT_RESAMPLES,
    paired_ratio_interval,
    ratio_of_medians_interval,
)

CellKey = tuple[str, str, str]
DEFAULT_ALPHA = 0.05
CONFIDENCE = 0.95


class CellVerdict(enum.Enum):
    """What one cell says; ``flagged`` ones make the comparison exit 2."""

    SLOWER = "slower"
    POSSIBLY_SLOWER = "possibly_slower"
    FASTER = "faster"
    UNCHANGED = "unchanged"

    @property
    def flagged(self) -> bool:
        return self in (CellVerdict.SLOWER, CellVerdict.POSSIBLY_SLOWER)


@dataclass(frozen=True)
class CellComparison:
    """Medians, change, interval, significance and verdict of one cell."""

    acquisition: str
    format: str
    cache_state: str
    n_baseline: int
    n_candidate: int
    baseline_median: float
    candidate_median: float
    change_percent: float
    ci_percent: tuple[float, float]
    p_value: float
    p_adjusted: float
    p_method: str
    verdict: CellVerdict
    baseline_spread: float | None = None
    candidate_spread: float | None = None
    noise_floor_percent: float | None = None
    mdc_percent: float | None = None
    notes: tuple[str, ...] = ()
    #: for a rechecked cell: the recheck trials' own count and median change
    recheck: Mapping[str, object] | None = None
    warnings: tuple[str, ...] = field(default=())

    @property
    def flagged(self) -> bool:
        return self.verdict.flagged

    @property
    def key(self) -> CellKey:
        return (self.acquisition, self.format, self.cache_state)


@dataclass(frozen=True)
class _Evidence:
    ratio: float
    interval: tuple[float, float]
    p_slower: float  # H0: the candidate is at most threshold slower
    p_faster: float  # H0: the baseline is at most threshold slower than the candidate
    p_change_up: float  # H0: no slowdown at all (for the notes)
    p_change_down: float  # H0: no speed-up at all (for the notes)
    method: str
    noise_floor: float | None
    mdc: float | None


def _evidence(
    key: CellKey,
    baseline: Sequence[float],
    candidate: Sequence[float],
    calibration: CalibratedNull | None,
    *,
    threshold_percent: float,
    alpha: float,
    cells: int,
    resamples: int,
) -> _Evidence:
    base_median, cand_median = median(baseline), median(candidate)
    ratio = cand_median / base_median if base_median > 0 else float("inf")
    n_b, n_c = len(baseline), len(candidate)
    factor = 1 + threshold_percent / 100
    if calibration is not None and calibration.usable(key):
        return _Evidence(
            ratio=ratio,
            interval=calibration.interval(key, ratio, n_b, n_c, CONFIDENCE),
            p_slower=calibration.p_slower(key, ratio / factor, n_b, n_c),
            p_faster=calibration.p_faster(key, ratio * factor, n_b, n_c),
            p_change_up=calibration.p_slower(key, ratio, n_b, n_c),
            p_change_down=calibration.p_faster(key, ratio, n_b, n_c),
            method="calibrated",
            noise_floor=calibration.noise_floor(key, n_b, n_c),
            mdc=calibration.mdc(
                key, n_b, n_c, threshold_percent=threshold_percent, alpha=alpha, cells=cells
            ),
        )
    slower = mann_whitney_u([v / factor for v in candidate], baseline, alternative="greater")
    faster = mann_whitney_u([v * factor for v in candidate], baseline, alternative="less")
    try:
        interval = ratio_of_medians_interval(
            baseline, candidate, confidence=CONFIDENCE, resamples=resamples
        )
    except ValueError:
        interval = (float("nan"), float("nan"))
    return _Evidence(
        ratio=ratio,
        interval=interval,
        p_slower=slower.p_value,
        p_faster=faster.p_value,
        p_change_up=mann_whitney_u(candidate, baseline, alternative="greater").p_value,
        p_change_down=mann_whitney_u(candidate, baseline, alternative="less").p_value,
        method=f"mann-whitney-{slower.method}",
        noise_floor=None,
        mdc=None,
    )


def _paired_evidence(
    pairs: Sequence[tuple[float, float]], *, threshold_percent: float, resamples: int
) -> _Evidence:
    """A paired recheck's evidence: each (baseline, candidate) pair shares its moment, so
    the test is Wilcoxon's signed-rank test of the pairs' log ratios (against the
    threshold's for ``p_slower``) and the change its estimate, the Hodges-Lehmann
    pseudo-median of the log ratios."""
    logs = [math.log(c / b) for b, c in pairs]
    shift = math.log(1 + threshold_percent / 100)
    slower = wilcoxon_signed_rank([d - shift for d in logs], alternative="greater")
    return _Evidence(
        ratio=math.exp(hodges_lehmann(logs)),
        interval=paired_ratio_interval(logs, confidence=CONFIDENCE, resamples=resamples),
        p_slower=slower.p_value,
        p_faster=wilcoxon_signed_rank([d + shift for d in logs], alternative="less").p_value,
        p_change_up=wilcoxon_signed_rank(logs, alternative="greater").p_value,
        p_change_down=wilcoxon_signed_rank(logs, alternative="less").p_value,
        method=f"wilcoxon-signed-rank-{slower.method}",
        noise_floor=None,
        mdc=None,
    )


def decide_cells(
    baseline: Mapping[CellKey, Sequence[float]],
    candidate: Mapping[CellKey, Sequence[float]],
    *,
    threshold_percent: float,
    alpha: float = DEFAULT_ALPHA,
    calibration: CalibratedNull | None = None,
    recheck: Mapping[CellKey, Sequence[float]] | None = None,
    paired: Mapping[CellKey, Sequence[tuple[float, float]]] | None = None,
    bootstrap_resamples: int = DEFAULT_RESAMPLES,
) -> list[CellComparison]:
    """The verdict of every cell (keys of ``baseline``, which must equal ``candidate``'s).

    ``recheck`` holds the recheck trials of flagged cells: the verdict of such a cell is
    taken on original plus recheck trials, and a flag the recheck does not confirm (its
    own median, or the pooled one, within the threshold) is cleared.

    ``paired`` holds, for cells rechecked with ``--paired``, the (baseline, candidate)
    seconds of each paired round (the two codes measured one after the other): the
    verdict of such a cell is taken on those pairs, as a paired design: the change is the
    Hodges-Lehmann pseudo-median of the pairs' ratios, significance Wilcoxon's
    signed-rank test (the calibrated null, which is between runs, does not apply); its
    flag is cleared when the paired change is within the threshold, or the pooled one
    (each side's original trials with its paired ones), as for an unpaired recheck.
    """
    keys = sorted(baseline)
    recheck = recheck or {}
    pairs_of = {k: list(v) for k, v in (paired or {}).items() if v}
    paired_keys = {k for k in keys if k in pairs_of}
    limit = threshold_percent
    pooled = {k: list(candidate[k]) + list(recheck.get(k, ())) for k in keys}
    sides = {
        k: ([b for b, _ in pairs_of[k]], [c for _, c in pairs_of[k]])
        if k in paired_keys
        else (baseline[k], pooled[k])
        for k in keys
    }
    evidence = {
        k: _paired_evidence(
            pairs_of[k], threshold_percent=threshold_percent, resamples=bootstrap_resamples
        )
        if k in paired_keys
        else _evidence(
            k,
            sides[k][0],
            sides[k][1],
            calibration,
            threshold_percent=threshold_percent,
            alpha=alpha,
            cells=len(keys),
            resamples=bootstrap_resamples,
        )
        for k in keys
    }
    adjusted_slower = dict(zip(keys, holm_adjust([evidence[k].p_slower for k in keys])))
    adjusted_faster = dict(zip(keys, holm_adjust([evidence[k].p_faster for k in keys])))
    adjusted_up = dict(zip(keys, holm_adjust([evidence[k].p_change_up for k in keys])))
    adjusted_down = dict(zip(keys, holm_adjust([evidence[k].p_change_down for k in keys])))
    faster_limit = (1 / (1 + limit / 100) - 1) * 100
    results = []
    for key in keys:
        ev = evidence[key]
        base, cand = list(sides[key][0]), list(sides[key][1])
        change = (ev.ratio - 1) * 100
        notes: list[str] = []
        recheck_info = None
        cleared = False
        if key in paired_keys:
            original_change = (median(candidate[key]) / median(baseline[key]) - 1) * 100
            recheck_info = {
                "n": len(cand),
                "median": median(cand),
                "change_percent": change,
                "original_change_percent": original_change,
                "paired": True,
                "baseline_n": len(base),
                "baseline_median": median(base),
            }
            notes.append(
                f"judged on a paired recheck ({len(cand)} rounds, the two codes measured one "
                f"after the other): pair ratio (Hodges-Lehmann) {change:+.1f}%, original "
                f"{original_change:+.1f}%"
            )
            # As for an unpaired recheck, the pooled trials may clear it too: each side's
            # original trials with its paired ones.
            pooled_change = (
                median(list(candidate[key]) + cand) / median(list(baseline[key]) + base) - 1
            ) * 100
            recheck_info["pooled_change_percent"] = pooled_change
            if original_change > limit and (change <= limit or pooled_change <= limit):
                cleared = True
                notes.append(
                    f"flag cleared by the paired recheck: original {original_change:+.1f}%, "
                    f"paired {change:+.1f}%, pooled {pooled_change:+.1f}% "
                    f"(threshold {limit:g}%)"
                )
        elif recheck.get(key):
            original_change = (median(candidate[key]) / median(base) - 1) * 100
            own_change = (median(recheck[key]) / median(base) - 1) * 100
            recheck_info = {
                "n": len(recheck[key]),
                "median": median(recheck[key]),
                "change_percent": own_change,
                "original_change_percent": original_change,
            }
            if original_change > limit and (own_change <= limit or change <= limit):
                cleared = True
                notes.append(
                    f"flag cleared by the recheck: original {original_change:+.1f}%, recheck "
                    f"alone {own_change:+.1f}%, pooled {change:+.1f}% (threshold {limit:g}%)"
                )
        if cleared:
            verdict = CellVerdict.UNCHANGED
        elif change > limit:
            if adjusted_slower[key] <= alpha:
                verdict = CellVerdict.SLOWER
            else:
                verdict = CellVerdict.POSSIBLY_SLOWER
                notes.append(
                    _possibly_advice(
                        ev, adjusted_slower[key], alpha, len(base), len(cand), len(keys), limit
                    )
                )
                if recheck_info is not None and key in paired_keys:
                    notes[-1] = notes[-1].replace(
                        "recheck (--recheck K) to confirm or clear",
                        "still past the threshold in a paired recheck; more paired rounds "
                        "(--recheck K --paired) can confirm it",
                    )
                elif recheck_info is not None:
                    notes[-1] = notes[-1].replace(
                        "recheck (--recheck K) to confirm or clear",
                        f"still past the threshold after a recheck of {recheck_info['n']} trials "
                        "(a same-process recheck shares the run's moment; `harness recheck` "
                        "later samples another)",
                    )
        elif change < faster_limit and adjusted_faster[key] <= alpha:
            verdict = CellVerdict.FASTER
        else:
            verdict = CellVerdict.UNCHANGED
            if change < faster_limit:
                notes.append(
                    f"faster by {-change:.1f}% but not significantly beyond the threshold "
                    f"(Holm-adjusted p = {adjusted_faster[key]:.3g})"
                )
            elif adjusted_up[key] <= alpha or adjusted_down[key] <= alpha:
                notes.append(
                    f"a significant {change:+.1f}% change, within the {limit:g}% threshold"
                )
        if ev.mdc is not None and ev.mdc > limit and verdict is CellVerdict.UNCHANGED:
            notes.append(
                f"this host detects only slowdowns of {ev.mdc:.0f}% or more here (90% power): "
                "a pass does not rule out smaller ones"
            )
        warnings = _warnings(ev, len(base), len(cand), len(keys), alpha, limit, base, cand)
        if (
            key in paired_keys
            and smallest_signed_rank_p(len(cand), alternative="greater") * len(keys) > alpha
        ):
            warnings = (
                f"{len(cand)} paired rounds cannot confirm `slower` over {len(keys)} cells "
                f"(the smallest signed-rank p is 1/{2 ** len(cand)}); a flag past the threshold "
                "stays possibly_slower",
                *warnings,
            )
        low, high = ev.interval
        results.append(
            CellComparison(
                acquisition=key[0],
                format=key[1],
                cache_state=key[2],
                n_baseline=len(base),
                n_candidate=len(cand),
                baseline_median=median(base),
                candidate_median=median(cand),
                change_percent=change,
                ci_percent=((low - 1) * 100, (high - 1) * 100),
                p_value=ev.p_slower,
                p_adjusted=adjusted_slower[key],
                p_method=ev.method,
                verdict=verdict,
                baseline_spread=relative_spread(base),
                candidate_spread=relative_spread(cand),
                noise_floor_percent=ev.noise_floor,
                mdc_percent=ev.mdc,
                notes=tuple(notes),
                recheck=recheck_info,
                warnings=warnings,
            )
        )
    return results


def _warnings(
    ev: _Evidence,
    n_b: int,
    n_c: int,
    cells: int,
    alpha: float,
    limit: float,
    base: Sequence[float],
    cand: Sequence[float],
) -> tuple[str, ...]:
    warnings = []
    if ev.method.startswith("mann-whitney") and (
        smallest_possible_p(n_c, n_b, alternative="greater") * cells > alpha
    ):
        warnings.append(
            f"too few trials ({n_b} vs {n_c}): no slowdown can reach significance over "
            f"{cells} cells without a calibration (harness calibrate)"
        )
    for side, values in (("baseline", base), ("candidate", cand)):
        spread = relative_spread(values)
        if spread is not None and spread * 100 > limit:
            warnings.append(
                f"{side} too noisy: spread {spread * 100:.1f}% (IQR/median) exceeds the "
                f"{limit:g}% threshold"
            )
    return tuple(warnings)


def _possibly_advice(
    ev: _Evidence, adjusted: float, alpha: float, n_b: int, n_c: int, cells: int, limit: float
) -> str:
    if (
        ev.method.startswith("mann-whitney")
        and smallest_possible_p(n_c, n_b, alternative="greater") * cells > alpha
    ):
        reason = (
            f"{n_b} vs {n_c} trials cannot reach significance over {cells} cells without a "
            "calibration"
        )
    elif (
        ev.method.startswith("wilcoxon")
        and smallest_signed_rank_p(n_c, alternative="greater") * cells > alpha
    ):
        reason = f"{n_c} paired rounds cannot reach significance over {cells} cells"
    else:
        reason = f"not significant (Holm-adjusted p = {adjusted:.3g} > {alpha:g})"
    if ev.mdc is not None and ev.mdc > limit:
        reason += f"; the threshold is below this host's minimum detectable change ({ev.mdc:.0f}%)"
    return f"{reason}: recheck (--recheck K) to confirm or clear"
