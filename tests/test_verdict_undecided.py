"""Issue 40: a real slowdown is never called ``unchanged`` by trials that cannot rule it out.

The trials below are replayed from an exploratory run of the verdict's end-to-end check
(``benchmarks/verdict_e2e.py``, two extra passes over the loaded array, a slowdown the
published record measured at +43% to +71% per cell). Two causes turned such cells into
``unchanged``:

- the first stage's 3 vs 3 trials put the change within the threshold while their
  interval reached past it, and an unflagged cell was never rechecked;
- the paired recheck saw a slowdown, but a smaller one than the original trials (whose
  interval lay wholly above the recheck's), and its interval below the threshold cleared
  the flag.

Now both are ``undecided``: not flagged (exit 0 on their own, so A/A runs keep their
exit code), stated as such, and measured again by a recheck.
"""

from __future__ import annotations

from _verdict_helpers import trials_doc

from harness.verdict.cells import CellVerdict, decide_cells
from harness.verdict.comparison import flagged_for_recheck, undecided_after_recheck

# run-02 of the two-pass scenario: the baseline run and the slowed candidate run (3 trials)
BASE = {
    ("demo-u8", "hdf5", "cold"): [0.0092654, 0.0088199, 0.0074314],
    ("demo-u8", "hdf5", "cached"): [0.0092905, 0.0084102, 0.0074063],
    ("demo-u8", "qem", "cold"): [0.0097026, 0.0101177, 0.0102655],
    ("demo-u8", "qem", "cached"): [0.0083618, 0.0127212, 0.0095079],
    ("demo-u16", "hdf5", "cold"): [0.0091258, 0.0094356, 0.0090983],
    ("demo-u16", "hdf5", "cached"): [0.010296, 0.0091698, 0.0071527],
    ("demo-u16", "qem", "cold"): [0.017267, 0.0217689, 0.0264285],
    ("demo-u16", "qem", "cached"): [0.0150024, 0.0187331, 0.0165903],
}
CAND = {
    ("demo-u8", "hdf5", "cold"): [0.0125858, 0.0134605, 0.0127296],
    ("demo-u8", "hdf5", "cached"): [0.0137674, 0.0142212, 0.015256],
    ("demo-u8", "qem", "cold"): [0.0148088, 0.0134844, 0.0160599],
    ("demo-u8", "qem", "cached"): [0.0155069, 0.0136632, 0.0150828],
    ("demo-u16", "hdf5", "cold"): [0.0156917, 0.0140574, 0.0136668],
    ("demo-u16", "hdf5", "cached"): [0.0126565, 0.0128615, 0.0146983],
    ("demo-u16", "qem", "cold"): [0.0209417, 0.0195473, 0.0201015],
    ("demo-u16", "qem", "cached"): [0.018493, 0.0196711, 0.0200098],
}
SLOWED_QEM = [("demo-u16", "qem", "cold"), ("demo-u16", "qem", "cached")]

# run-00: the cell's original trials and its paired recheck (10 rounds, 4 looks)
CELL = ("demo-u16", "qem", "cold")
ORIGINAL_BASE = [0.0145619, 0.0151209, 0.0141801]
ORIGINAL_CAND = [0.0238127, 0.0235753, 0.0222687]
PAIRS = [
    (0.0173946, 0.0201988), (0.0182776, 0.020417), (0.0186316, 0.0198741),
    (0.0167415, 0.0197836), (0.0150828, 0.0196618), (0.0166165, 0.0198473),
    (0.0170762, 0.0198223), (0.0246463, 0.0184871), (0.0177058, 0.0185861),
    (0.0168608, 0.0199642),
]  # fmt: skip


def test_a_slowed_cell_within_the_threshold_by_chance_is_undecided_not_unchanged() -> None:
    cells = {c.key: c for c in decide_cells(BASE, CAND, threshold_percent=20)}
    for key in SLOWED_QEM:
        cell = cells[key]
        assert cell.change_percent <= 20 < cell.ci_percent[1], cell
        assert cell.verdict is not CellVerdict.UNCHANGED, cell
        assert cell.verdict is CellVerdict.UNDECIDED, cell
        assert not cell.flagged  # on its own it does not make the run exit 2
        assert any(n.startswith("undecided: ") and "cannot rule out" in n for n in cell.notes)
    # the run is rechecked: the flagged cells and the undecided ones
    trials = trials_doc(CAND)["trials"]
    rechecked = flagged_for_recheck(trials_doc(BASE), trials, 20)
    assert set(SLOWED_QEM) <= set(rechecked)
    assert set(rechecked) == {k for k, c in cells.items() if c.verdict.needs_recheck}


def test_a_tight_interval_within_the_threshold_stays_unchanged() -> None:
    steady = [1.0, 1.01, 0.99, 1.0, 1.02]
    (cell,) = decide_cells({CELL: steady}, {CELL: [v * 1.05 for v in steady]},
                           threshold_percent=20)  # fmt: skip
    assert cell.ci_percent[1] <= 20 and cell.verdict is CellVerdict.UNCHANGED


def test_a_paired_recheck_smaller_than_the_original_slowdown_does_not_clear_it() -> None:
    """The replayed cell measured +62% [+47%, +68%] on its run's trials and +15% with a
    98.75% interval of [+5%, +19%] on its paired recheck: both see a slowdown, of sizes on
    either side of the threshold. It was ``unchanged``; it is undecided."""
    (cell,) = decide_cells({CELL: ORIGINAL_BASE}, {CELL: ORIGINAL_CAND}, threshold_percent=20,
                           paired={CELL: PAIRS}, looks=4)  # fmt: skip
    low, high = cell.ci_percent
    assert low > 0 and high <= 20  # the recheck alone would clear it
    assert cell.recheck["original_change_percent"] > 50
    assert cell.verdict is not CellVerdict.UNCHANGED, cell.notes
    assert cell.verdict is CellVerdict.UNDECIDED, cell.notes
    assert "disagree" in cell.notes[1]
    # more rounds of the same measurement cannot settle a disagreement: no further look
    base, cand = trials_doc({CELL: ORIGINAL_BASE}), trials_doc({CELL: ORIGINAL_CAND})
    recheck = trials_doc({CELL: [c for _, c in PAIRS]})["trials"]
    paired_base = trials_doc({CELL: [b for b, _ in PAIRS]})["trials"]
    assert undecided_after_recheck(base, cand["trials"], 20, looks=4, recheck_trials=recheck,
                                   paired_baseline_trials=paired_base) == []  # fmt: skip


def test_a_recheck_that_finds_no_slowdown_still_clears_a_flag() -> None:
    """Drift between runs flags a cell; a recheck whose interval includes no change clears
    it, however far the original trials were (what the A/A runs need)."""
    pairs = [(b, b * (1 + d)) for b, d in zip(ORIGINAL_BASE * 3, [-0.03, 0.02, 0.0] * 3)]
    (cell,) = decide_cells({CELL: ORIGINAL_BASE}, {CELL: ORIGINAL_CAND}, threshold_percent=20,
                           paired={CELL: pairs})  # fmt: skip
    assert cell.ci_percent[0] <= 0 and cell.verdict is CellVerdict.UNCHANGED
    assert cell.notes[1].startswith("flag cleared by the paired recheck")


def test_an_undecided_cell_whose_recheck_still_reaches_past_the_threshold_goes_on() -> None:
    pairs = [(1.0, 1.0), (1.0, 1.3), (1.0, 0.95), (1.0, 1.25), (1.0, 1.1)]
    base, cand = {CELL: [1.0, 1.2, 0.9]}, {CELL: [1.0, 1.3, 0.95]}
    (first,) = decide_cells(base, cand, threshold_percent=20)
    assert first.verdict is CellVerdict.UNDECIDED
    (cell,) = decide_cells(base, cand, threshold_percent=20, paired={CELL: pairs}, looks=2)
    assert cell.verdict is CellVerdict.UNDECIDED and cell.ci_percent[1] > 20
    assert "more rounds can settle it" in cell.notes[1]
    recheck = trials_doc({CELL: [c for _, c in pairs]})["trials"]
    paired_base = trials_doc({CELL: [b for b, _ in pairs]})["trials"]
    assert undecided_after_recheck(trials_doc(base), trials_doc(cand)["trials"], 20, looks=2,
                                   recheck_trials=recheck,
                                   paired_baseline_trials=paired_base) == [CELL]  # fmt: skip


def test_a_disagreement_needs_a_recheck_slowdown_of_half_the_threshold() -> None:
    base, flagged = {CELL: [1.0] * 5}, {CELL: [1.5] * 5}  # +50%, interval [+50%, +50%]
    # at 25%, half is +12.5%: 1.125 is exact in binary
    for ratio, verdict in ((1.12, CellVerdict.UNCHANGED), (1.125, CellVerdict.UNDECIDED)):
        (cell,) = decide_cells(base, flagged, threshold_percent=25,
                               paired={CELL: [(1.0, ratio)] * 5})  # fmt: skip
        assert cell.ci_percent[0] > 0 and cell.verdict is verdict, ratio
    # the recheck's interval reaching 0: no slowdown seen, so it clears
    pairs = [(1.0, 1.12), (1.0, 0.98), (1.0, 1.1), (1.0, 1.11), (1.0, 1.12)]
    (cell,) = decide_cells(base, flagged, threshold_percent=20, paired={CELL: pairs})
    assert cell.ci_percent[0] <= 0 and cell.verdict is CellVerdict.UNCHANGED


def test_the_recheck_of_an_undecided_cell_flags_it_only_when_it_confirms() -> None:
    """An undecided cell is rechecked; its recheck past the threshold but not significant
    leaves it undecided (no unconfirmed flag added to a run of unchanged code), and a
    significant one makes it slower."""
    base, cand = {CELL: [1.0, 1.2, 0.9]}, {CELL: [1.0, 1.3, 0.95]}
    noisy = [(1.0, 1.3), (1.0, 0.9), (1.0, 1.4), (1.0, 1.0), (1.0, 1.35)]
    (cell,) = decide_cells(base, cand, threshold_percent=20, paired={CELL: noisy})
    assert cell.change_percent > 20 and cell.p_adjusted > 0.05
    assert cell.verdict is CellVerdict.UNDECIDED and not cell.flagged
    assert "past, not significantly, the 20% threshold" in cell.notes[1]
    clear = [(1.0 + 0.01 * i, (1.0 + 0.01 * i) * 1.6) for i in range(5)]
    (cell,) = decide_cells(base, cand, threshold_percent=20, paired={CELL: clear})
    assert cell.verdict is CellVerdict.SLOWER


# -- boundaries ---------------------------------------------------------------------------


def test_an_interval_ending_exactly_at_the_threshold_does_not_reach_past_it() -> None:
    base = {CELL: [1.0] * 5}  # 1.25 is exact in binary: the interval ends at exactly +25%
    (cell,) = decide_cells(base, {CELL: [1.25] * 5}, threshold_percent=25)
    assert cell.ci_percent[1] == 25 and cell.verdict is CellVerdict.UNCHANGED
    (cell,) = decide_cells(base, {CELL: [1.0, 1.0, 1.0, 1.2501, 1.2501]}, threshold_percent=25)
    assert cell.change_percent == 0 and cell.ci_percent[1] > 25
    assert cell.verdict is CellVerdict.UNDECIDED


def test_a_disagreement_needs_the_original_interval_wholly_above_and_past_the_threshold():
    pairs = [(1.0, 1.15)] * 5  # a recheck of +15%, interval [+15%, +15%]
    # the original interval's low end exactly at the recheck's high end: not wholly above
    (cell,) = decide_cells({CELL: [1.0] * 5}, {CELL: [1.15, 1.15, 1.5, 1.5, 1.5]},
                           threshold_percent=20, paired={CELL: pairs})  # fmt: skip
    assert cell.verdict is CellVerdict.UNCHANGED, cell.notes
    # wholly above the recheck, but within the threshold itself: both clear it
    (cell,) = decide_cells({CELL: [1.0] * 5}, {CELL: [1.18] * 5}, threshold_percent=20,
                           paired={CELL: pairs})  # fmt: skip
    assert cell.verdict is CellVerdict.UNCHANGED, cell.notes
    # a recheck whose interval starts exactly at 0 sees no slowdown: it clears
    zero = [(1.0, 1.0), (1.0, 1.15), (1.0, 1.15), (1.0, 1.15), (1.0, 1.15)]
    (cell,) = decide_cells({CELL: [1.0] * 5}, {CELL: [1.5] * 5}, threshold_percent=20,
                           paired={CELL: zero})  # fmt: skip
    assert cell.ci_percent[0] == 0 and cell.verdict is CellVerdict.UNCHANGED


def test_looks_go_on_for_an_undecided_cell_only_while_its_interval_reaches_past() -> None:
    # stages that disagree, the recheck's interval ending exactly at the threshold (+25%,
    # exact in binary): undecided, and no further look can settle it
    base, cand = {CELL: [1.0] * 5}, {CELL: [1.5] * 5}
    at = [(1.0, 1.25)] * 5
    (cell,) = decide_cells(base, cand, threshold_percent=25, paired={CELL: at})
    assert cell.ci_percent[1] == 25 and cell.verdict is CellVerdict.UNDECIDED
    recheck = trials_doc({CELL: [c for _, c in at]})["trials"]
    paired_base = trials_doc({CELL: [b for b, _ in at]})["trials"]
    assert undecided_after_recheck(trials_doc(base), trials_doc(cand)["trials"], 25, looks=1,
                                   recheck_trials=recheck,
                                   paired_baseline_trials=paired_base) == []  # fmt: skip
