"""Paired trials delayed by other work on the host, found by their waiting time.

On a host shared with other work (another engineer's tests at nice 19 on the 2 cores)
a trial's wall time is its own work plus the time it waited for a CPU that other work
held. The wait comes in bursts: in a paired recheck under such contention a third of
the trials took 2 to 15 times their cell's fastest while their process's CPU time
(``cpu_seconds``, all threads, :func:`harness.run.trials.measure_load`) stayed within a
few per cent of it. Such a round measures the other work, not the code, and made every
recheck interval too wide to clear or confirm anything.

A trial's **wait** is its wall time less its CPU time. Within one look of a paired
recheck, a trial is **delayed** when its wait exceeds the least wait of its cell and side
in that look by more than :data:`DELAY_FRACTION` of that cell and side's fastest trial.
The least wait keeps what every trial of the cell waits for (the disk, in a cold trial)
and each side is its own reference, so a slowdown of either code, in CPU or in reads,
is not taken for a delay. A round with a delayed trial on either side is measured again
(:func:`rounds_to_retake`); the delayed round stays in the record, not kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

CellKey = tuple[str, str, str]

#: A wait beyond the cell's least by more than this share of its fastest trial is a delay.
DELAY_FRACTION = 0.10
#: The most rounds of a cell a look measures again, per round it asked for.
RETAKES_PER_ROUND = 3


def cell_of(trial: Mapping[str, Any]) -> CellKey:
    return (trial["acquisition"], trial["format"], trial["cache_state"])


def wait_seconds(trial: Mapping[str, Any]) -> float | None:
    """Wall time less CPU time; None for a trial without ``cpu_seconds`` (older code)."""
    cpu = trial.get("cpu_seconds")
    return None if cpu is None else float(trial["seconds"]) - float(cpu)


def delayed(trials: Sequence[Mapping[str, Any]]) -> dict[tuple[CellKey, int], float]:
    """The delayed trials of one side and one look, by cell and trial index, with how much longer
    than the least of their cell they waited (trials without ``cpu_seconds``, or not kept
    by their cache-state test, are never delayed)."""
    rows: dict[CellKey, list[tuple[int, float, float]]] = {}
    for t in trials:
        wait = wait_seconds(t)
        if wait is not None and t.get("kept", True):
            rows.setdefault(cell_of(t), []).append(
                (int(t["trial_index"]), wait, float(t["seconds"]))
            )
    out: dict[tuple[CellKey, int], float] = {}
    for key, cell_rows in rows.items():
        least = min(wait for _, wait, _ in cell_rows)
        fastest = min(seconds for _, _, seconds in cell_rows)
        for index, wait, _ in cell_rows:
            if wait - least > DELAY_FRACTION * fastest:
                out[key, index] = wait - least
    return out


def rounds_to_retake(
    sides: Iterable[Sequence[Mapping[str, Any]]],
) -> set[tuple[CellKey, int]]:
    """The rounds (cell, trial index) of a look in which either side's trial was delayed."""
    out: set[tuple[CellKey, int]] = set()
    for trials in sides:
        out |= set(delayed(trials))
    return out


def mark_retaken(trial: dict[str, Any], excess: float) -> dict[str, Any]:
    """``trial`` left out of the verdict as delayed by ``excess`` seconds of waiting."""
    return {**trial, "kept": False, "retaken": True, "delay_seconds": round(excess, 9)}
