"""The verdict of each cell: ``slower``, ``possibly_slower``, ``faster``, ``unchanged`` or
``undecided``.

Rules (docs/verdicts.md):

- the **change** is median(candidate) / median(baseline) - 1 of the medians shown beside
  it (the estimator is named :data:`ESTIMATOR`); the threshold
  (``--regression-percent``, 20 by default) is the review trigger;
- the **p-value** is one-sided and tests the threshold, not mere difference: H0 is
  "the candidate is at most ``threshold`` slower" (the candidate's seconds divided by
  1 + threshold). With a calibration that covers the cell it is the calibrated null's
  (the observed ratio over 1 + threshold against this host's A/A ratios at the same
  rep counts); without one, Mann-Whitney U of the trials (exact for small samples),
  which sees no run-to-run drift and so needs the margin most. Holm's correction over
  the cells of the comparison gives the adjusted p-value compared with alpha (0.05);
- ``slower``: change above the threshold and adjusted p <= alpha (exit 2);
- ``possibly_slower``: change above the threshold, not significant (exit 2; with too
  few trials to ever reach significance it says so and names the recheck that can);
- ``faster``: the mirror image: the baseline more than the threshold slower than the
  candidate (ratio below 1 / (1 + threshold)), significantly so (Holm over the cells);
- ``undecided``: a change within the threshold whose interval reaches past it (these
  trials cannot rule out a slowdown beyond the threshold); not flagged, but rechecked;
- ``unchanged``: everything else; a significant change within the threshold is
  stated in the notes with the p-value that makes it so, not flagged.

A **recheck** (:func:`decide_cells` with ``recheck`` or ``paired``) is a second stage on
fresh trials of the cells the first stage flagged or left undecided. Its change is the ratio of its own
medians (a paired recheck: the baseline code's and the candidate code's paired trials;
else the recheck trials against the baseline's), its p-value Mann-Whitney U against the
threshold (or the calibrated null) with Holm over the **rechecked cells**. A flag is
cleared only when the recheck's 95% interval of the change lies at or below the
threshold, and not then when both stages see a slowdown but on either side of the
threshold (the recheck's interval above 0, its change at least half the threshold, the
original interval wholly above the recheck's and past the threshold: ``undecided``); it
becomes ``slower`` when the recheck is significant, or when the first stage already was
and the recheck's change stays past the threshold; otherwise a flagged cell stays
``possibly_slower`` and an undecided one ``undecided``.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from harness.stats import mann_whitney_u, median, relative_spread, smallest_possible_p
from harness.verdict.calibration import CalibratedNull
from harness.verdict.holm import holm_adjust
from harness.verdict.resampling import (
    DEFAULT_RESAMPLES,
    paired_median_ratio_interval,
    ratio_of_medians_interval,
)

CellKey = tuple[str, str, str]
DEFAULT_ALPHA = 0.05
CONFIDENCE = 0.95


def recheck_confidence(looks: int) -> float:
    """The confidence of a recheck's interval when it may stop at any of ``looks`` looks."""
    return 1 - (1 - CONFIDENCE) / looks


#: How every cell's change is estimated from the medians shown beside it.
ESTIMATOR = "ratio of medians"
#: What settles a flag that the trials cannot (docs/verdicts.md, "Recheck").
RECHECK_COMMAND = "harness recheck CANDIDATE --baseline BASELINE --recheck {rounds}"


class CellVerdict(enum.Enum):
    """What one cell says; ``flagged`` ones make the comparison exit 2."""

    SLOWER = "slower"
    POSSIBLY_SLOWER = "possibly_slower"
    FASTER = "faster"
    UNCHANGED = "unchanged"
    UNDECIDED = "undecided"

    @property
    def flagged(self) -> bool:
        return self in (CellVerdict.SLOWER, CellVerdict.POSSIBLY_SLOWER)

    @property
    def needs_recheck(self) -> bool:
        """Flagged, or undecided: what a recheck measures again."""
        return self.flagged or self is CellVerdict.UNDECIDED


@dataclass(frozen=True)
class CellComparison:
    """Medians, change, interval, significance and verdict of one cell.

    ``change_percent`` is ``candidate_median / baseline_median - 1`` (:data:`ESTIMATOR`)
    of the medians in this record; after a recheck those are the recheck's (a paired
    one: the two codes' paired trials) and the original ones are in ``recheck``.
    ``p_value``/``p_adjusted`` are the test that decided the verdict, Holm-adjusted over
    ``holm_family`` cells.
    """

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
    #: for a rechecked cell: the recheck's counts, the original medians and change
    recheck: Mapping[str, object] | None = None
    warnings: tuple[str, ...] = field(default=())
    estimator: str = ESTIMATOR
    holm_family: int = 1
    #: the smallest slowdown this cell's trials flag (exit 2) 9 times in 10 (calibrated)
    flag_mdc_percent: float | None = None

    @property
    def flagged(self) -> bool:
        return self.verdict.flagged

    @property
    def key(self) -> CellKey:
        return (self.acquisition, self.format, self.cache_state)


@dataclass(frozen=True)
class _Evidence:
    baseline: tuple[float, ...]
    candidate: tuple[float, ...]
    ratio: float
    interval: tuple[float, float]
    p_slower: float  # H0: the candidate is at most threshold slower
    p_faster: float  # H0: the baseline is at most threshold slower than the candidate
    p_change_up: float  # H0: no slowdown at all (for the notes)
    p_change_down: float  # H0: no speed-up at all (for the notes)
    method: str
    noise_floor: float | None
    mdc: float | None
    flag_mdc: float | None  # the smallest slowdown flagged 9 times in 10 (what a pass rules out)
    smallest_p: float  # the smallest p-value these trial counts can give

    @property
    def change(self) -> float:
        return (self.ratio - 1) * 100

    @property
    def interval_percent(self) -> tuple[float, float]:
        low, high = self.interval
        return ((low - 1) * 100, (high - 1) * 100)


def _ratio(baseline: Sequence[float], candidate: Sequence[float]) -> float:
    base_median = median(baseline)
    return median(candidate) / base_median if base_median > 0 else float("inf")


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
    pairs: Sequence[tuple[float, float]] | None = None,
    confidence: float = CONFIDENCE,
) -> _Evidence:
    """The evidence of ``candidate`` against ``baseline`` trials; ``pairs`` (a paired
    recheck's rounds) only change the interval's resampling, which keeps each round's two
    trials together, and rule the calibrated null out (it is between runs)."""
    ratio = _ratio(baseline, candidate)
    n_b, n_c = len(baseline), len(candidate)
    factor = 1 + threshold_percent / 100
    common = {"baseline": tuple(baseline), "candidate": tuple(candidate), "ratio": ratio}
    if pairs is None and calibration is not None and calibration.usable(key):
        return _Evidence(
            **common,
            interval=calibration.interval(key, ratio, n_b, n_c, confidence),
            p_slower=calibration.p_slower(key, ratio / factor, n_b, n_c),
            p_faster=calibration.p_faster(key, ratio * factor, n_b, n_c),
            p_change_up=calibration.p_slower(key, ratio, n_b, n_c),
            p_change_down=calibration.p_faster(key, ratio, n_b, n_c),
            method="calibrated",
            noise_floor=calibration.noise_floor(key, n_b, n_c),
            mdc=calibration.mdc(
                key, n_b, n_c, threshold_percent=threshold_percent, alpha=alpha, cells=cells
            ),
            flag_mdc=calibration.flag_mdc(key, n_b, n_c, threshold_percent=threshold_percent),
            smallest_p=calibration.smallest_p(key, n_b, n_c),
        )
    slower = mann_whitney_u([v / factor for v in candidate], baseline, alternative="greater")
    faster = mann_whitney_u([v * factor for v in candidate], baseline, alternative="less")
    try:
        if pairs is not None:
            interval = paired_median_ratio_interval(
                pairs, confidence=confidence, resamples=resamples
            )
        else:
            interval = ratio_of_medians_interval(
                baseline, candidate, confidence=confidence, resamples=resamples
            )
    except ValueError:
        interval = (float("nan"), float("nan"))
    return _Evidence(
        **common,
        interval=interval,
        p_slower=slower.p_value,
        p_faster=faster.p_value,
        p_change_up=mann_whitney_u(candidate, baseline, alternative="greater").p_value,
        p_change_down=mann_whitney_u(candidate, baseline, alternative="less").p_value,
        method=f"mann-whitney-{slower.method}",
        noise_floor=None,
        mdc=None,
        flag_mdc=None,
        smallest_p=smallest_possible_p(n_c, n_b, alternative="greater"),
    )


def rounds_needed(cells: int, alpha: float = DEFAULT_ALPHA, n_baseline: int | None = None) -> int:
    """The fewest recheck rounds K whose trials can confirm ``slower`` over ``cells``
    rechecked cells at ``alpha``: Mann-Whitney U's smallest p, 1 / C(n + K, K), times the
    cells (Holm's first step) at most alpha, with n = K for a paired recheck
    (``n_baseline`` None) else the baseline's trial count."""
    rounds = 1
    while (
        smallest_possible_p(rounds, n_baseline or rounds, alternative="greater") * max(cells, 1)
        > alpha
        and rounds < 1000
    ):
        rounds += 1
    return rounds


@dataclass(frozen=True)
class _Adjusted:
    slower: float
    faster: float
    up: float
    down: float
    family: int


def _adjust(evidence: Mapping[CellKey, _Evidence]) -> dict[CellKey, _Adjusted]:
    """Holm over the cells of ``evidence``, for each of the four tests."""
    keys = sorted(evidence)
    columns = [
        holm_adjust([getattr(evidence[k], name) for k in keys])
        for name in ("p_slower", "p_faster", "p_change_up", "p_change_down")
    ]
    return {k: _Adjusted(*(c[i] for c in columns), len(keys)) for i, k in enumerate(keys)}


def _cannot_reach(ev: _Evidence, family: int, alpha: float) -> bool:
    return ev.smallest_p * family > alpha


def _first_stage(
    ev: _Evidence, adj: _Adjusted, *, limit: float, alpha: float
) -> tuple[CellVerdict, list[str]]:
    """The verdict of the trials alone, with the note that says why when it is not plain."""
    faster_limit = (1 / (1 + limit / 100) - 1) * 100
    change = ev.change
    if change > limit:
        if adj.slower <= alpha:
            return CellVerdict.SLOWER, []
        return CellVerdict.POSSIBLY_SLOWER, [_unconfirmed(ev, adj, alpha, limit)]
    if change < faster_limit and adj.faster <= alpha:
        return CellVerdict.FASTER, []
    notes = []
    if change < faster_limit:
        notes.append(
            f"faster by {-change:.1f}% but not significantly beyond the threshold "
            f"(Holm-adjusted p = {adj.faster:.3g} > {alpha:g})"
        )
    elif adj.up <= alpha or adj.down <= alpha:
        p = min(adj.up, adj.down)
        notes.append(
            f"a {change:+.1f}% change, significant as a change of any size (Holm-adjusted "
            f"p = {p:.3g}), within the {limit:g}% threshold"
        )
    if _reaches_past(ev, limit):
        return CellVerdict.UNDECIDED, [*notes, _undecided(ev, adj, alpha, limit)]
    return CellVerdict.UNCHANGED, notes


def _reaches_past(ev: _Evidence, limit: float) -> bool:
    """The interval of the change reaches past the threshold (a NaN interval does not)."""
    return ev.interval_percent[1] > limit


def _undecided(ev: _Evidence, adj: _Adjusted, alpha: float, limit: float) -> str:
    """Why a cell within the threshold is not ``unchanged``, and what can settle it."""
    low, high = ev.interval_percent
    rounds = rounds_needed(adj.family, alpha)
    return (
        f"undecided: {ev.change:+.1f}% is within the {limit:g}% threshold, but its 95% "
        f"interval [{low:+.1f}%, {high:+.1f}%] reaches past it, so these trials cannot rule "
        f"out a slowdown beyond the threshold; settle it with "
        f"`{RECHECK_COMMAND.format(rounds=rounds)}` (or --recheck {rounds})"
    )


def _unconfirmed(ev: _Evidence, adj: _Adjusted, alpha: float, limit: float) -> str:
    """Why a cell past the threshold is not ``slower``, and what can settle it."""
    n_b, n_c = len(ev.baseline), len(ev.candidate)
    rounds = rounds_needed(adj.family, alpha)
    settle = f"settle it with `{RECHECK_COMMAND.format(rounds=rounds)}` (or --recheck {rounds})"
    if _cannot_reach(ev, adj.family, alpha):
        reason = (
            f"not enough trials: {n_b} vs {n_c} trials over {adj.family} cells cannot reach "
            f"significance (smallest p {ev.smallest_p:.3g} x {adj.family} > {alpha:g})"
        )
    else:
        reason = f"not significant (Holm-adjusted p = {adj.slower:.3g} > {alpha:g})"
    if ev.mdc is not None and ev.mdc > limit:
        reason += (
            f"; the threshold is below this host's minimum detectable change ({ev.mdc:.0f}%): "
            "only slowdowns that large are confirmed on such trials 9 times in 10"
        )
    return f"{reason}: {settle}"


def _second_stage(
    first: CellVerdict,
    original: _Evidence,
    first_adj: _Adjusted,
    ev: _Evidence,
    adj: _Adjusted,
    *,
    paired: bool,
    limit: float,
    alpha: float,
    looks: int = 1,
) -> tuple[CellVerdict, list[str], float, float]:
    """A rechecked cell: its verdict, notes and the (p, adjusted p) that decided it.

    ``alpha`` is already the recheck's share for one of its ``looks`` (alpha / looks).
    """
    what = "paired recheck" if paired else "recheck"
    low, high = ev.interval_percent
    interval = f"[{low:+.1f}%, {high:+.1f}%]"
    level = f"{recheck_confidence(looks) * 100:.4g}%"
    if high <= limit:  # a NaN interval (no resampling possible) is never evidence
        original_low, original_high = original.interval_percent
        # Both stages see a slowdown (the recheck's interval excludes none, its size at
        # least half the threshold) but disagree on its size across the threshold: neither
        # settles it. A recheck that finds no slowdown, or a small one, still clears a
        # flag that drift between runs raised.
        if low > 0 and ev.change >= limit / 2 and original_low > high and original_high > limit:
            return (
                CellVerdict.UNDECIDED,
                [
                    f"undecided: the {what} sees a slowdown within the threshold (its {level} "
                    f"interval {interval}), the original trials one past it (95% interval "
                    f"[{original_low:+.1f}%, {original_high:+.1f}%]): the two measurements of "
                    "the slowdown disagree by more than their noise, so neither settles the "
                    "cell; look at both before trusting either"
                ],
                ev.p_slower,
                adj.slower,
            )
        if first.flagged:
            note = (
                f"flag cleared by the {what}: its {level} interval {interval} lies at or below "
                f"the {limit:g}% threshold"
            )
        else:
            note = f"the {what}'s {level} interval {interval} lies at or below the threshold"
        verdict, more = _first_stage(ev, adj, limit=limit, alpha=alpha)
        if verdict.flagged:  # cannot happen (change <= high <= limit); kept explicit
            verdict = CellVerdict.UNCHANGED
        return verdict, [note, *more], ev.p_slower, adj.slower
    if ev.change > limit and adj.slower <= alpha:
        return (
            CellVerdict.SLOWER,
            [
                f"confirmed by the {what}: {ev.change:+.1f}%, Holm-adjusted p = "
                f"{adj.slower:.3g} <= {alpha:.3g} over the {adj.family} rechecked cells"
                + (f" ({looks} looks, alpha split between them)" if looks > 1 else "")
            ],
            ev.p_slower,
            adj.slower,
        )
    if first is CellVerdict.SLOWER and ev.change > limit:
        return (
            CellVerdict.SLOWER,
            [
                f"slower on the original trials (Holm-adjusted p = {first_adj.slower:.3g} over "
                f"{first_adj.family} cells); the {what}'s {ev.change:+.1f}% agrees"
            ],
            original.p_slower,
            first_adj.slower,
        )
    if not first.flagged:
        # a cell the trials did not flag is flagged by its recheck only when confirmed
        # (above): rechecking undecided cells adds no unconfirmed flag to an A/A run
        where = "within" if ev.change <= limit else "past, not significantly,"
        return (
            CellVerdict.UNDECIDED,
            [
                f"undecided: the {what}'s {ev.change:+.1f}% is {where} the {limit:g}% "
                f"threshold, and its {level} interval {interval} reaches past it; more "
                "rounds can settle it"
            ],
            ev.p_slower,
            adj.slower,
        )
    notes = [
        f"not cleared: the {what}'s {level} interval {interval} reaches past the {limit:g}% "
        "threshold"
    ]
    if ev.change > limit:
        if _cannot_reach(ev, adj.family, alpha):
            rounds = rounds_needed(adj.family, alpha, None if paired else len(ev.baseline))
            notes.append(
                f"not enough trials: {len(ev.candidate)} rounds over {adj.family} rechecked "
                f"cells cannot reach significance (smallest p {ev.smallest_p:.3g}); settle it "
                f"with `{RECHECK_COMMAND.format(rounds=rounds)}`"
            )
        else:
            notes.append(
                f"not significant (Holm-adjusted p = {adj.slower:.3g} > {alpha:g} over the "
                f"{adj.family} rechecked cells)"
            )
    return CellVerdict.POSSIBLY_SLOWER, notes, ev.p_slower, adj.slower


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
    looks: int = 1,
    delayed_rounds: Mapping[CellKey, int] | None = None,
    contended: Collection[CellKey] = (),
    unsettled: Collection[CellKey] = (),
) -> list[CellComparison]:
    """The verdict of every cell (keys of ``baseline``, which must equal ``candidate``'s).

    First stage: every cell on its trials, Holm over all cells. Second stage, for the
    cells with ``recheck`` trials (the candidate's code measured again, judged against the
    baseline's trials) or ``paired`` rounds ((baseline, candidate) seconds of the two codes
    measured one after the other; these win over ``recheck``): the recheck's own evidence,
    Holm over the rechecked cells, combined with the first stage as the module docstring
    says. ``looks`` is how many times a sequential recheck could stop (its rounds come in
    up to ``looks`` batches, each followed by a look): the recheck's tests run at
    ``alpha / looks`` and its intervals at :func:`recheck_confidence` (Bonferroni over
    the looks), so that stopping early inflates neither error.

    ``delayed_rounds`` counts, per paired cell, the rounds with a trial that waited for
    other work on the host, whose delay ``paired`` already leaves out
    (:mod:`harness.verdict.delays`); the cell's notes say so. The ``contended`` cells'
    trials may have been timed by other work (:func:`harness.verdict.delays.contended_cells`):
    on them alone such a cell is ``undecided``, not ``unchanged`` nor ``faster``, so that
    a recheck measures it paired (exit codes are unchanged: neither is flagged). A paired
    cell in ``unsettled`` (:func:`harness.verdict.delays.unsettled_cells`: its delays
    cannot be told from the code) is neither confirmed ``slower`` (it stays
    ``possibly_slower``) nor cleared (``undecided``).
    """
    if looks < 1:
        raise ValueError(f"looks must be at least 1, not {looks}")
    keys = sorted(baseline)
    limit = threshold_percent
    pairs_of = {k: list(v) for k, v in (paired or {}).items() if v and k in baseline}
    again = {k: list(v) for k, v in (recheck or {}).items() if v and k in baseline}
    rechecked = sorted(set(pairs_of) | set(again))

    recheck_alpha = alpha / looks

    def evidence_of(key, base, cand, cells, pairs=None, confidence=CONFIDENCE) -> _Evidence:
        return _evidence(
            key,
            base,
            cand,
            calibration,
            threshold_percent=threshold_percent,
            alpha=alpha,
            cells=cells,
            resamples=bootstrap_resamples,
            pairs=pairs,
            confidence=confidence,
        )

    first = {k: evidence_of(k, baseline[k], candidate[k], len(keys)) for k in keys}
    first_adj = _adjust(first)
    second: dict[CellKey, _Evidence] = {}
    for key in rechecked:
        if key in pairs_of:
            pairs = pairs_of[key]
            second[key] = evidence_of(
                key,
                [b for b, _ in pairs],
                [c for _, c in pairs],
                len(rechecked),
                pairs,
                confidence=recheck_confidence(looks),
            )
        else:
            second[key] = evidence_of(
                key,
                baseline[key],
                again[key],
                len(rechecked),
                confidence=recheck_confidence(looks),
            )
    second_adj = _adjust(second)
    results = []
    for key in keys:
        verdict, notes = _first_stage(first[key], first_adj[key], limit=limit, alpha=alpha)
        if key in contended and verdict in (CellVerdict.UNCHANGED, CellVerdict.FASTER):
            verdict = CellVerdict.UNDECIDED
            notes = [*notes, _CONTENDED_TRIALS]
        ev, adj = first[key], first_adj[key]
        p_value, p_adjusted = ev.p_slower, adj.slower
        recheck_info = None
        if key in second:
            is_paired = key in pairs_of
            original = first[key]
            ev, adj = second[key], second_adj[key]
            verdict, notes, p_value, p_adjusted = _second_stage(
                verdict,
                original,
                first_adj[key],
                ev,
                adj,
                paired=is_paired,
                limit=limit,
                alpha=recheck_alpha,
                looks=looks,
            )
            recheck_info = {
                "n": len(ev.candidate),
                "paired": is_paired,
                "baseline_n": len(ev.baseline),
                "original_n_baseline": len(original.baseline),
                "original_n_candidate": len(original.candidate),
                "original_baseline_median": median(original.baseline),
                "original_candidate_median": median(original.candidate),
                "original_change_percent": original.change,
                "original_verdict": _first_stage(
                    original, first_adj[key], limit=limit, alpha=alpha
                )[0].value,
                "original_p_adjusted": first_adj[key].slower,
                "holm_family": adj.family,
                "smallest_p": ev.smallest_p,
                "looks": looks,
                "alpha": recheck_alpha,
            }
            notes.insert(
                0,
                f"judged on the {'paired ' if is_paired else ''}recheck "
                f"({len(ev.candidate)} rounds{', both codes one after the other' if is_paired else ''}; "
                f"its medians and {ESTIMATOR} {ev.change:+.1f}%); original medians "
                f"{_ms(original.baseline)} -> {_ms(original.candidate)} "
                f"({original.change:+.1f}%); the smallest p it can give is {ev.smallest_p:.3g}",
            )
            delayed = (delayed_rounds or {}).get(key, 0) if is_paired else 0
            if delayed:
                notes.append(_delayed_note(delayed, len(ev.candidate)))
            if is_paired and key in unsettled:
                verdict, more = _unsettled(verdict)
                notes += more
        if ev.flag_mdc is not None and ev.flag_mdc > limit and not verdict.flagged:
            notes.append(
                f"this host flags slowdowns of {ev.flag_mdc:.0f}% or more here 9 times in 10 "
                "(exit 2, then a recheck settles them): a pass does not rule out smaller ones"
            )
        warnings = _warnings(
            ev,
            adj.family,
            recheck_alpha if key in second else alpha,
            limit,
            said=any("not enough" in n for n in notes),
        )
        results.append(
            CellComparison(
                acquisition=key[0],
                format=key[1],
                cache_state=key[2],
                n_baseline=len(ev.baseline),
                n_candidate=len(ev.candidate),
                baseline_median=median(ev.baseline),
                candidate_median=median(ev.candidate),
                change_percent=ev.change,
                ci_percent=ev.interval_percent,
                p_value=p_value,
                p_adjusted=p_adjusted,
                p_method=ev.method,
                verdict=verdict,
                baseline_spread=relative_spread(ev.baseline),
                candidate_spread=relative_spread(ev.candidate),
                noise_floor_percent=ev.noise_floor,
                mdc_percent=ev.mdc,
                flag_mdc_percent=ev.flag_mdc,
                notes=tuple(notes),
                recheck=recheck_info,
                warnings=warnings,
                holm_family=adj.family,
            )
        )
    return results


def _unsettled(verdict: CellVerdict) -> tuple[CellVerdict, list[str]]:
    """A paired cell whose delays cannot be told from the code: no verdict the timings
    cannot carry (the exit code is the same: ``possibly_slower`` is flagged as ``slower``
    is, ``undecided`` is not flagged as ``unchanged`` and ``faster`` are not)."""
    said = (
        "unsettled: one code's trials waited for other work throughout a look (their least "
        "wait differs from the other code's), which the trials cannot tell from a change in "
        "what the code waits for; "
    )
    if verdict is CellVerdict.SLOWER:
        return CellVerdict.POSSIBLY_SLOWER, [said + "not confirmed: recheck on a quieter host"]
    if verdict in (CellVerdict.UNCHANGED, CellVerdict.FASTER):
        return CellVerdict.UNDECIDED, [said + "not cleared: more rounds or a quieter host"]
    return verdict, [said + "more rounds or a quieter host can settle it"]


_CONTENDED_TRIALS = (
    "undecided: other work on the host delayed some of these trials (or every trial of one "
    "run alike): their wall times may measure that work, so they neither clear nor speed up "
    "the cell; a paired recheck (--recheck K) measures both codes at one moment"
)


def _delayed_note(delayed: int, rounds: int) -> str:
    """What a paired cell's verdict took out of ``delayed`` of its ``rounds`` rounds."""
    return (
        f"contended: {delayed} of the {rounds} paired rounds had a trial that waited for other "
        "work on the host; judged with that wait taken out (its wall time less its wait beyond "
        "the least of its cell and side)"
    )


def _ms(values: Sequence[float]) -> str:
    return f"{median(values) * 1e3:.4g} ms"


def _warnings(
    ev: _Evidence, family: int, alpha: float, limit: float, *, said: bool
) -> tuple[str, ...]:
    """Warnings of a cell; the "not enough trials" statement only where no note made it."""
    warnings = []
    if not said and _cannot_reach(ev, family, alpha):
        warnings.append(
            f"not enough trials: {len(ev.baseline)} vs {len(ev.candidate)} over {family} cells "
            f"cannot reach significance (smallest p {ev.smallest_p:.3g})"
        )
    for side, values in (("baseline", ev.baseline), ("candidate", ev.candidate)):
        spread = relative_spread(values)
        if spread is not None and spread * 100 > limit:
            warnings.append(
                f"{side} too noisy: spread {spread * 100:.1f}% (IQR/median) exceeds the "
                f"{limit:g}% threshold"
            )
    return tuple(warnings)
