"""Issue 40, defect 6: the minimum detectable changes a verdict states agree with the
detection measured on the same host.

The host here is a model whose truth we know: each run of a cell lands at a drifted
speed (lognormal run-to-run drift, the larger part of a shared machine's noise) and
scatters a little within the run. A calibration is built from some of its runs; the
detection is then measured on *fresh* runs of the same host, slowed by the figure the
verdict stated, through :func:`decide_cells` itself.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from harness.verdict.calibration import CalibratedNull
from harness.verdict.cells import CellVerdict, decide_cells

CELL = ("demo", "hdf5", "cached")
DRIFT, SCATTER, REPS = 0.15, 0.03, 3


def _run(rng: np.random.Generator, factor: float = 1.0) -> list[float]:
    speed = np.exp(rng.normal(0.0, DRIFT))
    return list(0.01 * factor * speed * np.exp(rng.normal(0.0, SCATTER, REPS)))


def _host(seed: int = 7, runs: int = 16) -> CalibratedNull:
    rng = np.random.default_rng(seed)
    return CalibratedNull({CELL: [_run(rng) for _ in range(runs)]})


def _rates(
    null: CalibratedNull, slowdown_percent: float, *, fresh: bool, draws: int = 500
) -> dict[str, float]:
    """Verdict rates of baseline/candidate runs, the candidate slowed by the figure: fresh
    runs of the modelled host (``fresh``), or two distinct runs of the calibration itself,
    their trials resampled (the host as it was measured)."""
    rng = np.random.default_rng(2026)
    runs = null.runs[CELL]
    counts = {v: 0 for v in CellVerdict}
    for _ in range(draws):
        if fresh:
            base, cand = _run(rng), _run(rng)
        else:
            i, j = rng.choice(len(runs), 2, replace=False)
            base, cand = list(rng.choice(runs[i], REPS)), list(rng.choice(runs[j], REPS))
        cand = [v * (1 + slowdown_percent / 100) for v in cand]
        (cell,) = decide_cells({CELL: base}, {CELL: cand}, threshold_percent=20, calibration=null)
        counts[cell.verdict] += 1
    return {v.value: n / draws for v, n in counts.items()}


def _stated(note_pattern: str, notes: tuple[str, ...]) -> float:
    for note in notes:
        found = re.search(note_pattern, note)
        if found:
            return float(found.group(1))
    raise AssertionError(f"no note matches {note_pattern!r}: {notes}")


@pytest.mark.slow
def test_the_pass_note_names_the_slowdown_that_is_flagged_nine_times_in_ten() -> None:
    """An A/A pass says which slowdowns it rules out; fresh runs slowed by that figure are
    flagged (exit 2) about 9 times in 10, not every time (the figure too large, as the
    confirmation MDC was) nor rarely (too small)."""
    null = _host()
    rng = np.random.default_rng(1)
    (cell,) = decide_cells({CELL: _run(rng)}, {CELL: _run(rng)}, threshold_percent=20,
                           calibration=null)  # fmt: skip
    assert not cell.flagged
    stated = _stated(r"slowdowns of (\d+)% or more", cell.notes)
    own = _rates(null, stated, fresh=False)
    flagged = own["slower"] + own["possibly_slower"]
    assert flagged == pytest.approx(0.9, abs=0.04), (stated, own)
    assert stated == pytest.approx(cell.flag_mdc_percent, abs=0.5)
    fresh = _rates(null, stated, fresh=True)  # runs the calibration never saw: looser
    assert 0.78 <= fresh["slower"] + fresh["possibly_slower"] <= 0.97, (stated, fresh)
    # and clearly less often at two thirds of it
    weaker = _rates(null, stated * 2 / 3, fresh=False)
    assert weaker["slower"] + weaker["possibly_slower"] < flagged - 0.1


@pytest.mark.slow
def test_the_confirmation_figure_is_confirmed_nine_times_in_ten() -> None:
    """A flagged cell's note names the slowdown these trials confirm as ``slower``; fresh
    runs slowed by it are confirmed about 9 times in 10 (one cell: Holm is the plain test)."""
    null = _host()
    (cell,) = decide_cells({CELL: [0.01] * REPS}, {CELL: [0.0125] * REPS}, threshold_percent=20,
                           calibration=null)  # fmt: skip
    assert cell.verdict is CellVerdict.POSSIBLY_SLOWER
    stated = _stated(r"minimum detectable change \((\d+)%\)", cell.notes)
    assert stated == pytest.approx(cell.mdc_percent, abs=0.5)
    assert stated > cell.flag_mdc_percent  # confirming takes more than flagging
    assert _rates(null, stated, fresh=False)["slower"] >= 0.86


def test_the_flag_mdc_is_the_null_quantile_formula() -> None:
    null = _host()
    q = float(np.quantile(null.null_ratios(CELL, 3, 3), 0.1))
    assert null.flag_mdc(CELL, 3, 3, threshold_percent=20) == pytest.approx((1.2 / q - 1) * 100)
    assert null.flag_mdc(CELL, 3, 3, threshold_percent=20, power=0.5) < null.flag_mdc(
        CELL, 3, 3, threshold_percent=20
    )


def test_a_calibration_report_states_both_figures(tmp_path) -> None:
    """The calibration record names, per cell, the slowdown it flags 9 times in 10 (what
    a pass rules out) beside the larger one it confirms."""
    from harness.testing import make_example_report
    from harness.verdict.calibration_report import (
        build_calibration,
        dump_calibration,
        null_from_document,
        parse_calibration,
    )

    runs = [(make_example_report(i, reps=3, noise=0.05), f"{i:064x}") for i in range(6)]
    doc = build_calibration(runs, regression_percent=20, alpha=0.05, command=["test"])
    doc = parse_calibration(dump_calibration(doc), name="x")  # the schema takes it
    null = null_from_document(doc)
    for cell in doc["cells"]:
        key = (cell["acquisition"], cell["format"], cell["cache_state"])
        assert cell["flag_mdc_percent"] == pytest.approx(
            null.flag_mdc(key, 3, 3, threshold_percent=20)
        )
        assert cell["flag_mdc_percent"] < cell["mdc_percent"]


def test_a_host_that_flags_every_slowdown_past_the_threshold_says_nothing_more() -> None:
    """A host without noise flags any slowdown past the threshold (its flag MDC is the
    threshold): a pass needs no note of what it does not rule out."""
    null = CalibratedNull({CELL: [[0.01] * REPS for _ in range(6)]})
    (cell,) = decide_cells({CELL: [0.01] * REPS}, {CELL: [0.01] * REPS}, threshold_percent=20,
                           calibration=null)  # fmt: skip
    assert cell.flag_mdc_percent == pytest.approx(20)
    assert cell.verdict is CellVerdict.UNCHANGED and cell.notes == ()


def test_a_flagged_cell_names_the_confirmation_figure_not_what_a_pass_rules_out() -> None:
    null = _host()
    (cell,) = decide_cells({CELL: [0.01] * REPS}, {CELL: [0.0125] * REPS}, threshold_percent=20,
                           calibration=null)  # fmt: skip
    assert cell.flagged and cell.flag_mdc_percent > 20
    assert not any("flags slowdowns of" in n for n in cell.notes), cell.notes
    assert any(f"minimum detectable change ({cell.mdc_percent:.0f}%)" in n for n in cell.notes)
