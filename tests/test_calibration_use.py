"""Every workload applies each given calibration or refuses it by name (issue 34, defect 1).

Each workload gets every combination of beam energy, convergence angle, detector sampling
and scan step on the abTEM SrTiO3 fixture (200 kV, 20 mrad, 2.1408 mrad/px, 0.488 A);
a run either refuses with a CalibrationError/UsageError naming a parameter, or states
its units and applies the scale, checked against an independent wavelength formula.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from harness.errors import UsageError
from harness.run.compute import virtual as compute_virtual
from harness.run.compute.ssb import ssb_prepare
from harness.run.compute.workloads import ComputeParameters
from quantem.stem4d.detector import prepare
from quantem.stem4d.dpc import dpc
from quantem.stem4d.errors import CalibrationError
from quantem.stem4d.io import load
from quantem.stem4d.parallax import parallax
from quantem.stem4d.virtual import Calibration, open_frames

DATA = Path(__file__).parent / "data" / "srtio3"
TRUTH = json.loads((DATA / "srtio3_truth.json").read_text())
VALUES = {
    "energy_ev": TRUTH["energy_ev"],
    "convergence_mrad": TRUTH["semiangle_mrad"],
    "mrad_per_pixel": TRUTH["datasets"]["defocus"]["mrad_per_pixel"],
    "scan_step_angstrom": TRUTH["datasets"]["defocus"]["scan_step_angstrom"],
}
COMBINATIONS = [
    {name: VALUES[name] for name, on in zip(VALUES, flags, strict=True) if on}
    for flags in itertools.product((False, True), repeat=len(VALUES))
]
NAMES = "|".join([*VALUES, "angular pixel size", "energy", "scan step", "--[a-z-]+"])


def wavelength(energy_ev: float) -> float:
    """Relativistic wavelength (A) from h c / sqrt(E (E + 2 m c^2)), CODATA constants."""
    return 12398.419843320026 / math.sqrt(energy_ev * (energy_ev + 2 * 510998.95))


def combination_id(given: dict) -> str:
    return "+".join(given) or "none"


@pytest.fixture(scope="module")
def defocus_high():
    with load(DATA / TRUTH["datasets"]["defocus"]["files"]["high"]) as acq:
        yield acq


def _refused(exc: Exception) -> None:
    assert re.search(NAMES, str(exc)), str(exc)


@pytest.mark.slow
@pytest.mark.parametrize("given", COMBINATIONS, ids=combination_id)
def test_dpc_applies_or_refuses(given, defocus_high):
    cal = Calibration(**given)
    full = {"energy_ev", "scan_step_angstrom"} <= set(given) and (
        "mrad_per_pixel" in given or "convergence_mrad" in given
    )
    if given and not full:
        with pytest.raises(CalibrationError) as info:
            dpc(defocus_high, calibration=cal)
        _refused(info.value)
        return
    result = dpc(defocus_high, calibration=cal if given else None)
    shift = np.hypot(
        result.com_row - np.nanmean(result.com_row), result.com_col - np.nanmean(result.com_col)
    )
    gradient = np.hypot(result.gradient_row, result.gradient_col)
    if not given:
        assert result.units == {
            "com": "detector px",
            "gradient": "px",
            "phase": "px*px",
            "divergence": "px",
        }
        np.testing.assert_allclose(gradient, shift, rtol=1e-12, atol=1e-12)
        return
    assert result.units["gradient"] == "rad/A" and result.units["phase"] == "rad"
    if "mrad_per_pixel" in given:
        mrad = given["mrad_per_pixel"]
        assert result.calibration["derived"] == []
    else:
        radius = open_frames(defocus_high).disk().radius
        mrad = given["convergence_mrad"] / radius
        assert result.calibration["derived"] == ["bf_radius_px"]
        assert result.calibration["bf_radius_px"] == radius
    scale = 2 * math.pi * mrad * 1e-3 / wavelength(given["energy_ev"])
    np.testing.assert_allclose(gradient, scale * shift, rtol=1e-9, atol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("correct", [False, True])
@pytest.mark.parametrize("given", COMBINATIONS, ids=combination_id)
def test_parallax_applies_or_refuses(given, correct, defocus_high):
    cal = Calibration(**given)
    sampling = "mrad_per_pixel" in given or "convergence_mrad" in given
    energy_used = correct or {"convergence_mrad", "scan_step_angstrom"} <= set(given)
    applies = (
        given
        and sampling
        and "scan_step_angstrom" in given
        and (energy_used if "energy_ev" in given else not correct)
    )
    if not applies:
        with pytest.raises((CalibrationError,)) as info:
            parallax(defocus_high, calibration=cal, max_shift=3.0, correct_aberrations=correct)
        _refused(info.value)
        return
    result = parallax(defocus_high, calibration=cal, max_shift=3.0, correct_aberrations=correct)
    fitted = result.fitted()
    assert fitted["units"]["c10"] == "A" and fitted["units"]["shifts"] == "scan px"
    reference = parallax(
        defocus_high,
        calibration=Calibration(
            mrad_per_pixel=VALUES["mrad_per_pixel"],
            scan_step_angstrom=VALUES["scan_step_angstrom"],
        ),
        max_shift=3.0,
    ).fit
    # C10 is a shift (scan px * step) per unit angle: it scales as 1 / (mrad per pixel).
    if "mrad_per_pixel" in given:
        mrad = given["mrad_per_pixel"]
        assert fitted["calibration"]["derived"] == []
    else:
        mrad = given["convergence_mrad"] / result.stack.radius
        assert fitted["calibration"]["derived"] == ["bf_radius_px"]
    assert result.fit.c10_angstrom == pytest.approx(
        reference.c10_angstrom * VALUES["mrad_per_pixel"] / mrad, rel=1e-9
    )
    assert (result.image_corrected is not None) is correct


def _virtual_state(acq, parameters):
    return {"frames": open_frames(acq), "parameters": parameters}


@pytest.mark.slow
@pytest.mark.parametrize("unit", ["px", "mrad"])
@pytest.mark.parametrize("given", COMBINATIONS, ids=combination_id)
def test_virtual_applies_or_refuses(given, unit, defocus_high):
    inner = 30.0 if unit == "mrad" else None
    parameters = ComputeParameters(**given, unit=unit, inner=inner, outer=50.0 if inner else None)
    state = _virtual_state(defocus_high, parameters)
    cal = parameters.calibration()
    applied = set()
    if unit == "mrad":
        applied = {"mrad_per_pixel", "convergence_mrad"}
    used = (applied | cal.checked()) & set(given)
    sampling = "mrad_per_pixel" in given or "convergence_mrad" in given
    if used != set(given) or (unit == "mrad" and not sampling):
        with pytest.raises(CalibrationError) as info:
            compute_virtual.virtual_disk(state)
            compute_virtual.virtual_detector("df", compute_virtual.df_detector)[1](state)
        _refused(info.value)
        return
    compute_virtual.virtual_disk(state)
    compute_virtual.virtual_detector("df", compute_virtual.df_detector)[1](state)
    fitted = compute_virtual.virtual_fitted(state)
    assert fitted["units"]["df"] == "counts" and fitted["units"]["df_radii"] == unit
    if unit == "mrad":
        mrad = given.get("mrad_per_pixel") or given["convergence_mrad"] / state["disk"].radius
        frames = state["frames"]
        rows, cols = np.indices(frames.detector_shape)
        distance = np.hypot(rows - state["disk"].center[0], cols - state["disk"].center[1])
        ring = (distance >= 30.0 / mrad) & (distance <= 50.0 / mrad) & frames.validity
        np.testing.assert_array_equal(state["df"], prepare(defocus_high).masked_sum_exact(ring))


@pytest.mark.slow
@pytest.mark.parametrize("given", COMBINATIONS, ids=combination_id)
def test_ssb_applies_or_refuses(given, defocus_high):
    parameters = ComputeParameters(**given)
    state = {"parameters": parameters, "acq": defocus_high, "path": None, "backend": "cpu"}
    if not {"energy_ev", "convergence_mrad", "scan_step_angstrom"} <= set(given):
        with pytest.raises(UsageError) as info:
            ssb_prepare(state)
        _refused(info.value)
        return
    ssb_prepare(state)
    prepared = state["ssb"]
    if "mrad_per_pixel" in given:
        expected = (given["mrad_per_pixel"],) * 2
    else:
        expected = (given["convergence_mrad"] / prepared.disk.radius,) * 2
    assert prepared.detector_sampling_mrad == pytest.approx(expected, rel=1e-12)
    assert prepared.wavelength_a == pytest.approx(wavelength(given["energy_ev"]), rel=1e-9)


def test_dpc_with_a_convergence_angle_is_calibrated_not_dropped(defocus_high):
    """The independent check's case: voltage, convergence angle and scan step, no sampling."""
    cal = Calibration(energy_ev=300e3, convergence_mrad=25.0, scan_step_angstrom=0.122)
    result = dpc(defocus_high, calibration=cal)
    assert result.units["gradient"] == "rad/A" and result.units["phase"] == "rad"
    assert result.calibration["derived"] == ["bf_radius_px"]
    with pytest.raises(CalibrationError, match="scan_step_angstrom"):
        dpc(defocus_high, calibration=Calibration(energy_ev=300e3, mrad_per_pixel=1.0))
