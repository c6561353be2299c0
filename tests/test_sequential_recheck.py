"""A sequential recheck (issue 40): warm-up trials dropped, undecided cells measured on in
batches, and the verdict's alpha and interval split over the looks it could take."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from harness.run.paired import workers as paired_trials
from harness.run.paired.baseline_code import BaselineCode
from harness.run.paired.workers import PairedSpec, measure_paired
from harness.verdict.cells import CellVerdict, decide_cells, recheck_confidence

A = ("scan", "hdf5", "cold")
B = ("scan", "hdf5", "cached")


class FakeWorker:
    """Stands in for a worker process: answers trials, remembers what it was asked."""

    asked: ClassVar[list[tuple[str, tuple, int]]] = []

    def __init__(self, side, tree, spec, scratch) -> None:
        self.side = side
        self.fingerprint = "f" * 64

    def trial(self, cell, index):
        FakeWorker.asked.append((self.side, tuple(cell), index))
        return {
            "acquisition": cell[0],
            "format": cell[1],
            "cache_state": cell[2],
            "trial_index": index,
            "kept": True,
            "seconds": 1.0,
            "label": "t",
        }

    def close(self):
        return {"source_fingerprint_end": "f" * 64, "stable": True, "failures": [], "products": {}}


@pytest.fixture
def fake_workers(monkeypatch):
    FakeWorker.asked = []
    monkeypatch.setattr(paired_trials, "PairedWorker", FakeWorker)
    return FakeWorker


def _measure(tmp_path: Path, cells, rounds, looks, undecided=None, warmup=1):
    spec = PairedSpec(
        root=".", manifest="m", backend="cpu", storage_id="s", representation="dense",
        fresh_index=False, threads=None, first_index=3, acquisitions=("scan",),
    )  # fmt: skip
    return measure_paired(
        spec,
        cells,
        rounds,
        baseline=BaselineCode(tree=tmp_path, origin="t"),
        candidate_tree=tmp_path,
        expected={"baseline": "f" * 64, "candidate": "f" * 64},
        scratch=tmp_path / "s",
        looks=looks,
        undecided=undecided,
        warmup=warmup,
    )


def test_the_warmup_round_is_measured_and_dropped(tmp_path, fake_workers) -> None:
    measured = _measure(tmp_path, [A, B], rounds=2, looks=1)
    # each side: one warm-up trial per cell, then 2 rounds x 2 cells kept
    for side in ("baseline", "candidate"):
        asked = [a for a in fake_workers.asked if a[0] == side]
        assert len(asked) == 2 + 4
        assert [a[1] for a in asked[:2]] == [A, B]
    assert len(measured["baseline_trials"]) == len(measured["candidate_trials"]) == 4
    assert sorted({t["trial_index"] for t in measured["candidate_trials"]}) == [3, 4]
    assert measured["warmup_rounds"] == 1 and measured["looks_done"] == 1


def test_only_undecided_cells_are_measured_on_up_to_the_last_look(tmp_path, fake_workers) -> None:
    seen = []

    def undecided(base, cand):
        seen.append((len(base), len(cand)))
        return [B]

    measured = _measure(tmp_path, [A, B], rounds=2, looks=3, undecided=undecided, warmup=0)
    indices = {
        cell: sorted(t["trial_index"] for t in measured["candidate_trials"] if
                     (t["acquisition"], t["format"], t["cache_state"]) == cell)
        for cell in (A, B)
    }  # fmt: skip
    assert indices == {A: [3, 4], B: [3, 4, 5, 6, 7, 8]}
    assert seen == [(4, 4), (6, 6)]  # asked after each look but the last
    assert measured["looks_done"] == 3


def test_each_look_has_fresh_workers_started_in_the_other_order(tmp_path, fake_workers) -> None:
    started = []
    real_init = FakeWorker.__init__

    def init(self, side, tree, spec, scratch):
        started.append(side)
        real_init(self, side, tree, spec, scratch)

    fake_workers.__init__ = init
    try:
        measure_paired(
            PairedSpec(
                root=".", manifest="m", backend="cpu", storage_id="s", representation="dense",
                fresh_index=False, threads=None, first_index=0, acquisitions=("scan",),
            ),
            [A], 1, baseline=BaselineCode(tree=tmp_path, origin="t"), candidate_tree=tmp_path,
            expected={"baseline": "f" * 64, "candidate": "f" * 64}, scratch=tmp_path / "s",
            started_first="candidate", looks=3, undecided=lambda b, c: [A], warmup=1,
        )  # fmt: skip
    finally:
        fake_workers.__init__ = real_init
    assert started == ["candidate", "baseline", "baseline", "candidate", "candidate", "baseline"]
    # one dropped warm-up trial per side and look, then the kept round
    per_side = [a for a in fake_workers.asked if a[0] == "baseline"]
    assert len(per_side) == 3 * 2


def test_the_recheck_stops_when_every_cell_is_decided(tmp_path, fake_workers) -> None:
    measured = _measure(tmp_path, [A, B], rounds=2, looks=4, undecided=lambda b, c: [], warmup=0)
    assert measured["looks_done"] == 1
    assert len(measured["candidate_trials"]) == 4


def _pairs(ratio: float, n: int) -> list[tuple[float, float]]:
    # baseline 1.00, 1.01, ...; candidate the same times ``ratio``: every pair slower
    return [(1 + 0.01 * i, (1 + 0.01 * i) * ratio) for i in range(n)]


def test_the_looks_split_alpha_so_a_borderline_confirmation_waits() -> None:
    """Six pairs 1.5x slower: Mann-Whitney's smallest p for 6 vs 6 is 1/924, below 0.05
    but not below 0.05 / 64 looks; the same data confirm with one look and not with 64."""
    base = {A: [1.0, 1.6, 1.0]}  # the first stage cannot be significant: it flags only
    cand = {A: [1.5, 1.5, 1.5]}
    one = decide_cells(base, cand, threshold_percent=20, paired={A: _pairs(1.5, 6)}, looks=1)
    many = decide_cells(base, cand, threshold_percent=20, paired={A: _pairs(1.5, 6)}, looks=64)
    assert one[0].verdict is CellVerdict.SLOWER
    assert one[0].recheck["alpha"] == 0.05
    # the first stage (3 vs 3) was possibly_slower: the recheck keeps the flag, not a pass
    assert many[0].verdict is CellVerdict.POSSIBLY_SLOWER
    assert many[0].recheck["alpha"] == pytest.approx(0.05 / 64)
    assert many[0].recheck["looks"] == 64


def test_the_interval_of_a_recheck_widens_with_its_looks() -> None:
    assert recheck_confidence(1) == pytest.approx(0.95)
    assert recheck_confidence(4) == pytest.approx(0.9875)
    base = {A: [1.0, 1.3, 1.0]}
    cand = {A: [1.5, 1.5, 1.5]}
    pairs = [(1.0, 1.0 + 0.04 * ((i * 7) % 11 - 5)) for i in range(12)]
    one = decide_cells(base, cand, threshold_percent=20, paired={A: pairs}, looks=1)
    four = decide_cells(base, cand, threshold_percent=20, paired={A: pairs}, looks=4)
    low1, high1 = one[0].ci_percent
    low4, high4 = four[0].ci_percent
    assert low4 <= low1 and high4 >= high1 and (high4 - low4) > (high1 - low1)
    assert any("98.75% interval" in n for n in four[0].notes)


def test_looks_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="looks"):
        decide_cells({A: [1.0]}, {A: [1.0]}, threshold_percent=20, looks=0)
