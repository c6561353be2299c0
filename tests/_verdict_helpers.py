"""Helpers shared by the verdict tests (harness.verdict)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def trials_doc(cells: Mapping[tuple[str, str, str], Sequence[float]]) -> dict:
    """A report holding only ``trials``: each cell's seconds as its kept trials, indexed
    in order (what ``collect_cells``, ``pairs_by_round`` and the recheck helpers read)."""
    return {
        "trials": [
            {
                "acquisition": acquisition,
                "format": fmt,
                "cache_state": cache_state,
                "seconds": seconds,
                "kept": True,
                "trial_index": index,
            }
            for (acquisition, fmt, cache_state), values in cells.items()
            for index, seconds in enumerate(values)
        ]
    }


def timed_trial(
    key: tuple[str, str, str], index: int, seconds: float, cpu: float, kept: bool = True
) -> dict:
    """One trial of cell ``key`` with its wall and CPU seconds (what the delay rule reads)."""
    return {
        "acquisition": key[0],
        "format": key[1],
        "cache_state": key[2],
        "trial_index": index,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "kept": kept,
    }
