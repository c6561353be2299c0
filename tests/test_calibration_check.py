"""Given parameters checked against the data (issue 34, defect 3): each rule and the wrong
input it catches, through the API and the CLI, on the abTEM SrTiO3 fixture (200 kV,
20 mrad, 2.1408 mrad/px: a BF radius of 9.34 px; scan step 0.488 A; rotation 12 deg)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from quantem.stem4d.dpc import dpc
from quantem.stem4d.errors import CalibrationError, CalibrationWarning
from quantem.stem4d.io import load
from quantem.stem4d.parallax import parallax
from quantem.stem4d.ssb import Calibration as SSBCalibration
from quantem.stem4d.ssb import prepare as ssb_prepare
from quantem.stem4d.virtual import Calibration
from quantem.stem4d.virtual.calibration_check import (
    RADIUS_GROSS,
    RADIUS_TOLERANCE,
    check_bf_radius,
    check_rotation,
    check_scan_step,
    expected_bf_radius_px,
)

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "srtio3"
TRUTH = json.loads((DATA / "srtio3_truth.json").read_text())
MASTER = DATA / TRUTH["datasets"]["defocus"]["files"]["high"]
ENERGY = TRUTH["energy_ev"]
SEMIANGLE = TRUTH["semiangle_mrad"]
MRAD = TRUTH["datasets"]["defocus"]["mrad_per_pixel"]
STEP = TRUTH["datasets"]["defocus"]["scan_step_angstrom"]
ROTATION = TRUTH["rotation_deg"]


def wavelength(energy_ev: float) -> float:
    return 12398.419843320026 / math.sqrt(energy_ev * (energy_ev + 2 * 510998.95))


#: The fixture's reciprocal-space pixel size (1/A), as abTEM and py4DSTEM state it.
INVERSE_A = MRAD * 1e-3 / wavelength(ENERGY)


def good(**changes) -> Calibration:
    values = dict(
        energy_ev=ENERGY, convergence_mrad=SEMIANGLE, mrad_per_pixel=MRAD, scan_step_angstrom=STEP
    )
    values.update(changes)
    return Calibration(**values)


@pytest.fixture(scope="module")
def acq():
    with load(MASTER) as loaded:
        yield loaded


# -- the rules on numbers -----------------------------------------------------------------
def test_expected_radius_from_either_sampling():
    assert expected_bf_radius_px(good()) == pytest.approx(SEMIANGLE / MRAD)
    inverse = good(mrad_per_pixel=None, inverse_angstrom_per_pixel=INVERSE_A)
    assert expected_bf_radius_px(inverse) == pytest.approx(SEMIANGLE / MRAD, rel=1e-9)
    # with a reciprocal-space sampling the radius depends on the energy: 300 kV for 200 kV
    wrong_kv = good(energy_ev=300e3, mrad_per_pixel=None, inverse_angstrom_per_pixel=INVERSE_A)
    assert expected_bf_radius_px(wrong_kv) == pytest.approx(
        SEMIANGLE / MRAD * wavelength(ENERGY) / wavelength(300e3), rel=1e-9
    )
    assert expected_bf_radius_px(Calibration(convergence_mrad=20.0)) is None


def test_radius_thresholds():
    cal = good()
    expected = SEMIANGLE / MRAD
    assert check_bf_radius(cal, expected * (1 + RADIUS_TOLERANCE / 2)).status == "ok"
    assert check_bf_radius(cal, expected * (1 + 2 * RADIUS_TOLERANCE)).status == "warning"
    assert check_bf_radius(cal, expected / 2).status == "error"
    assert check_bf_radius(cal, expected * (1 + RADIUS_GROSS * 1.01)).status == "error"


def test_scan_step_in_nm_is_flagged():
    assert check_scan_step(good()).status == "ok"
    finding = check_scan_step(good(scan_step_angstrom=STEP / 10))  # 0.0488: nm typed as A
    assert finding.status == "warning" and "nm" in finding.message


def test_rotation_rule_is_modulo_the_half_turn():
    assert check_rotation(12.0, False, 192.5, False).status == "ok"
    assert check_rotation(20.0, False, 12.0, False).status == "warning"
    assert check_rotation(102.0, False, 12.0, False).status == "error"
    assert check_rotation(12.0, True, 12.0, False).status == "error"


# -- the wrong inputs on data, through the API ---------------------------------------------
def test_right_parameters_pass_without_a_warning(acq):
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationWarning)
        result = dpc(acq, calibration=good(), rotation_deg=ROTATION)
    assert [f["status"] for f in result.calibration_check] == ["ok", "ok", "ok"]


def test_semiangle_twice_too_large_is_refused_unless_accepted(acq):
    with pytest.raises(CalibrationError, match=r"BF disk radius.*accept-calibration-mismatch"):
        dpc(acq, calibration=good(convergence_mrad=2 * SEMIANGLE))
    with pytest.warns(CalibrationWarning, match="BF disk radius"):
        result = dpc(
            acq, calibration=good(convergence_mrad=2 * SEMIANGLE), accept_calibration_mismatch=True
        )
    assert result.calibration_check[0]["rule"] == "bf_radius"
    assert result.calibration_check[0]["status"] == "error"


def test_semiangle_a_little_off_is_a_warning(acq):
    with pytest.warns(CalibrationWarning, match="BF disk radius"):
        result = dpc(acq, calibration=good(convergence_mrad=1.15 * SEMIANGLE))
    assert result.calibration_check[0]["status"] == "warning"


def test_wrong_voltage_with_a_reciprocal_sampling_is_flagged(acq):
    # 300 kV for 200 kV shrinks lambda by 21%: the predicted radius grows by 27%
    cal = good(energy_ev=300e3, mrad_per_pixel=None, inverse_angstrom_per_pixel=INVERSE_A)
    with pytest.warns(CalibrationWarning, match="BF disk radius"):
        result = dpc(acq, calibration=cal, accept_calibration_mismatch=True)
    assert result.calibration_check[0]["status"] in ("warning", "error")
    right = good(mrad_per_pixel=None, inverse_angstrom_per_pixel=INVERSE_A)
    assert dpc(acq, calibration=right).calibration_check[0]["status"] == "ok"


def test_scan_step_in_nm_warns_on_data(acq):
    with pytest.warns(CalibrationWarning, match="nm"):
        result = dpc(acq, calibration=good(scan_step_angstrom=STEP / 10))
    assert {f["rule"]: f["status"] for f in result.calibration_check}["scan_step"] == "warning"


def test_rotation_off_by_90_is_refused(acq):
    with pytest.raises(CalibrationError, match="rotation"):
        dpc(acq, calibration=good(), rotation_deg=ROTATION + 90)


@pytest.mark.slow
def test_parallax_and_ssb_catch_the_same_wrong_inputs(acq):
    with pytest.raises(CalibrationError, match="parallax: BF disk radius"):
        parallax(acq, calibration=good(convergence_mrad=2 * SEMIANGLE), max_shift=3.0)
    data = np.asarray(acq.array)
    ssb_cal = dict(energy_ev=ENERGY, semiangle_mrad=SEMIANGLE, scan_step_a=STEP)
    with pytest.raises(CalibrationError, match="ssb: BF disk radius"):
        ssb_prepare(
            data,
            SSBCalibration(
                **{**ssb_cal, "semiangle_mrad": 2 * SEMIANGLE}, detector_sampling_mrad=MRAD
            ),
        )
    with pytest.raises(CalibrationError, match="ssb: rotation"):
        ssb_prepare(data, SSBCalibration(**ssb_cal, rotation_deg=ROTATION + 90))
    prepared = ssb_prepare(data, SSBCalibration(**ssb_cal, rotation_deg=ROTATION))
    assert {f["rule"]: f["status"] for f in prepared.calibration_check}["rotation"] == "ok"


# -- the CLI ---------------------------------------------------------------------------------
def _cli(out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    command = [sys.executable, "-m", "harness", "run", "compute", "dpc", "--source", str(MASTER)]
    command += ["--backend", "cpu", "--reps", "1", "--output-dir", str(out)]
    command += ["--voltage-kv", str(ENERGY / 1e3), "--mrad-per-pixel", str(MRAD)]
    command += ["--scan-step", str(STEP), *extra]
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env)


@pytest.mark.slow
def test_cli_refuses_a_gross_mismatch_and_records_an_accepted_one(tmp_path):
    refused = _cli(tmp_path / "refused", "--convergence-mrad", str(2 * SEMIANGLE))
    assert refused.returncode != 0 and "Traceback" not in refused.stdout + refused.stderr
    assert "BF disk radius" in " ".join((refused.stdout + refused.stderr).split())
    accepted = _cli(
        tmp_path / "accepted",
        "--convergence-mrad",
        str(2 * SEMIANGLE),
        "--accept-calibration-mismatch",
    )
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert "calibration error: BF disk radius" in " ".join(accepted.stdout.split())
    report = json.loads((tmp_path / "accepted" / "compute.json").read_text())
    check = report["acquisitions"][0]["fitted"]["calibration_check"]
    assert check[0]["rule"] == "bf_radius" and check[0]["status"] == "error"
