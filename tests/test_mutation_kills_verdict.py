"""The cell verdict, the comparison's recheck helpers and the bootstrap intervals
(harness/verdict/cells.py, comparison.py, resampling.py) at the boundaries the mutmut
run over them found untested (tests/mutation-survivors.md). Expected values come from
the rules of docs/verdicts.md and from counting, not from the code under test."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _verdict_helpers import trials_doc

from harness.comparability import FieldDifference
from harness.verdict import comparison as comparison_module
from harness.verdict.calibration import CalibratedNull
from harness.verdict.cells import CellComparison, CellVerdict, decide_cells, rounds_needed
from harness.verdict.comparison import (
    CalibrationUse,
    Comparison,
    Verdict,
    _apply_output_rule,
    _candidate_failures,
    cell_to_dict,
    flagged_for_recheck,
    output_changes,
    undecided_after_recheck,
)
from harness.verdict.resampling import (
    paired_median_ratio_interval,
    ratio_of_medians_interval,
    resampled_medians,
)

CELL = ("scan", "hdf5", "cold")


def _rounds(cells: int, alpha: float) -> int:
    """The fewest paired rounds K whose best exact one-sided Mann-Whitney p, 1 / C(2K, K),
    times the cells is at most alpha (Holm's first step)."""
    k = 1
    while cells / math.comb(2 * k, k) > alpha:
        k += 1
    return k


# -- the recheck helpers of a run (comparison.py) ------------------------------------------

#: a host whose A/A runs land up to 2x apart: its calibrated intervals are wide
WIDE = CalibratedNull({CELL: [[m] * 4 for m in (0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4)]})
WIDE_USE = CalibrationUse(sha256="0" * 64, runs=8, reps=4, null=WIDE)


def test_the_cells_to_recheck_are_judged_against_the_calibration_given() -> None:
    base = [1.0, 1.01, 0.99, 1.0]
    cand = [1.1, 1.11, 1.09, 1.1]  # +10%: the trials' own interval is tight
    baseline, trials = trials_doc({CELL: base}), trials_doc({CELL: cand})["trials"]
    assert flagged_for_recheck(baseline, trials, 20) == []
    # against the wide host the interval reaches past the threshold: undecided, rechecked
    assert flagged_for_recheck(baseline, trials, 20, calibration=WIDE_USE) == [CELL]


def test_an_unpaired_recheck_not_yet_significant_goes_on() -> None:
    """The recheck trials are judged against the baseline's: four trials all past the
    threshold give Mann-Whitney p = 1/C(7, 4) = 0.0286, significant at alpha 0.05 with one
    look, not at 0.05 / 4 (four looks) nor at alpha 0.01."""
    base = [1.0, 1.01, 0.99]
    cand = [1.5, 0.9, 1.6]  # +50%, not significant on its own
    recheck = trials_doc({CELL: [1.5, 1.51, 1.49, 1.52]})["trials"]
    baseline, trials = trials_doc({CELL: base}), trials_doc({CELL: cand})["trials"]

    def still_open(**kw) -> list:
        return undecided_after_recheck(baseline, trials, 20, recheck_trials=recheck, **kw)

    assert still_open(looks=1) == []  # confirmed slower: nothing left to settle
    assert still_open(looks=4) == [CELL]
    assert still_open(looks=1, alpha=0.01) == [CELL]


def test_an_unpaired_recheck_is_judged_against_the_calibration_given() -> None:
    base = [1.0 + 0.001 * i for i in range(12)]
    cand = [1.5 + 0.001 * i for i in range(12)]
    recheck = trials_doc({CELL: cand})["trials"]
    baseline, trials = trials_doc({CELL: base}), trials_doc({CELL: cand})["trials"]
    assert undecided_after_recheck(baseline, trials, 20, looks=1, recheck_trials=recheck) == []
    # +50% is well inside the wide host's A/A spread: not confirmed, the recheck goes on
    assert undecided_after_recheck(
        baseline, trials, 20, looks=1, recheck_trials=recheck, calibration=WIDE_USE
    ) == [CELL]


# -- the cell verdict (cells.py) -------------------------------------------------------------


def test_the_undecided_note_names_the_rounds_that_can_settle_it() -> None:
    """Eight cells at alpha 0.01: 8 / C(12, 6) = 0.0087 <= 0.01 < 8 / C(10, 5), so six
    rounds (five would do for one cell, or at alpha 0.05)."""
    steady = [1.0, 1.01, 0.99, 1.0, 1.02]
    base = {("scan", "hdf5", str(i)): steady for i in range(8)}
    cand = dict(base)
    cand[CELL] = [1.0, 1.0, 1.0, 1.3, 1.3]  # +0%, its interval reaching past +20%
    base[CELL] = steady
    cells = {c.key: c for c in decide_cells(base, cand, threshold_percent=20, alpha=0.01)}
    cell = cells[CELL]
    assert cell.verdict is CellVerdict.UNDECIDED
    k = _rounds(8, 0.01)
    assert (k, _rounds(1, 0.01), _rounds(8, 0.05)) == (6, 5, 5)
    (note,) = [n for n in cell.notes if n.startswith("undecided: ")]
    assert note.endswith(
        f"settle it with `harness recheck CANDIDATE --baseline BASELINE --recheck {k}` "
        f"(or --recheck {k})"
    )


def test_a_disagreement_needs_a_recheck_interval_wholly_above_zero_not_above_one_percent():
    """At a 2% threshold: the original +50%, the paired recheck about +1.2% with an
    interval starting between 0% and 1%: both see a slowdown, on either side of the
    threshold, so neither settles it."""
    pairs = [(1.0, r) for r in (1.006, 1.012, 1.012, 1.014, 1.012, 1.008, 1.016)]
    (cell,) = decide_cells({CELL: [1.0] * 5}, {CELL: [1.5] * 5}, threshold_percent=2,
                           paired={CELL: pairs})  # fmt: skip
    low, high = cell.ci_percent
    assert 0 < low < 1 and high <= 2
    assert cell.verdict is CellVerdict.UNDECIDED, cell.notes


def test_an_original_interval_ending_exactly_at_the_threshold_is_not_past_it() -> None:
    # original +25% exactly (1.25 is exact in binary), its interval [+25%, +25%]; a paired
    # recheck of +15%: the original reaches the threshold, not past it, so no disagreement
    (cell,) = decide_cells({CELL: [1.0] * 5}, {CELL: [1.25] * 5}, threshold_percent=25,
                           paired={CELL: [(1.0, 1.15)] * 5})  # fmt: skip
    assert cell.recheck["original_change_percent"] == 25
    assert cell.verdict is CellVerdict.UNCHANGED, cell.notes


# -- the bootstrap intervals (resampling.py) -------------------------------------------------


def test_the_paired_interval_cuts_half_the_missing_confidence_from_each_tail() -> None:
    """Two rounds (1, 1) and (1, 2): a resample of two rounds has ratio 1 (both the
    first, probability 1/4), 2 (both the second, 1/4) or 1.5 (one of each, 1/2). At 40%
    confidence the interval is the 30% and 70% quantiles: 1.5 at both ends, where a 20%
    tail would reach the plateaus at 1 and 2."""
    low, high = paired_median_ratio_interval([(1.0, 1.0), (1.0, 2.0)], confidence=0.4)
    assert (low, high) == (1.5, 1.5)
    low, high = paired_median_ratio_interval([(1.0, 1.0), (1.0, 2.0)], confidence=0.8)
    assert (low, high) == (1.0, 2.0)


def test_the_disagreement_note_in_full() -> None:
    (cell,) = decide_cells({CELL: [1.0] * 5}, {CELL: [1.5] * 5}, threshold_percent=25,
                           paired={CELL: [(1.0, 1.15)] * 5})  # fmt: skip
    assert cell.verdict is CellVerdict.UNDECIDED
    assert cell.notes[1] == (
        "undecided: the paired recheck sees a slowdown within the threshold (its 95% "
        "interval [+15.0%, +15.0%]), the original trials one past it (95% interval "
        "[+50.0%, +50.0%]): the two measurements of the slowdown disagree by more than their "
        "noise, so neither settles the cell; look at both before trusting either"
    )


def test_a_significant_recheck_exactly_at_the_threshold_does_not_confirm() -> None:
    """The recheck's change is exactly +50% (1.5 / 1.0, exact in binary) and significant
    against the threshold, its interval reaching past it: ``slower`` needs a change past
    the threshold, so the cell is not confirmed."""
    base = [0.5] * 10 + [1.0] * 11  # median 1.0
    again = [1.5] * 11 + [3.0] * 10  # median 1.5
    (cell,) = decide_cells({CELL: base}, {CELL: list(base)}, threshold_percent=50,
                           recheck={CELL: again})  # fmt: skip
    assert cell.change_percent == 50 and cell.p_adjusted <= 0.05 and cell.ci_percent[1] > 50
    assert cell.verdict is not CellVerdict.SLOWER, cell.notes
    assert cell.verdict is CellVerdict.UNDECIDED


def test_the_json_form_of_a_comparison_names_every_field() -> None:
    use = CalibrationUse(sha256="c" * 64, runs=8, reps=5, created_utc="2026-12-01T00:00:00Z",
                         note="calibrated on this host", null=WIDE)  # fmt: skip
    comparison = Comparison(
        verdict=Verdict.INCOMPARABLE, regression_percent=15.0, baseline_sha256="b" * 64,
        baseline_path="base.json", candidate_sha256="d" * 64, candidate_path="cand.json",
        differences=[FieldDifference("reps", 5, 3)], failures=["x"], warnings=["y"],
        alpha=0.01, calibration=use,
    )  # fmt: skip
    assert comparison.to_dict() == {
        "verdict": "incomparable",
        "exit_code": 2,
        "regression_percent": 15.0,
        "alpha": 0.01,
        "baseline_sha256": "b" * 64,
        "baseline_path": "base.json",
        "candidate_sha256": "d" * 64,
        "candidate_path": "cand.json",
        "calibration": {
            "sha256": "c" * 64,
            "runs": 8,
            "reps": 5,
            "created_utc": "2026-12-01T00:00:00Z",
            "note": "calibrated on this host",
        },
        "differences": [{"field": "reps", "baseline": 5, "candidate": 3}],
        "failures": ["x"],
        "warnings": ["y"],
        "cells": [],
    }


def test_the_json_form_of_a_cell_names_every_field_and_drops_non_finite_numbers() -> None:
    cell = CellComparison(
        acquisition="scan", format="hdf5", cache_state="cold", n_baseline=5, n_candidate=4,
        baseline_median=1.0, candidate_median=1.5, change_percent=50.0,
        ci_percent=(float("-inf"), 12.5), p_value=0.01, p_adjusted=0.03,
        p_method="mann-whitney-exact", verdict=CellVerdict.SLOWER, baseline_spread=0.1,
        candidate_spread=float("inf"), noise_floor_percent=7.0, mdc_percent=40.0,
        notes=("a", "b"), recheck={"n": 3}, holm_family=6, flag_mdc_percent=30.0,
    )  # fmt: skip
    assert cell_to_dict(cell) == {
        "acquisition": "scan",
        "format": "hdf5",
        "cache_state": "cold",
        "verdict": "slower",
        "change_percent": 50.0,
        "estimator": "ratio of medians",
        "ci_percent": [None, 12.5],
        "p_value": 0.01,
        "p_adjusted": 0.03,
        "p_method": "mann-whitney-exact",
        "holm_family": 6,
        "n_baseline": 5,
        "n_candidate": 4,
        "baseline_median": 1.0,
        "candidate_median": 1.5,
        "baseline_spread": 0.1,
        "candidate_spread": None,
        "noise_floor_percent": 7.0,
        "mdc_percent": 40.0,
        "flag_mdc_percent": 30.0,
        "notes": ["a", "b"],
        "recheck": {"n": 3},
    }


def test_the_search_for_rounds_stops_at_a_thousand() -> None:
    # no count of rounds reaches a negative alpha: the search gives up at its cap
    assert rounds_needed(1, alpha=-1.0) == 1000
    assert rounds_needed(8, alpha=0.01) == _rounds(8, 0.01)


def test_an_unconfirmed_cell_says_when_the_threshold_is_below_the_hosts_mdc() -> None:
    """Two A/A runs 30% apart: the minimum detectable change is far past the threshold,
    and the note says so, in full; a host whose runs agree exactly has an MDC of exactly
    the threshold (+25%, exact in binary), which is not below it: no such note."""
    for runs, says in (([[1.0] * 3, [1.3] * 3], True), ([[1.0] * 3, [1.0] * 3], False)):
        null = CalibratedNull({CELL: runs}, draws_per_pair=1)
        (cell,) = decide_cells({CELL: [1.0] * 3}, {CELL: [1.5] * 3}, threshold_percent=25,
                               calibration=null)  # fmt: skip
        assert cell.verdict is CellVerdict.POSSIBLY_SLOWER, cell.notes
        assert cell.mdc_percent >= 25 and (cell.mdc_percent > 25) is says
        mdc_note = (
            f"; the threshold is below this host's minimum detectable change "
            f"({cell.mdc_percent:.0f}%): only slowdowns that large are confirmed on such "
            "trials 9 times in 10: settle it with"
        )
        assert (mdc_note in cell.notes[0]) is says, cell.notes
        assert ("minimum detectable change" in cell.notes[0]) is says


def test_compare_loaded_compares_the_looked_up_reports_without_accepting_changed_outputs(
    monkeypatch,
) -> None:
    seen = {}

    def spy(baseline_doc, candidate_doc, regression_percent, **kwargs):
        seen.update(kwargs, docs=(baseline_doc, candidate_doc), percent=regression_percent)
        return "compared"

    class Loaded:
        def __init__(self, name):
            self.doc, self.sha256, self.path = {"name": name}, name * 64, f"/h/{name}.json"

    monkeypatch.setattr(comparison_module, "compare_reports", spy)
    use = CalibrationUse(sha256=None, note="none")
    assert (
        comparison_module.compare_loaded(Loaded("a"), Loaded("b"), 30.0, calibration=use)
        == "compared"
    )
    assert seen == {
        "docs": ({"name": "a"}, {"name": "b"}),
        "percent": 30.0,
        "baseline_sha256": "a" * 64,
        "baseline_path": "/h/a.json",
        "candidate_sha256": "b" * 64,
        "candidate_path": "/h/b.json",
        "calibration": use,
        "accept_output_change": False,
    }


def test_a_candidates_failures_name_each_failed_status_once() -> None:
    ok = {"execution": "completed", "correctness": "passed", "source_stability": "stable"}
    assert _candidate_failures({"status": {**ok, "failures": []}}) == []
    bad = {"execution": "failed", "correctness": "wrong", "source_stability": "changed"}
    status = {**bad, "failures": ["execution failed", "shard 2 unreadable"]}
    assert _candidate_failures({"status": status}) == [
        "execution failed",
        "correctness failed",
        "source changed during the run",
        "shard 2 unreadable",
    ]


def _compute(outputs: dict, *, backend="cpu", device="cpu0", uuid="u1", schema=None) -> dict:
    return {
        "schema": schema or "quantem-harness/compute-report",
        "conditions": {"backend": backend},
        "environment": {"device": {"name": device, "uuid": uuid}},
        "acquisitions": [{"id": a, "outputs": o} for a, o in outputs.items()],
    }


def test_changed_outputs_are_listed_only_against_the_same_backend_and_device() -> None:
    base = _compute({"a": {"x": "1", "y": "2"}, "b": {"x": "3"}})
    cand = _compute({"a": {"y": "9", "x": "8", "new": "0"}, "b": {"x": "3"}, "c": {"x": "4"}})
    assert output_changes(base, cand) == ["a/x", "a/y"]  # by acquisition, then name
    assert output_changes(base, base) == []
    for other in (
        _compute(cand_outputs := {"a": {"x": "8"}}, backend="cuda"),
        _compute(cand_outputs, device="gpu0"),
        _compute(cand_outputs, uuid="u2"),
    ):
        assert output_changes(base, other) == [] and output_changes(other, base) == []
    assert output_changes(base, _compute(cand_outputs)) == ["a/x"]
    loading = {**cand, "schema": "quantem-harness/loading-report"}
    assert output_changes(base, loading) == [] and output_changes(loading, base) == []
    unnamed = {k: v for k, v in cand.items() if k != "schema"}
    assert output_changes(base, unnamed) == [] and output_changes(unnamed, base) == []


def _ruled(cand: dict, accept: bool, failures: list[str]) -> Comparison:
    comparison = Comparison(verdict=Verdict.PASS, regression_percent=20.0, failures=failures)
    base = _compute({"a": {"x": "1", "y": "2"}})
    _apply_output_rule(comparison, base, cand, accept)
    return comparison


def test_changed_outputs_fail_unless_accepted_here_or_by_the_run() -> None:
    changed = _compute({"a": {"x": "8", "y": "9"}})
    changed["status"] = {"correctness": "passed"}
    ruled = _ruled(changed, False, ["other"])
    assert ruled.failures == ["other", "outputs_changed: a/x, a/y"] and ruled.warnings == []
    # the run's own outputs_changed failure is not repeated
    ruled = _ruled(changed, False, ["outputs_changed: a/x"])
    assert ruled.failures == ["outputs_changed: a/x"]
    ruled = _ruled(changed, True, ["other"])
    assert ruled.failures == ["other"]
    assert ruled.warnings == ["outputs changed, accepted (--accept-output-change): a/x, a/y"]
    recorded = {**changed, "output_change": {"accepted": True}}
    for accept in (False, True):
        ruled = _ruled(recorded, accept, [])
        assert ruled.failures == []
        assert ruled.warnings == ["outputs changed, accepted (recorded in the candidate): a/x, a/y"]
    unchanged = {**_compute({"a": {"x": "1", "y": "2"}}), "status": {"correctness": "passed"}}
    ruled = _ruled(unchanged, True, ["other"])
    assert ruled.failures == ["other"] and ruled.warnings == []


def test_accepting_changed_outputs_drops_the_runs_own_failures_for_them() -> None:
    changed = {
        **_compute({"a": {"x": "8", "y": "2"}}),
        "status": {"correctness": "outputs_changed"},
    }
    failures = ["correctness failed", "outputs_changed: a/x", "execution failed"]
    ruled = _ruled(changed, True, list(failures))
    assert ruled.failures == ["execution failed"]
    assert ruled.warnings == ["outputs changed, accepted (--accept-output-change): a/x"]
    ruled = _ruled(changed, False, list(failures))
    assert ruled.failures == failures and ruled.warnings == []
    # accepted, but the run did not record a change: its correctness failure stands
    passed = {**changed, "status": {"correctness": "failed"}}
    ruled = _ruled(passed, True, ["correctness failed"])
    assert ruled.failures == ["correctness failed"]


def test_compare_does_not_accept_changed_outputs_by_default(monkeypatch) -> None:
    # the comparability fields are another module's concern: none differ here
    monkeypatch.setattr(comparison_module, "collect_differences", lambda base, cand: [])
    status = {"execution": "completed", "correctness": "passed", "source_stability": "stable",
              "failures": []}  # fmt: skip
    base = {**_compute({"a": {"x": "1"}}), "status": status, "trials": []}
    cand = {**_compute({"a": {"x": "2"}}), "status": status, "trials": []}
    compared = comparison_module.compare_reports(base, cand, 20.0)
    assert compared.failures == ["outputs_changed: a/x"] and compared.verdict is Verdict.FAILED


# -- compare_reports on reports reduced to what it reads --------------------------------------

OK_STATUS = {"execution": "completed", "correctness": "passed", "source_stability": "stable",
             "failures": []}  # fmt: skip
A, B = ("a", "hdf5", "cold"), ("b", "hdf5", "cold")


def _report(cells: dict, status: dict | None = None, **extra) -> dict:
    return {**trials_doc(cells), "status": status or OK_STATUS, **extra}


@pytest.fixture
def same_fields(monkeypatch):
    """The comparability fields (another module's concern) differ in nothing, or as set."""
    found: list = []
    monkeypatch.setattr(comparison_module, "collect_differences", lambda b, c: list(found))
    return found


def test_the_regression_percent_must_be_a_positive_number(same_fields) -> None:
    report = _report({A: [1.0] * 3})
    assert comparison_module.compare_reports(report, report, 0.5).regression_percent == 0.5
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError) as info:
            comparison_module.compare_reports(report, report, bad)
        assert str(info.value) == f"regression percent must be a positive number, not {bad!r}"


def test_compare_reports_keeps_what_it_was_given_and_judges_at_its_alpha(same_fields) -> None:
    base = _report({A: [1.0, 1.01, 0.99, 1.02]})
    cand = _report({A: [1.5, 1.51, 1.49, 1.52]})  # all four past +20%: p = 1/C(8, 4) = 0.014
    compared = comparison_module.compare_reports(
        base, cand, 20.0, baseline_sha256="b" * 64, baseline_path="b.json",
        candidate_sha256="c" * 64, candidate_path="c.json",
    )  # fmt: skip
    assert (compared.baseline_path, compared.candidate_path) == ("b.json", "c.json")
    assert (compared.baseline_sha256, compared.candidate_sha256) == ("b" * 64, "c" * 64)
    assert compared.alpha == 0.05 and compared.cells[0].verdict is CellVerdict.SLOWER
    strict = comparison_module.compare_reports(base, cand, 20.0, alpha=0.01)
    assert strict.alpha == 0.01 and strict.cells[0].verdict is CellVerdict.POSSIBLY_SLOWER


def test_a_candidate_run_against_another_baseline_is_warned_about(same_fields) -> None:
    base = _report({A: [1.0] * 3})
    cand = _report({A: [1.0] * 3}, baseline={"sha256": "x" * 64})
    other = comparison_module.compare_reports(base, cand, 20.0, baseline_sha256="y" * 64)
    assert other.warnings == [f"the candidate was run against baseline {'x' * 64}, not {'y' * 64}"]
    same = comparison_module.compare_reports(base, cand, 20.0, baseline_sha256="x" * 64)
    assert same.warnings == []
    assert comparison_module.compare_reports(base, cand, 20.0).warnings == []


def test_compare_reports_applies_the_accepted_output_change(same_fields) -> None:
    base = {**_report({A: [1.0] * 3}), **_compute({"s": {"x": "1"}})}
    cand = {**_report({A: [1.0] * 3}), **_compute({"s": {"x": "2"}})}
    compared = comparison_module.compare_reports(base, cand, 20.0, accept_output_change=True)
    assert compared.failures == [] and compared.verdict is Verdict.PASS
    assert compared.warnings == ["outputs changed, accepted (--accept-output-change): s/x"]


def test_an_invalid_baseline_and_other_cells_are_differences_in_order(same_fields) -> None:
    same_fields.append(FieldDifference("reps", 5, 3))
    failed = {**OK_STATUS, "execution": "failed", "correctness": "wrong"}
    base = _report({A: [1.0] * 3, B: [1.0] * 3}, status=failed)
    cand = _report({A: [1.0] * 3})
    compared = comparison_module.compare_reports(base, cand, 20.0)
    assert compared.differences == [
        FieldDifference(
            "baseline status (must be valid evidence)", "execution failed; correctness failed", ""
        ),
        FieldDifference("reps", 5, 3),
        FieldDifference(
            "measured cells (acquisition, format, cache state with kept trials)",
            ["a/hdf5/cold", "b/hdf5/cold"],
            ["a/hdf5/cold"],
        ),
    ]
    assert compared.verdict is Verdict.INCOMPARABLE and compared.cells == []


def test_the_reports_own_recheck_is_judged_over_its_looks(same_fields) -> None:
    base = _report({A: [1.0, 1.01, 0.99]})
    cand = _report({A: [1.5, 0.9, 1.6]})
    block = trials_doc({A: [1.5, 1.51, 1.49, 1.52]})  # p = 1/C(7, 4) = 0.029 against the baseline
    looked = comparison_module.compare_reports(
        base, {**cand, "recheck": {**block, "looks": 4}}, 20.0
    )
    (cell,) = looked.cells
    assert cell.recheck["looks"] == 4 and cell.recheck["alpha"] == 0.05 / 4
    assert cell.verdict is CellVerdict.POSSIBLY_SLOWER
    once = comparison_module.compare_reports(base, {**cand, "recheck": block}, 20.0)
    (cell,) = once.cells
    assert cell.recheck["looks"] == 1 and cell.verdict is CellVerdict.SLOWER


def test_the_unpaired_interval_refuses_what_it_cannot_estimate() -> None:
    for confidence in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError) as info:
            ratio_of_medians_interval([1.0], [1.0], confidence=confidence)
        assert str(info.value) == f"confidence must lie in (0, 1), not {confidence!r}"
    with pytest.raises(ValueError) as info:
        ratio_of_medians_interval([0.0, 0.0, 1.0], [1.0])
    assert str(info.value) == "the baseline's median must be positive for a ratio"


def test_a_calibrated_recheck_interval_has_the_confidence_of_its_looks() -> None:
    base, again = [1.0, 1.01, 0.99, 1.0], [1.3, 1.31, 1.29, 1.3]
    (cell,) = decide_cells({CELL: base}, {CELL: base}, threshold_percent=20, calibration=WIDE,
                           recheck={CELL: again}, looks=4)  # fmt: skip
    ratio = float(np.median(again) / np.median(base))
    low, high = WIDE.interval(CELL, ratio, 4, 4, 1 - 0.05 / 4)
    assert cell.ci_percent == pytest.approx(((low - 1) * 100, (high - 1) * 100), rel=1e-12)


def test_the_intervals_use_the_resamples_and_confidence_asked() -> None:
    base, again = [1.0, 1.1, 0.9, 1.05, 0.95], [1.3, 1.2, 1.45, 1.25, 1.35]
    # 9 rounds of distinct ratios: 50 resamples give other quantiles than the default 4000
    pairs = [(1.0 + 0.01 * i, (1.0 + 0.01 * i) * (1.2 + 0.037 * ((i * 5) % 9))) for i in range(9)]
    (cell,) = decide_cells({CELL: base}, {CELL: base}, threshold_percent=20,
                           paired={CELL: pairs}, bootstrap_resamples=50)  # fmt: skip
    low, high = paired_median_ratio_interval(pairs, resamples=50)
    assert cell.ci_percent == ((low - 1) * 100, (high - 1) * 100)
    assert (low, high) != paired_median_ratio_interval(pairs)
    (cell,) = decide_cells({CELL: base}, {CELL: base}, threshold_percent=20,
                           recheck={CELL: again}, looks=4)  # fmt: skip
    low, high = ratio_of_medians_interval(base, again, confidence=1 - 0.05 / 4)
    assert cell.ci_percent == ((low - 1) * 100, (high - 1) * 100)


def test_a_speed_up_exactly_at_the_faster_limit_is_not_faster() -> None:
    """At a 25% threshold the faster limit is 1/1.25 - 1 = -20%; a candidate median of 0.8
    against 1.0 is exactly there (the same float expression), and significant."""
    base = [1.0] * 11 + [2.0] * 10
    cand = [0.8] * 11 + [0.4] * 10
    (cell,) = decide_cells({CELL: base}, {CELL: cand}, threshold_percent=25)
    assert cell.change_percent == (1 / 1.25 - 1) * 100
    assert cell.verdict is not CellVerdict.FASTER, cell.notes
    # a hair further is faster
    (cell,) = decide_cells({CELL: base}, {CELL: [0.79] * 11 + [0.4] * 10}, threshold_percent=25)
    assert cell.verdict is CellVerdict.FASTER


def test_a_noisy_side_is_named_once_its_spread_passes_the_threshold() -> None:
    steady = [1.0, 1.01, 0.99, 1.0, 1.02]
    at = [0.5, 0.875, 1.0, 1.125, 2.0]  # IQR / median = 0.25 exactly (linear quantiles)
    (cell,) = decide_cells({CELL: steady}, {CELL: at}, threshold_percent=25)
    assert cell.candidate_spread == 0.25
    assert not any("too noisy" in w for w in cell.warnings), cell.warnings
    past = [0.5, 0.85, 1.0, 1.15, 2.0]
    (cell,) = decide_cells({CELL: steady}, {CELL: past}, threshold_percent=25)
    noisy = [w for w in cell.warnings if "too noisy" in w]
    assert noisy == ["candidate too noisy: spread 30.0% (IQR/median) exceeds the 25% threshold"]


def test_recheck_trials_of_no_cell_or_of_an_unknown_cell_are_ignored() -> None:
    base, cand = {CELL: [1.0, 1.01, 0.99]}, {CELL: [1.0, 1.01, 0.99]}
    alone = decide_cells(base, cand, threshold_percent=20)
    other = ("other", "qem", "cached")
    for extra in (
        {"recheck": {CELL: [], other: [1.0]}},
        {"paired": {CELL: [], other: [(1.0, 1.0)]}},
    ):
        (cell,) = decide_cells(base, cand, threshold_percent=20, **extra)
        assert cell == alone[0] and cell.recheck is None


def test_an_unpaired_recheck_is_judged_against_the_calibrated_null() -> None:
    base, again = [1.0, 1.01, 0.99, 1.0], [1.3, 1.31, 1.29, 1.3]
    (cell,) = decide_cells({CELL: base}, {CELL: base}, threshold_percent=20, calibration=WIDE,
                           recheck={CELL: again})  # fmt: skip
    assert cell.p_method == "calibrated"
    assert cell.mdc_percent == WIDE.mdc(CELL, 4, 4, threshold_percent=20, alpha=0.05, cells=1)


def test_the_flag_mdc_note_of_a_cell_that_passes() -> None:
    """Two A/A runs 30% apart flag only large slowdowns 9 times in 10: a pass says so; a
    host whose runs agree exactly flags exactly the threshold (+25%), not a note's worth."""
    for runs, says in (([[1.0] * 3, [1.3] * 3], True), ([[1.0] * 3, [1.0] * 3], False)):
        null = CalibratedNull({CELL: runs}, draws_per_pair=1)
        (cell,) = decide_cells({CELL: [1.0] * 3}, {CELL: [1.0] * 3}, threshold_percent=25,
                               calibration=null)  # fmt: skip
        assert not cell.flagged and (cell.flag_mdc_percent > 25) is says
        assert cell.flag_mdc_percent >= 25
        note = (
            f"this host flags slowdowns of {cell.flag_mdc_percent:.0f}% or more here 9 times in "
            "10 (exit 2, then a recheck settles them): a pass does not rule out smaller ones"
        )
        assert (note in cell.notes) is says, cell.notes
        assert any("9 times in 10" in n for n in cell.notes) is says


def test_not_enough_trials_is_judged_at_each_cells_own_alpha() -> None:
    """4 vs 4 trials: smallest p 1/C(8, 4) = 0.0143. The rechecked cell is judged at
    0.05 / 4 looks (too few), the other at 0.05 over its 2 cells (0.029: enough)."""
    steady = [1.0, 1.01, 0.99, 1.02]
    base = {CELL: steady, A: steady}
    cells = {c.key: c for c in decide_cells(base, dict(base), threshold_percent=20,
                                            recheck={CELL: steady}, looks=4)}  # fmt: skip
    expected = (
        "not enough trials: 4 vs 4 over 1 cells cannot reach significance (smallest p 0.0143)"
    )
    assert expected in cells[CELL].warnings
    assert not any(w.startswith("not enough trials") for w in cells[A].warnings)


def test_a_cell_reports_its_counts_and_spreads() -> None:
    base, cand = [1.0, 0.8, 1.3, 1.1, 0.9], [2.0, 2.2, 1.7]
    (cell,) = decide_cells({CELL: base}, {CELL: cand}, threshold_percent=20)
    assert (cell.n_baseline, cell.n_candidate) == (5, 3)
    for got, values in ((cell.baseline_spread, base), (cell.candidate_spread, cand)):
        q1, q2, q3 = np.quantile(values, [0.25, 0.5, 0.75])
        assert got == pytest.approx((q3 - q1) / q2, rel=1e-12)
    again = [2.0, 2.1, 1.9, 2.2]
    (cell,) = decide_cells({CELL: base}, {CELL: cand}, threshold_percent=20, recheck={CELL: again})
    assert (cell.n_baseline, cell.n_candidate) == (5, 4)
    q1, q2, q3 = np.quantile(again, [0.25, 0.5, 0.75])
    assert cell.candidate_spread == pytest.approx((q3 - q1) / q2, rel=1e-12)
    pairs = [(1.0, 2.0), (1.2, 2.1), (0.9, 1.9)]
    (cell,) = decide_cells({CELL: base}, {CELL: cand}, threshold_percent=20, paired={CELL: pairs})
    assert (cell.n_baseline, cell.n_candidate) == (3, 3)
    q1, q2, q3 = np.quantile([1.0, 1.2, 0.9], [0.25, 0.5, 0.75])
    assert cell.baseline_spread == pytest.approx((q3 - q1) / q2, rel=1e-12)


def test_resampling_needs_one_value_and_refuses_none() -> None:
    rng = np.random.default_rng(0)
    assert resampled_medians([2.5], 3, 4, rng).tolist() == [2.5] * 4
    with pytest.raises(ValueError) as info:
        resampled_medians([], 3, 4, rng)
    assert str(info.value) == "cannot resample no values"
