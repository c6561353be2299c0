"""Delayed trials and their hooks in the verdict (harness/verdict/delays.py, and where
cells.py and comparison.py call it) at the boundaries the mutmut run over them found
untested (tests/mutation-survivors.md). Expected values follow from the rules in
delays.py's docstring and docs/verdicts.md (a wait is wall less CPU time; a trial is
delayed when its wait exceeds its cell's least by *more than* a tenth of the fastest
trial), worked out by hand on numbers chosen so that the float arithmetic is exact."""

from __future__ import annotations

from _verdict_helpers import timed_trial, trials_doc

from harness.testing import make_example_report
from harness.verdict import delays
from harness.verdict.cells import CellVerdict, _unsettled, decide_cells
from harness.verdict.comparison import (
    compare_reports,
    flagged_for_recheck,
    undecided_after_recheck,
)

KEY = ("scan", "hdf5", "cached")
COLD = ("scan", "hdf5", "cold")


_trial = timed_trial


def test_a_wait_exactly_a_tenth_of_the_fastest_beyond_the_least_is_no_delay() -> None:
    # fastest 10 s with no wait; the other waits 12 - 11 = 1 s = 0.1 * 10 exactly: not more
    at = [_trial(KEY, 0, 10.0, 10.0), _trial(KEY, 1, 12.0, 11.0)]
    assert delays.delays(at) == {}
    past = [_trial(KEY, 0, 10.0, 10.0), _trial(KEY, 1, 12.5, 11.0)]
    assert delays.delays(past) == {(KEY, 1): 1.5}


def test_a_delayed_trial_keeps_its_delay_beside_its_judged_seconds() -> None:
    # waits 0, 0 and 3 s on a fastest of 10 s: the third is delayed by 3 s
    trials = [_trial(KEY, 0, 10.0, 10.0), _trial(KEY, 1, 11.0, 11.0), _trial(KEY, 2, 14.0, 11.0)]
    judged = delays.without_delays(trials)
    assert judged[2]["seconds"] == 11.0
    assert judged[2]["wall_seconds"] == 14.0
    assert judged[2]["delay_seconds"] == 3.0
    assert "delay_seconds" not in judged[0] and "wall_seconds" not in judged[1]


def test_unsettled_cells_are_judged_against_the_regression_threshold_given() -> None:
    # baseline: waits 0 and 4 s (fastest 10 s: the second round is delayed); candidate
    # waits 1.5 s every trial, its least 1.5 s above the baseline's: 15% of the fastest
    # (10 s), past the 10% delay fraction but within a 20% threshold: not unsettled there
    base = [_trial(KEY, 0, 10.0, 10.0), _trial(KEY, 1, 14.0, 10.0)]
    cand = [_trial(KEY, 0, 11.5, 10.0), _trial(KEY, 1, 11.5, 10.0)]
    assert delays.delayed_rounds(base, cand) == {KEY: 1}
    assert delays.unsettled_cells(base, cand, 0.20) == set()
    assert delays.unsettled_cells(base, cand, 0.10) == {KEY}
    # 2.5 s above (25%): unsettled at 20%
    more = [_trial(KEY, 0, 12.5, 10.0), _trial(KEY, 1, 12.5, 10.0)]
    assert delays.unsettled_cells(base, more, 0.20) == {KEY}


def test_least_waits_exactly_a_tenth_apart_are_not_contended() -> None:
    # one trial a run, so no delay within a run; least waits 0 and 1 s on a fastest of 10 s
    base = [_trial(KEY, 0, 10.0, 10.0)]
    assert delays.contended_cells(base, [_trial(KEY, 0, 11.0, 10.0)]) == set()
    assert delays.contended_cells(base, [_trial(KEY, 0, 11.5, 10.0)]) == {KEY}


def test_two_runs_that_wait_alike_for_the_disk_are_not_contended() -> None:
    # a cold load waits 0.6 s for the disk in both runs (10.6 s wall on 10 s CPU): the
    # least waits agree, however large they are, so nothing other work did shows
    base = [_trial(COLD, i, 10.6, 10.0) for i in range(3)]
    cand = [_trial(COLD, i, 10.6, 10.0) for i in range(3)]
    assert delays.contended_cells(base, cand) == set()


def test_a_cell_only_one_run_timed_with_cpu_is_not_contended_by_its_waits() -> None:
    # a baseline from code before cpu_seconds: the candidate's waits have no reference
    old = [{k: v for k, v in _trial(KEY, i, 10.0, 10.0).items() if k != "cpu_seconds"}
           for i in range(2)]  # fmt: skip
    new = [_trial(KEY, i, 13.0, 10.0) for i in range(2)]
    assert delays.contended_cells(old, new) == set()
    assert delays.contended_cells(new, old) == set()


def test_a_trial_left_out_does_not_hide_the_kept_trials_after_it() -> None:
    # the first baseline trial is not kept (a warm-up); the kept ones after it all waited
    # 3 s (every trial of the run delayed alike) against a candidate that did not wait
    base = [_trial(KEY, 0, 10.0, 10.0, kept=False)] + [
        _trial(KEY, i, 13.0, 10.0) for i in range(1, 4)
    ]
    cand = [_trial(KEY, i, 10.0, 10.0) for i in range(1, 4)]
    assert delays.delays(base) == {}
    assert delays.contended_cells(base, cand) == {KEY}
    # and one without cpu_seconds first, likewise
    no_cpu = {k: v for k, v in base[1].items() if k != "cpu_seconds"}
    assert delays.contended_cells([no_cpu, *base[1:]], cand) == {KEY}


# -- the hooks in cells.py and comparison.py -----------------------------------------------

UNSETTLED = (
    "unsettled: one code's trials waited for other work throughout a look (their least wait "
    "differs from the other code's), which the trials cannot tell from a change in what the "
    "code waits for; "
)


def test_an_unsettled_cell_is_neither_confirmed_nor_cleared_and_says_why() -> None:
    """docs/verdicts.md: an unsettled cell is not confirmed ``slower`` (it stays
    ``possibly_slower``, flagged) nor cleared (``undecided``, also for what would have been
    ``faster``); a verdict that is neither keeps its word, with the note."""
    assert _unsettled(CellVerdict.SLOWER) == (
        CellVerdict.POSSIBLY_SLOWER, [UNSETTLED + "not confirmed: recheck on a quieter host"]
    )  # fmt: skip
    for cleared in (CellVerdict.UNCHANGED, CellVerdict.FASTER):
        assert _unsettled(cleared) == (
            CellVerdict.UNDECIDED, [UNSETTLED + "not cleared: more rounds or a quieter host"]
        )  # fmt: skip
    for open_verdict in (CellVerdict.POSSIBLY_SLOWER, CellVerdict.UNDECIDED):
        assert _unsettled(open_verdict) == (
            open_verdict, [UNSETTLED + "more rounds or a quieter host can settle it"]
        )  # fmt: skip
    # through decide_cells: 8 paired rounds of +50% (p = 1 / C(16, 8) over one cell) confirm
    # the slowdown, unless the cell is unsettled
    main = {KEY: [1.0, 1.0, 1.0]}
    slow = {KEY: [1.5, 1.5, 1.5]}
    pairs = {KEY: [(1.0, 1.5)] * 8}
    (plain,) = decide_cells(main, slow, threshold_percent=20, paired=pairs)
    (cell,) = decide_cells(main, slow, threshold_percent=20, paired=pairs, unsettled={KEY})
    assert plain.verdict is CellVerdict.SLOWER
    assert cell.verdict is CellVerdict.POSSIBLY_SLOWER
    assert cell.notes[-1] == UNSETTLED + "not confirmed: recheck on a quieter host"


def _paired_block(base_sha: str, key) -> dict:
    """A paired recheck of ``key``, 5 rounds (indices 5-9) of 1 s on each side: rounds 7
    and 9 of the baseline code waited 0.6 s and 0.5 s beyond their least (0), round 6 of
    the candidate 0.4 s, each past a tenth of the fastest (0.1 s): 3 delayed rounds."""
    base_waits = {7: 0.6, 9: 0.5}
    cand_waits = {6: 0.4}

    def side(waits):
        return [_trial(key, i, 1.0 + waits.get(i, 0.0), 1.0) for i in range(5, 10)]

    return {
        "rounds": 5,
        "cells": [list(key)],
        "trials": side(cand_waits),
        "paired": {
            "baseline_sha256": base_sha,
            "baseline_code": "tree /somewhere",
            "order": "alternating",
            "baseline_trials": side(base_waits),
            "workers": {},
        },
    }


def test_compare_reports_says_which_paired_rounds_it_judged_without_their_delay() -> None:
    base = make_example_report(1, reps=5)
    cand = make_example_report(2, reps=5)
    key = ("scan-a", "hdf5", "cold")
    base_sha = "b" * 64
    cand["recheck"] = _paired_block(base_sha, key)
    compared = compare_reports(base, cand, 20.0, baseline_sha256=base_sha)
    said = [w for w in compared.warnings if w.startswith("paired recheck: ")]
    assert said == [
        "paired recheck: 3 rounds had a trial that waited for other work on the host (wall "
        "time less CPU time beyond its cell's least by more than 10% of its fastest): judged "
        "with that delay taken out (docs/verdicts.md, rounds delayed by other work)"
    ]
    cell = next(c for c in compared.cells if c.key == key)
    # every round judged 1 s against 1 s once the delays are out: cleared, no change
    assert cell.recheck["paired"] is True and cell.change_percent == 0.0
    assert cell.verdict is CellVerdict.UNCHANGED
    assert (
        "contended: 3 of the 5 paired rounds had a trial that waited for other work on the "
        "host; judged with that wait taken out (its wall time less its wait beyond the least "
        "of its cell and side)"
    ) in cell.notes
    # no delayed round: no warning, no note
    quiet = make_example_report(2, reps=5)
    quiet["recheck"] = _paired_block(base_sha, key)
    for t in (*quiet["recheck"]["trials"], *quiet["recheck"]["paired"]["baseline_trials"]):
        t["seconds"] = 1.0
    compared = compare_reports(base, quiet, 20.0, baseline_sha256=base_sha)
    assert not any(w.startswith("paired recheck: ") for w in compared.warnings)
    cell = next(c for c in compared.cells if c.key == key)
    assert not any(n.startswith("contended: ") for n in cell.notes)


def test_the_cells_to_recheck_count_main_trials_other_work_may_have_timed() -> None:
    """Every baseline trial waited 30 ms on 15 ms of work: the +50%-looking speed-up of the
    candidate (5 vs 5, p = 1 / C(10, 5)) may be that wait, so the cell is rechecked."""
    base = {"trials": [_trial(KEY, i, 0.045, 0.015) for i in range(5)]}
    cand = [_trial(KEY, i, 0.015, 0.015) for i in range(5)]
    assert flagged_for_recheck(base, cand, 20) == [KEY]
    # the same timings without CPU times (older code): faster, nothing to recheck
    strip = [{k: v for k, v in t.items() if k != "cpu_seconds"} for t in cand]
    assert flagged_for_recheck({"trials": strip}, strip, 20) == []
    old_base = [{k: v for k, v in t.items() if k != "cpu_seconds"} for t in base["trials"]]
    assert flagged_for_recheck({"trials": old_base}, strip, 20) == []


def _unsettled_recheck(candidate_wait: float) -> list:
    """undecided_after_recheck over a +30% flag whose paired recheck reads no change (5
    rounds of 10 s against 10 s), the baseline side's round 1 delayed by 4 s, and the
    candidate's every trial waiting ``candidate_wait`` s on 10 s - wait of work."""
    main_base = trials_doc({KEY: [10.0] * 3})
    main_cand = trials_doc({KEY: [13.0] * 3})["trials"]
    paired_base = [_trial(KEY, i, 14.0 if i == 1 else 10.0, 10.0) for i in range(5)]
    recheck = [_trial(KEY, i, 10.0, 10.0 - candidate_wait) for i in range(5)]
    return undecided_after_recheck(main_base, main_cand, 20, looks=1, recheck_trials=recheck,
                                   paired_baseline_trials=paired_base)  # fmt: skip


def test_an_unsettled_paired_cell_is_measured_again() -> None:
    """The least waits differ by the candidate's wait, against 20% of the fastest (10 s):
    2 s is not more than 2 s (settled: the recheck clears the flag, nothing to measure),
    2.5 s is (unsettled: undecided, measured again by fresh workers)."""
    assert _unsettled_recheck(2.0) == []
    assert _unsettled_recheck(2.5) == [KEY]


def test_an_unpaired_recheck_whose_stages_disagree_is_not_measured_again() -> None:
    """An unpaired recheck at +15% (its interval [+15%, +15%] within 25%) after original
    trials at +50%: undecided because the stages disagree, which more rounds do not settle
    (and an unpaired recheck has no delays to be unsettled by)."""
    base = trials_doc({KEY: [1.0] * 5})
    cand = trials_doc({KEY: [1.5] * 5})["trials"]
    recheck = trials_doc({KEY: [1.15] * 5})["trials"]
    (cell,) = decide_cells({KEY: [1.0] * 5}, {KEY: [1.5] * 5}, threshold_percent=25,
                           recheck={KEY: [1.15] * 5})  # fmt: skip
    assert cell.verdict is CellVerdict.UNDECIDED and cell.ci_percent[1] <= 25, cell.notes
    assert undecided_after_recheck(base, cand, 25, looks=1, recheck_trials=recheck) == []


def test_only_a_paired_cell_with_delayed_rounds_gets_the_contended_note() -> None:
    """``delayed_rounds`` counts the delayed rounds of paired cells: a paired cell it does
    not name, or an unpaired recheck (even one it names), has no such note."""
    main = {KEY: [1.0, 1.0, 1.0], COLD: [1.0, 1.0, 1.0]}
    pairs = {KEY: [(1.0, 1.0)] * 5, COLD: [(1.0, 1.0)] * 5}
    cells = decide_cells(main, main, threshold_percent=20, paired=pairs, delayed_rounds={COLD: 2})
    notes = {c.key: [n for n in c.notes if n.startswith("contended: ")] for c in cells}
    assert notes[KEY] == []
    assert notes[COLD] == [
        "contended: 2 of the 5 paired rounds had a trial that waited for other work on the "
        "host; judged with that wait taken out (its wall time less its wait beyond the least "
        "of its cell and side)"
    ]
    for delayed in (None, {KEY: 2}):
        (cell,) = decide_cells(
            {KEY: main[KEY]}, {KEY: main[KEY]}, threshold_percent=20,
            recheck={KEY: [1.0] * 5}, delayed_rounds=delayed,
        )  # fmt: skip
        assert cell.recheck["paired"] is False
        assert not any(n.startswith("contended: ") for n in cell.notes), cell.notes


def test_an_unsettled_cell_keeps_what_its_recheck_said_before() -> None:
    main = {KEY: [1.0, 1.0, 1.0]}
    (cell,) = decide_cells(main, {KEY: [1.5] * 3}, threshold_percent=20,
                           paired={KEY: [(1.0, 1.5)] * 8}, delayed_rounds={KEY: 1},
                           unsettled={KEY})  # fmt: skip
    assert cell.notes[0].startswith("judged on the paired recheck (8 rounds")
    assert cell.notes[1].startswith("confirmed by the paired recheck: +50.0%")
    assert cell.notes[2].startswith("contended: 1 of the 8 paired rounds")
    assert cell.notes[3] == UNSETTLED + "not confirmed: recheck on a quieter host"
    assert len(cell.notes) == 4


def _with_cpu(trials: list, key, wait: float) -> None:
    """Give ``key``'s trials a CPU time ``wait`` s below their wall time (the others none)."""
    for t in trials:
        if (t["acquisition"], t["format"], t["cache_state"]) == key:
            t["cpu_seconds"] = t["seconds"] - wait


def test_compare_reports_does_not_clear_a_cell_whose_main_trials_other_work_timed() -> None:
    """Every baseline trial of one cell waited 0.5 s (about a third of its 1.5 s) and the
    candidate's did not: the runs' least waits differ by more than a tenth of the fastest
    trial, so that cell is undecided, not unchanged; the other cells are judged as before."""
    key = ("scan-a", "hdf5", "cold")
    base, cand = make_example_report(1, reps=5), make_example_report(2, reps=5)
    plain = {c.key: c.verdict for c in compare_reports(base, cand, 20.0).cells}
    assert plain[key] is CellVerdict.UNCHANGED
    _with_cpu(base["trials"], key, 0.5)
    _with_cpu(cand["trials"], key, 0.0)
    cells = {c.key: c for c in compare_reports(base, cand, 20.0).cells}
    assert cells[key].verdict is CellVerdict.UNDECIDED and not cells[key].flagged
    assert any("other work on the host delayed" in n for n in cells[key].notes)
    assert {k: c.verdict for k, c in cells.items() if k != key} == {
        k: v for k, v in plain.items() if k != key
    }


def _compare_unsettled(candidate_wait: float) -> CellVerdict:
    """compare_reports over a paired recheck that reads no change (5 rounds of 10 s each
    side), the baseline side's round 6 delayed by 4 s and the candidate's every trial
    waiting ``candidate_wait`` s: the verdict of the rechecked cell."""
    key = ("scan-a", "hdf5", "cold")
    base, cand = make_example_report(1, reps=5), make_example_report(2, reps=5)
    block = _paired_block("b" * 64, key)
    for t in block["paired"]["baseline_trials"]:
        t["seconds"], t["cpu_seconds"] = (14.0 if t["trial_index"] == 6 else 10.0), 10.0
    for t in block["trials"]:
        t["seconds"], t["cpu_seconds"] = 10.0, 10.0 - candidate_wait
    cand["recheck"] = block
    compared = compare_reports(base, cand, 20.0, baseline_sha256="b" * 64)
    (cell,) = [c for c in compared.cells if c.key == key]
    assert cell.recheck["paired"] is True and cell.change_percent == 0.0
    return cell.verdict


def test_compare_reports_judges_unsettled_cells_against_its_threshold() -> None:
    """Least waits 2 s apart on a fastest trial of 10 s are not more than the 20% threshold
    of it: the recheck clears the cell; 2.5 s apart they are: unsettled, undecided."""
    assert _compare_unsettled(2.0) is CellVerdict.UNCHANGED
    assert _compare_unsettled(2.5) is CellVerdict.UNDECIDED
