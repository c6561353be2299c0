"""The validation matrix (issue 34): fixtures intact, scores recomputed against the fixed
criteria, the record's verdicts and the docs tables derived from the record.

The criteria live in ``harness.run.compute.validate.CRITERIA`` and are not tuned to the
scores. Where a cell fails a criterion for a reason of physics or method that this change
does not fix, it is listed in ``KNOWN_FAILURES`` with the reason and asserted to fail
(strict): a fix shows up as a test to update, never silently. A criterion the data cannot
decide (the parallax rotation or C10 in focus) is in ``UNDETERMINED``, asserted likewise.
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
from quantem.stem4d.parallax.fit import C10_CONSISTENCY_FRACTION
from quantem.stem4d.virtual import Calibration, open_frames

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / "tests" / "data" / "validation"
TRUTH = json.loads((ROOT / "truth.json").read_text())
RECORD = REPO / "docs" / "records" / "compute-validate.json"
STUDY = REPO / "docs" / "records" / "reference-plane-study.json"
ACQUISITIONS = {
    name: (cell_name, entry)
    for cell_name, cell in TRUTH["cells"].items()
    for name, entry in cell["acquisitions"].items()
}

DEFOCUSED_IDPC = (
    "the CoM is the phase gradient averaged over the probe's intensity; defocused by 10-20 nm "
    "(3-6 depths of field lambda / alpha^2) the probe spans the lattice and its transfer at "
    "the lattice's first frequencies falls to about 0.1 and changes sign, so the iDPC phase "
    "keeps little of the potential. Given the defocus, dpc warns (DPCWarning; the record's "
    "idpc_warnings) on exactly these cells (tests/test_dpc_focus.py)"
)
FOCUSED_C10 = (
    "in focus the BF images are not shifted copies of one image (the weak-phase contrast of "
    "the disk-edge pixels is one-sided) and the fitted C10 is no measurement of the defocus: "
    "without noise it is still a few A off for the real sample (about two of its standard "
    "errors) and some 25 A off for the same sample as a weak phase object (dozens of them; "
    "docs/records/reference-plane-study.json); neither a finer upsampling (64) nor more "
    "iterations, a low-pass or a smaller disk changed that"
)
FOCUSED_C10_UNDETERMINED = (
    FOCUSED_C10 + ". The fit says so here: the inner and outer BF images give C10 that "
    "disagree beyond their standard errors and by more than the whole disk's value, and it "
    "reports C10 undetermined"
)
FOCUSED_THICK_C10 = (
    "in focus through 10 nm the BF images are not shifted copies of one image: the fitted "
    "shifts (C10 about +27 A, between the entrance and the slab's middle) scatter by 2 px "
    "about the measured ones, and the images moved by them keep under half the correlation "
    "of their own shifts; the fit reports C10 undetermined (quantem.stem4d.parallax.agreement)"
)
FOCUSED_THICK_ROTATION = (
    "in focus through 10 nm the shifts are not negligible (fitted C10 about +27 A, between "
    "the entrance and the slab's middle) but scatter by 2 px and are not those of one "
    "defocus (C10 is reported undetermined): the fit gives the rotation with a standard "
    "error of about 9 degrees, which it reports, not the 1 degree of the criterion; fitting "
    "only the shifts that stayed inside the search range leaves it at about 6"
)
SLAB_MIDDLE = (
    "the C10 of a thick slab is a depth average, not the entrance surface's that the "
    "simulation sets and the criterion takes; no other plane is a truth either: as a weak "
    "phase object the slabs measure near the middle when the focus lies outside them, but "
    "the real 4 nm slab measures at its entrance, and the study "
    "(docs/records/reference-plane-study.json) finds no plane that holds for every cell"
)
SLAB_MIDDLE_UNDETERMINED = (
    SLAB_MIDDLE + ". Through 10 nm the fit says so: the images moved by the fitted shifts "
    "keep under 0.8 of the correlation of their own shifts (they are not shifted copies of "
    "one image) and it reports C10 undetermined, with a warning; out of focus that is still "
    "a fail"
)
THICK = (
    "10 nm of SrTiO3 channels the beam: the projected potential is not the exit wave. The "
    "fit is right (C10 near the slab's middle; the fitted phase agrees better with the iDPC "
    "phase of the same data), and the same slab simulated as a weak phase object gives a "
    "fitted phase far better than the uncorrected one against the projected potential "
    "(docs/records/reference-plane-study.json)"
)
#: (acquisition, criterion) -> reason: the failures of the recorded matrix, each
#: explained; none is a criterion relaxed.
KNOWN_FAILURES: dict[tuple[str, str], str] = {
    ("t10nm_df0_rot0_high", "parallax_rotation"): FOCUSED_THICK_ROTATION,
    ("t10nm_df0_rot0_high", "ssb_fitted_not_worse"): THICK,
    ("t10nm_df20nm_rot15_high", "idpc_r"): DEFOCUSED_IDPC,
    ("t10nm_df20nm_rot15_high", "parallax_c10"): SLAB_MIDDLE_UNDETERMINED,
    ("t10nm_df20nm_rot15_low", "parallax_c10"): SLAB_MIDDLE_UNDETERMINED,
    ("t2nm_df10nm_rect_rot15_high", "idpc_r"): DEFOCUSED_IDPC,
    ("t2nm_df10nm_rect_rot15_high", "parallax_c10"): SLAB_MIDDLE,
    ("t4nm_dfm20nm_rot0_high", "idpc_r"): DEFOCUSED_IDPC,
}
#: (acquisition, criterion) -> reason: criteria the data cannot decide, reported as
#: "undetermined" by the verdict (neither pass nor fail).
UNDETERMINED: dict[tuple[str, str], str] = {
    ("t10nm_df0_rot0_high", "parallax_c10"): FOCUSED_THICK_C10,
    ("t1nm_df0_rot0_high", "parallax_c10"): FOCUSED_C10_UNDETERMINED,
    ("t1nm_df0_rot0_low", "parallax_c10"): FOCUSED_C10_UNDETERMINED,
    ("t1nm_df0_rot0_high", "parallax_rotation"): (
        "in focus the shifts vanish and carry no rotation: the fit's standard error of the "
        "rotation exceeds 19 degrees and it reports the rotation undetermined"
    ),
    ("t1nm_df0_rot0_low", "parallax_rotation"): (
        "in focus the shifts vanish and carry no rotation: the fit's standard error of the "
        "rotation exceeds 19 degrees and it reports the rotation undetermined"
    ),
}


def _study(cell: str, scale: float) -> dict:
    results = json.loads(STUDY.read_text())["results"]
    return next(r for r in results if r["cell"] == cell and r["scale"] == scale)


def test_the_reasons_rest_on_the_reference_plane_study():
    """What KNOWN_FAILURES says of thick slabs and of focus, checked against the study's
    noise-free simulations (tools/reference_plane_study.py), each as the real SrTiO3 (1) and
    as a weak phase object (0.05)."""
    # THICK: at 10 nm in focus the fit makes the real slab's image worse against the
    # projected potential, the weak-phase slab's much better; its C10 is near the middle.
    real, weak = _study("t10nm_df0", 1.0), _study("t10nm_df0", 0.05)
    assert real["ssb_fitted"]["r"] < real["ssb_uncorrected"]["r"] - 0.02
    assert weak["ssb_fitted"]["r"] > weak["ssb_uncorrected"]["r"] + 0.05
    assert abs(real["ssb_fitted_c10_a"] - real["c10_mid_plane_a"]) < 0.1 * real["thickness_a"]

    # SLAB_MIDDLE and docs/ssb.md "Reference plane": the weak-phase slabs focused outside
    # themselves measure nearer their middle in both methods; the weak 4 nm slab focused
    # inside it measures near its entrance in parallax, between the planes in SSB; the real
    # 4 nm slab at its entrance in parallax and nearer its middle in SSB.
    def nearer_middle(study, key):
        value = study[key]
        return abs(value - study["c10_mid_plane_a"]) < abs(value - study["c10_entrance_a"])

    for cell in ("t2nm_df10nm_rect", "t4nm_dfm20nm", "t10nm_df20nm"):
        for key in ("parallax_c10_a", "ssb_fitted_c10_a"):
            assert nearer_middle(_study(cell, 0.05), key), (cell, key)
    weak_four, four = _study("t4nm_df3nm", 0.05), _study("t4nm_df3nm", 1.0)
    assert abs(weak_four["parallax_c10_a"] - weak_four["c10_entrance_a"]) < 2.0
    assert weak_four["c10_entrance_a"] < weak_four["ssb_fitted_c10_a"] < four["c10_mid_plane_a"]
    assert abs(four["parallax_c10_a"] - four["c10_entrance_a"]) < 2.0
    assert nearer_middle(four, "ssb_fitted_c10_a")
    # FOCUSED_C10: in focus, without noise, the fitted C10 misses the truth beyond the
    # criterion's 2 A, the weak-phase sample by over ten of its own standard errors, and the
    # two in opposite directions.
    for scale, errors in ((1.0, 1.0), (0.05, 10.0)):
        focus = _study("t1nm_df0", scale)
        error = abs(focus["parallax_c10_a"] - focus["c10_entrance_a"])
        assert error > max(2.0, errors * focus["parallax_c10_uncertainty_a"]), scale
    assert (
        _study("t1nm_df0", 1.0)["parallax_c10_a"] < 0 < _study("t1nm_df0", 0.05)["parallax_c10_a"]
    )
    # The fit's halves check (docs/compute.md, the parallax fit): in focus the inner and
    # outer halves of the real sample disagree beyond the whole C10, those of the weak-phase
    # sample by over a fifth of it (the study's `parallax_c10_determined` predates that
    # bound: tests/test_parallax_focus.py checks the fit on that sample), those of the slabs
    # focused outside them by under a tenth.
    assert not _study("t1nm_df0", 1.0)["parallax_c10_determined"]

    def halves_gap(study):
        gap = abs(study["parallax_c10_inner_a"] - study["parallax_c10_outer_a"])
        return gap / abs(study["parallax_c10_a"])

    assert halves_gap(_study("t1nm_df0", 0.05)) > C10_CONSISTENCY_FRACTION
    for cell in ("t2nm_df10nm_rect", "t4nm_dfm20nm", "t10nm_df20nm"):
        assert halves_gap(_study(cell, 0.05)) < C10_CONSISTENCY_FRACTION / 2, cell


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
    # iDPC's failures are warned about (given the defocus), and nothing else is
    if "idpc_r" in scores["verdict"]:
        assert bool(scores["idpc_warnings"]) == (scores["verdict"]["idpc_r"] == "fail")
    assert scores["idpc_warnings"] == recorded[name]["idpc_warnings"]
    assert scores["parallax_c10_determined"] == recorded[name]["parallax_c10_determined"]
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
