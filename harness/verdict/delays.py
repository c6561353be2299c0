"""Paired trials delayed by other work on the host, found by their wait and taken out.

On a host shared with other work (another engineer's tests at nice 19 on the 2 cores) a
trial's wall time is its own work plus the time it waited for a CPU that other work
held, and the waits come in bursts: in paired rechecks under such contention a third or
more of the trials took 2 to 15 times their cell's fastest while their process's CPU
time (``cpu_seconds``, all threads, recorded by :func:`harness.run.trials.measure_load`)
stayed within a few per cent of it. Judged on wall time, such rounds measure the other
work: no interval of an unchanged cell came within the threshold, and +50% cells were not
confirmed.

A trial's **wait** is its wall time less its CPU time. Among the kept trials of one cell
and one side of a paired recheck, a trial is **delayed** when its wait exceeds the least
wait of them by more than :data:`DELAY_FRACTION` of their fastest trial; its **delay**
is that excess. The verdict judges a delayed trial on its wall time less its delay
(:func:`without_delays`): what it would have taken waiting no more than the least-waiting
trial of its cell. The least wait keeps what every trial waits for (the disk, in a cold
load), and each side is its own reference, so a slowdown of either code, in CPU or in
steady waiting (more reads), stays in the verdict; a trial without ``cpu_seconds`` (code
from before it) is never delayed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

CellKey = tuple[str, str, str]

#: A wait beyond the cell's least by more than this share of its fastest trial is a delay.
DELAY_FRACTION = 0.10


def cell_of(trial: Mapping[str, Any]) -> CellKey:
    return (trial["acquisition"], trial["format"], trial["cache_state"])


def wait_seconds(trial: Mapping[str, Any]) -> float | None:
    """Wall time less CPU time; None for a trial without ``cpu_seconds`` (older code)."""
    cpu = trial.get("cpu_seconds")
    return None if cpu is None else float(trial["seconds"]) - float(cpu)


def delays(trials: Sequence[Mapping[str, Any]]) -> dict[tuple[CellKey, int], float]:
    """The delayed trials of one side, by cell and trial index, with their delay (seconds)."""
    rows: dict[CellKey, list[tuple[int, float, float]]] = {}
    for t in trials:
        wait = wait_seconds(t)
        if wait is not None and t.get("kept"):
            rows.setdefault(cell_of(t), []).append(
                (int(t["trial_index"]), wait, float(t["seconds"]))
            )
    out: dict[tuple[CellKey, int], float] = {}
    for key, cell_rows in rows.items():
        # a parallel load's CPU time exceeds its wall time: a negative wait is no reference
        least = max(0.0, min(wait for _, wait, _ in cell_rows))
        fastest = min(seconds for _, _, seconds in cell_rows)
        for index, wait, _ in cell_rows:
            if wait - least > DELAY_FRACTION * fastest:
                out[key, index] = wait - least
    return out


def without_delays(trials: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``trials`` (one side) with each delayed trial's ``seconds`` less its delay, and its
    wall time and delay kept beside (``wall_seconds``, ``delay_seconds``)."""
    delayed = delays(trials)
    out = []
    for t in trials:
        delay = delayed.get((cell_of(t), int(t["trial_index"])))
        if delay is None:
            out.append(dict(t))
        else:
            out.append(
                {
                    **t,
                    "seconds": float(t["seconds"]) - delay,
                    "wall_seconds": float(t["seconds"]),
                    "delay_seconds": delay,
                }
            )
    return out


def delayed_rounds(
    baseline_trials: Sequence[Mapping[str, Any]], candidate_trials: Sequence[Mapping[str, Any]]
) -> dict[CellKey, int]:
    """Per cell, the rounds (trial indices) of a paired recheck with a delayed trial on
    either side."""
    rounds: dict[CellKey, set[int]] = {}
    for side in (baseline_trials, candidate_trials):
        for key, index in delays(side):
            rounds.setdefault(key, set()).add(index)
    return {key: len(indices) for key, indices in rounds.items()}


def unsettled_cells(
    baseline_trials: Sequence[Mapping[str, Any]],
    candidate_trials: Sequence[Mapping[str, Any]],
    threshold: float,
) -> set[CellKey]:
    """The paired cells whose delays cannot be told from the code: some round was delayed
    and the two sides' least waits differ by more than ``threshold`` (the regression
    threshold, a fraction) of the cell's fastest trial, enough to make a change of that
    size by themselves. A side whose every trial of a look waited (its worker sharing a
    core with the other work throughout) has a least wait that is itself a delay; a
    candidate that reads more has one that is not; the trials cannot say which."""
    delayed = delayed_rounds(baseline_trials, candidate_trials)
    differ = _waits_differ(baseline_trials, candidate_trials, threshold)
    return {key for key in differ if key in delayed}


def _waits_differ(
    baseline_trials: Sequence[Mapping[str, Any]],
    candidate_trials: Sequence[Mapping[str, Any]],
    fraction: float = DELAY_FRACTION,
) -> set[CellKey]:
    least = [_least_waits(trials) for trials in (baseline_trials, candidate_trials)]
    return {
        key
        for key in least[0].keys() & least[1].keys()
        if abs(least[0][key][0] - least[1][key][0])
        > fraction * min(least[0][key][1], least[1][key][1])
    }


def contended_cells(
    baseline_trials: Sequence[Mapping[str, Any]], candidate_trials: Sequence[Mapping[str, Any]]
) -> set[CellKey]:
    """The cells whose main trials (two runs, each its own reference) other work may have
    timed: a delayed trial in either run, or a least wait that differs between the runs by
    more than :data:`DELAY_FRACTION` of the cell's fastest trial (every trial of one run
    delayed alike). Such a cell is not ``unchanged`` nor ``faster`` on these trials alone
    (:func:`harness.verdict.cells.decide_cells`); a paired recheck measures it."""
    delayed = {key for key, _ in delays(baseline_trials)}
    delayed |= {key for key, _ in delays(candidate_trials)}
    return delayed | _waits_differ(baseline_trials, candidate_trials)


def _least_waits(trials: Sequence[Mapping[str, Any]]) -> dict[CellKey, tuple[float, float]]:
    """Per cell, the least wait (at least 0) and the fastest wall time of the kept trials."""
    out: dict[CellKey, tuple[float, float]] = {}
    for t in trials:
        wait = wait_seconds(t)
        if wait is None or not t.get("kept"):
            continue
        key = cell_of(t)
        old_wait, old_fastest = out.get(key, (float("inf"), float("inf")))
        out[key] = (min(old_wait, max(0.0, wait)), min(old_fastest, float(t["seconds"])))
    return out
