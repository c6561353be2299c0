"""The verdict's power at a small size: A/A false positives and detection per slowdown.

Samples are drawn from a seeded log-normal model of trial times (the spread of the demo's
cached loads on a quiet host), so the table is the same on every host for a given code: a
change of the verdict's rules shows as a changed table, and its timing as a slower stage.
``benchmarks/verdict_power.py`` draws the same table from real A/A runs instead.
"""

from __future__ import annotations

import numpy as np

from harness.verdict.cells import decide_cells

SLOWDOWNS = (0.0, 0.10, 0.30)
CELLS = 8
REPS = 5
#: The log-normal spread of one trial (sd of log seconds).
SPREAD = 0.05
THRESHOLD_PERCENT = 20.0
#: The most A/A comparisons with any cell judged slower that the verdict may show; above
#: it the verdict claims regressions that are not there (a correctness failure of the run).
MAX_FALSE_POSITIVE = 0.10


def power_table(draws: int, seed: int = 1) -> list[dict]:
    """Per slowdown: the fraction of comparisons with any cell ``slower`` and of cells."""
    rng = np.random.default_rng(seed)
    keys = [(f"cell{i}", "history", "stage") for i in range(CELLS)]
    rows = []
    for slowdown in SLOWDOWNS:
        any_slower = cells_slower = 0
        for _ in range(draws):
            base = {k: list(np.exp(rng.normal(0.0, SPREAD, REPS))) for k in keys}
            cand = {k: list((1 + slowdown) * np.exp(rng.normal(0.0, SPREAD, REPS))) for k in keys}
            verdicts = decide_cells(
                base, cand, threshold_percent=THRESHOLD_PERCENT, bootstrap_resamples=100
            )
            slower = sum(cell.verdict.value == "slower" for cell in verdicts)
            any_slower += slower > 0
            cells_slower += slower
        rows.append(
            {
                "slowdown": slowdown,
                "draws": draws,
                "comparisons_slower": any_slower / draws if draws else 0.0,
                "cells_slower": cells_slower / (draws * CELLS) if draws else 0.0,
            }
        )
    return rows
