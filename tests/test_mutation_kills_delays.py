"""Delayed trials and their hooks in the verdict (harness/verdict/delays.py, and where
cells.py and comparison.py call it) at the boundaries the mutmut run over them found
untested (tests/mutation-survivors.md). Expected values follow from the rules in
delays.py's docstring and docs/verdicts.md (a wait is wall less CPU time; a trial is
delayed when its wait exceeds its cell's least by *more than* a tenth of the fastest
trial), worked out by hand on numbers chosen so that the float arithmetic is exact."""

from __future__ import annotations

from harness.verdict import delays

KEY = ("scan", "hdf5", "cached")
COLD = ("scan", "hdf5", "cold")


def _trial(key, index, seconds, cpu, kept=True) -> dict:
    return {
        "acquisition": key[0],
        "format": key[1],
        "cache_state": key[2],
        "trial_index": index,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "kept": kept,
    }


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

