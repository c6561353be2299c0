"""The trial loop: cells measured round by round, interleaved.

A *cell* is what one statistic summarises (acquisition, format, cache state for
io-scale). Measuring round by round, every cell once per round, means drift
(thermal, a neighbour's load, page-cache pressure) hits every cell alike instead of
biasing the cells measured last. The same loop serves the main trials and a recheck
(``--recheck K`` measures a subset of cells K more rounds in the same process, with
trial indices that continue after the main ones): both are one :meth:`TrialLoop.run`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from harness.run.workspace import Workspace


@dataclass(frozen=True)
class Cell:
    """One statistic's worth of trials: an acquisition in a format and a cache state."""

    acquisition: str
    format: str
    cache_state: str


def iter_rounds(
    cells: Sequence[Cell], rounds: int, first_index: int = 0
) -> Iterator[tuple[int, Cell]]:
    """``(trial index, cell)``: every cell once per round, in the order given."""
    for index in range(first_index, first_index + rounds):
        for cell in cells:
            yield index, cell


class TrialLoop:
    """Runs ``measure(cell, index)`` over rounds of cells, advancing the progress bar.

    ``measure`` does one trial and records it; the loop checks the interrupt latch
    between trials (through the workspace's event) and counts progress.
    """

    def __init__(self, workspace: Workspace, measure: Callable[[Cell, int], None]) -> None:
        self.workspace = workspace
        self.measure = measure

    def run(self, cells: Sequence[Cell], rounds: int, first_index: int = 0) -> int:
        """Measure ``cells`` for ``rounds`` rounds from ``first_index``; return the trial count."""
        count = 0
        for index, cell in iter_rounds(cells, rounds, first_index):
            self.measure(cell, index)
            self.workspace.event(
                "trial",
                acquisition=cell.acquisition,
                format=cell.format,
                cache_state=cell.cache_state,
                index=index,
            )
            self.workspace.progress.advance()
            count += 1
        return count
