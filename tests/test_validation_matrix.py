"""The validation matrix (issue 34): fixtures intact, scores recomputed against the fixed
criteria, the record's verdicts and the docs tables derived from the record.

The criteria live in ``harness.run.compute.validate.CRITERIA`` and are not tuned to the
scores. Where a cell fails a criterion for a reason of physics or method that this change
does not fix, it is listed in ``KNOWN_FAILURES`` with the reason and asserted to fail
(strict): a fix shows up as a test to update, never silently. A criterion the data cannot
decide (the parallax rotation in focus) is in ``UNDETERMINED``, asserted likewise.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import warnings
from pathlib import Path

import pytest

from harness.run.compute import validate as compute_validate
from quantem.stem4d.dpc import dpc
from quantem.stem4d.errors import CalibrationError, CalibrationWarning
from quantem.stem4d.io import load
from quantem.stem4d.virtual import Calibration, open_frames

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / "tests" / "data" / "validation"
TRUTH = json.loads((ROOT / "truth.json").read_text())
RECORD = REPO / "docs" / "records" / "compute-validate.json"
ACQUISITIONS = {
    name: (cell_name, entry)
    for cell_name, cell in TRUTH["cells"].items()
    for name, entry in cell["acquisitions"].items()
}

DEFOCUSED_IDPC = (
    "iDPC assumes a probe small against the lattice; defocused by 10-20 nm it spans the "
    "4-cell window and the CoM no longer follows the potential's gradient"
)
FOCUSED_C10 = (
    "in focus the BF images hardly shift and differ in more than a shift (weak-phase "
    "contrast changes across the disk): the shifts scatter by about 1 scan px about the fit "
    "and C10 is not determined to 2 A (its own standard error is 2-4 A); neither a finer "
    "upsampling (64) nor more iterations, a low-pass or a smaller disk changed that"
)
FOCUSED_THICK_ROTATION = (
    "in focus through 10 nm the shifts are not negligible (fitted C10 about +27 A, near the "
    "slab's middle) but scatter by 2 px: the rotation is determined only to about 9 degrees "
    "(its standard error), not 1"
)
SLAB_MIDDLE = (
    "the shifts (aligned around the given defocus, coarse to fine) measure C10 near the "
    "slab's middle, not at the entrance surface the criterion takes: the effective plane of "
    "a thick or strongly defocused slab, which the 4 nm cells place at the entrance"
)
THICK = (
    "10 nm of SrTiO3 channels the beam: the projected potential is not the exit wave, and "
    "the fitted phase (which agrees better with the iDPC phase of the same data) "
    "correlates less with it"
)
#: (acquisition, criterion) -> reason: the failures of the recorded matrix, each
#: explained; none is a criterion relaxed.
KNOWN_FAILURES: dict[tuple[str, str], str] = {
    ("t10nm_df0_rot0_high", "parallax_c10"): FOCUSED_C10,
    ("t10nm_df0_rot0_high", "parallax_rotation"): FOCUSED_THICK_ROTATION,
    ("t10nm_df0_rot0_high", "ssb_fitted_not_worse"): THICK,
    ("t10nm_df20nm_rot15_high", "idpc_r"): DEFOCUSED_IDPC,
    ("t10nm_df20nm_rot15_high", "parallax_c10"): SLAB_MIDDLE,
    ("t10nm_df20nm_rot15_low", "parallax_c10"): SLAB_MIDDLE,
    ("t1nm_df0_rot0_high", "parallax_c10"): FOCUSED_C10,
    ("t1nm_df0_rot0_low", "parallax_c10"): FOCUSED_C10,
    ("t2nm_df10nm_rect_rot15_high", "idpc_r"): DEFOCUSED_IDPC,
    ("t2nm_df10nm_rect_rot15_high", "parallax_c10"): SLAB_MIDDLE,
    ("t4nm_dfm20nm_rot0_high", "idpc_r"): DEFOCUSED_IDPC,
}
#: (acquisition, criterion) -> reason: criteria the data cannot decide, reported as
#: "undetermined" by the verdict (neither pass nor fail).
UNDETERMINED: dict[tuple[str, str], str] = {
    ("t1nm_df0_rot0_high", "parallax_rotation"): (
        "in focus the shifts vanish and carry no rotation: the fit's standard error of the "
        "rotation exceeds 19 degrees and it reports the rotation undetermined"
    ),
    ("t1nm_df0_rot0_low", "parallax_rotation"): (
        "in focus the shifts vanish and carry no rotation: the fit's standard error of the "
        "rotation exceeds 19 degrees and it reports the rotation undetermined"
    ),
}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_fixtures_match_their_recorded_sha256():
    recorded = TRUTH["sha256"]
    assert set(recorded) == {p.name for p in ROOT.iterdir() if p.suffix in (".h5", ".npz")}
    for name, digest in recorded.items():
        assert _sha256(ROOT / name) == digest, name


def _table_module():
    spec = importlib.util.spec_from_file_location(
        "validation_table", REPO / "tools" / "validation_table.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_record_verdicts_and_docs_tables_follow_from_the_record():
    report = json.loads(RECORD.read_text())
    assert report["benchmark"] == "compute-validate"
    assert {a["id"] for a in report["acquisitions"]} == set(ACQUISITIONS)
    for acquisition in report["acquisitions"]:
        fitted = acquisition["fitted"]
        assert fitted["criteria"] == compute_validate.CRITERIA
        assert fitted["verdict"] == compute_validate.verdict(fitted), acquisition["id"]
    table = _table_module().render(report)
    for page in ("compute.md", "ssb.md"):
        text = (REPO / "docs" / page).read_text()
        assert f"<!-- validation-table:start -->\n{table}\n<!-- validation-table:end -->" in text


def _scores(name: str) -> dict:
    path = ROOT / ACQUISITIONS[name][1]["master"]
    with load(path) as acq, warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)
        state = {"path": path, "acq": acq, "frames": open_frames(acq)}
        for stage in (
            compute_validate.validate_truth,
            compute_validate.validate_dpc,
            compute_validate.validate_parallax,
            compute_validate.validate_ssb,
        ):
            stage(state)
        return compute_validate.validate_fitted(state)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ACQUISITIONS))
def test_matrix_meets_the_criteria(name):
    scores = _scores(name)
    recorded = {a["id"]: a["fitted"] for a in json.loads(RECORD.read_text())["acquisitions"]}
    # the record is reproducible: the same scores on a rerun
    assert scores["idpc"]["r"] == pytest.approx(recorded[name]["idpc"]["r"], abs=1e-9)
    assert scores["ssb_fitted"]["r"] == pytest.approx(recorded[name]["ssb_fitted"]["r"], abs=1e-6)
    assert scores["parallax_c10_a"] == pytest.approx(recorded[name]["parallax_c10_a"], abs=1e-9)
    for criterion, outcome in scores["verdict"].items():
        if (name, criterion) in UNDETERMINED:
            assert outcome == "undetermined", f"{name} {criterion}: update UNDETERMINED"
        elif (name, criterion) in KNOWN_FAILURES:
            assert outcome == "fail", f"{name} {criterion} now passes: update KNOWN_FAILURES"
        else:
            assert outcome == "pass", (name, criterion, scores)
    if ACQUISITIONS[name][0] == "t4nm_df3nm":  # the independent check's sample
        assert scores["ssb_fitted"]["r"] >= scores["ssb_uncorrected"]["r"]
    # the fit never hands back a worse image without saying so
    check = scores["ssb_fit_check"]
    if "unchecked" not in check:
        worse = check["r_fitted"] < check["r_uncorrected"] - check["margin"]
        assert check["fitted_worse"] == worse


@pytest.mark.slow
def test_each_wrong_parameter_is_flagged_on_the_matrix():
    """The independent check's sample: 3.9 nm, 300 kV, 25 mrad, 30 A defocus."""
    cell = TRUTH["cells"]["t4nm_df3nm"]
    path = ROOT / cell["acquisitions"]["t4nm_df3nm_rot0_high"]["master"]
    right = dict(
        energy_ev=TRUTH["energy_ev"],
        convergence_mrad=TRUTH["semiangle_mrad"],
        mrad_per_pixel=cell["mrad_per_pixel"],
        scan_step_angstrom=TRUTH["scan_step_a"],
    )
    inverse = cell["mrad_per_pixel"] * 1e-3 / cell["wavelength_a"]
    with load(path) as acq:
        with warnings.catch_warnings():
            warnings.simplefilter("error", CalibrationWarning)
            assert all(
                f["status"] == "ok"
                for f in dpc(acq, calibration=Calibration(**right)).calibration_check
            )
        with pytest.raises(CalibrationError, match="BF disk radius"):  # semi-angle 2x
            dpc(acq, calibration=Calibration(**{**right, "convergence_mrad": 50.0}))
        with pytest.warns(CalibrationWarning, match="BF disk radius"):  # 200 kV for 300
            dpc(
                acq,
                calibration=Calibration(
                    **{**right, "energy_ev": 200e3, "mrad_per_pixel": None},
                    inverse_angstrom_per_pixel=inverse,
                ),
                accept_calibration_mismatch=True,
            )
        with pytest.warns(CalibrationWarning, match="nm"):  # step in nm
            dpc(acq, calibration=Calibration(**{**right, "scan_step_angstrom": 0.0488}))
        with pytest.raises(CalibrationError, match="rotation"):  # 90 degrees off
            dpc(acq, calibration=Calibration(**right), rotation_deg=90.0)
