"""SSB's rotation: given, or quantem.stem4d.dpc's curl-minimising estimate (quantem/stem4d/ssb/rotation.py).

On the compute issue's abTEM fixtures (tests/data/srtio3: SrTiO3 [001], 200 kV, 20 mrad,
the detector turned by 12 degrees against the scan, a known defocus), the estimated
rotation must give the fit and the object that the given one gives.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from _ssb_abtem import calibration as cropped_calibration
from _ssb_abtem import load as load_cropped
from _ssb_helpers import pearson

import quantem.stem4d.io
from quantem.stem4d.dpc import dpc
from quantem.stem4d.errors import CalibrationError
from quantem.stem4d.ssb import (
    Calibration,
    estimate_rotation,
    fit_aberrations,
    fit_regions,
    loss,
    prepare,
)
from quantem.stem4d.ssb import reconstruct as ssb_reconstruct
from quantem.stem4d.virtual import Calibration as DPCCalibration

DATA = Path(__file__).parent / "data" / "srtio3"
TRUTH = json.loads((DATA / "srtio3_truth.json").read_text())


def calibration(name: str, **extra) -> Calibration:
    info = TRUTH["datasets"][name]
    return Calibration(
        energy_ev=TRUTH["energy_ev"],
        semiangle_mrad=TRUTH["semiangle_mrad"],
        scan_step_a=info["scan_step_angstrom"],
        detector_sampling_mrad=info["mrad_per_pixel"],
        **extra,
    )


def load(name: str, dose: str) -> np.ndarray:
    with quantem.stem4d.io.load(DATA / TRUTH["datasets"][name]["files"][dose]) as acq:
        return np.asarray(acq.array).copy()


@pytest.fixture(scope="module")
def defocus_high():
    return load("defocus", "high")


def test_without_a_rotation_the_dpc_estimate_is_used_and_recorded(defocus_high):
    estimated = prepare(defocus_high, calibration("defocus"))
    rotation = estimated.rotation
    assert rotation.source == "dpc"
    assert abs(rotation.rotation_deg - TRUTH["rotation_deg"]) < 0.5, rotation
    assert rotation.transpose is False and rotation.half_turn_flipped is not None
    assert 0 <= rotation.residual_curl < rotation.residual_curl_other_transpose
    # The calibration the reconstruction used carries the value, and says so.
    assert estimated.calibration.rotation_deg == rotation.rotation_deg
    assert estimated.calibration.to_dict()["rotation_deg"] == rotation.rotation_deg
    assert rotation.to_dict()["source"] == "dpc"
    # It is quantem.stem4d.dpc's own estimate (the same CoM, curl fit and half-turn rule).
    with quantem.stem4d.io.load(DATA / TRUTH["datasets"]["defocus"]["files"]["high"]) as acq:
        reference = dpc(
            acq,
            calibration=DPCCalibration(
                energy_ev=TRUTH["energy_ev"],
                mrad_per_pixel=TRUTH["datasets"]["defocus"]["mrad_per_pixel"],
                scan_step_angstrom=TRUTH["datasets"]["defocus"]["scan_step_angstrom"],
            ),
        )
    assert rotation.rotation_deg == reference.rotation_deg
    assert rotation.transpose == reference.rotation.transpose
    given = prepare(defocus_high, calibration("defocus", rotation_deg=12.0))
    assert given.rotation.source == "given" and given.rotation.rotation_deg == 12.0
    assert given.rotation.residual_curl is None


def test_estimated_rotation_gives_the_given_rotations_fit(defocus_high):
    expected_c10 = TRUTH["datasets"]["defocus"]["C10_mid_plane_angstrom"]
    fits, prepared = {}, {}
    for name, extra in (("given", {"rotation_deg": TRUTH["rotation_deg"]}), ("dpc", {})):
        prepared[name] = prepare(defocus_high, calibration("defocus", **extra))
        fits[name] = fit_aberrations(prepared[name], n_trials=60, seed=0)
    given, estimated = (fits[n].aberrations.to_polar() for n in ("given", "dpc"))
    # The same fit within 1 Angstrom of C10 and C12 (the fixture's tolerance is 2 nm).
    assert abs(estimated["C10"] - given["C10"]) < 1.0, (given, estimated)
    assert abs(estimated["C12"] - given["C12"]) < 1.0, (given, estimated)
    assert abs(fits["dpc"].loss - fits["given"].loss) < 1e-3
    assert abs(given["C10"] - expected_c10) < 20.0, given
    phases = [ssb_reconstruct(prepared[n], fits[n].aberrations).phase for n in ("given", "dpc")]
    assert pearson(*phases) > 0.999


def test_a_half_turned_detector_is_resolved(defocus_high):
    cal = calibration("defocus")
    upright = prepare(defocus_high, cal)
    turned = prepare(np.ascontiguousarray(np.rot90(defocus_high, k=2, axes=(2, 3))), cal)
    # np.rot90 twice maps detector (r, c) to (N-1-r, N-1-c): a half turn more.
    difference = (turned.rotation.rotation_deg - upright.rotation.rotation_deg) % 360.0
    assert abs(difference - 180.0) < 0.5, (upright.rotation, turned.rotation)
    guess = calibration("defocus", rotation_deg=TRUTH["rotation_deg"])
    aberrations = fit_aberrations(prepare(defocus_high, guess), n_trials=30, seed=0).aberrations
    # Resolved: the same loss and the same (not the conjugate) object.
    assert abs(loss(turned, aberrations) - loss(upright, aberrations)) < 1e-3
    phases = [ssb_reconstruct(p, aberrations).phase for p in (upright, turned)]
    assert pearson(*phases) > 0.99


def test_swapped_detector_axes_are_found_and_undone(defocus_high):
    cal = calibration("defocus")
    upright = prepare(defocus_high, cal)
    swapped = prepare(np.ascontiguousarray(np.swapaxes(defocus_high, 2, 3)), cal)
    assert swapped.rotation.transpose is True and upright.rotation.transpose is False
    assert abs(swapped.rotation.rotation_deg - upright.rotation.rotation_deg) < 1e-6
    # The same detector angles, in another pixel order; the same object.
    for name in ("kx", "ky"):
        np.testing.assert_allclose(
            np.sort(getattr(swapped, name)), np.sort(getattr(upright, name)), atol=1e-7
        )
    guess = calibration("defocus", rotation_deg=TRUTH["rotation_deg"])
    aberrations = fit_aberrations(prepare(defocus_high, guess), n_trials=30, seed=0).aberrations
    assert abs(loss(swapped, aberrations) - loss(upright, aberrations)) < 1e-5
    phases = [ssb_reconstruct(p, aberrations).phase for p in (upright, swapped)]
    assert pearson(*phases) > 0.9999


def test_regional_fits_share_the_whole_scans_estimate(defocus_high):
    cal = calibration("defocus")
    whole = estimate_rotation(defocus_high, cal)
    assert whole.source == "dpc"
    fits = fit_regions(defocus_high, cal, (2, 1), n_trials=4, seed=0, refine=False)
    assert len(fits) == 2
    # Each region was prepared with the whole scan's rotation, not its own estimate.
    region = prepare(defocus_high, cal, scan_region=fits[0].region, rotation=whole)
    assert region.rotation == whole
    own = prepare(defocus_high, cal, scan_region=fits[0].region)
    assert own.rotation.rotation_deg != whole.rotation_deg


def test_an_unreliable_estimate_is_refused_not_used():
    """The SSB fixtures' detector is cropped to the BF disk: the CoM field is not a phase
    gradient (relative residual curl about 0.67) and its best angle is 12 degrees off."""
    free = dataclasses.replace(cropped_calibration("thin"), rotation_deg=None)
    with pytest.raises(CalibrationError, match=r"not reliable.*give the rotation"):
        prepare(load_cropped("thin", "high"), free)
    assert (
        prepare(load_cropped("thin", "high"), cropped_calibration("thin")).rotation.source
        == "given"
    )


def test_bad_rotations_are_refused():
    with pytest.raises(ValueError, match="rotation_deg"):
        calibration("focus", rotation_deg=float("nan"))
    with pytest.raises(ValueError, match="rotation_deg"):
        calibration("focus", rotation_deg="twelve")
    with pytest.raises(ValueError, match="transpose"):
        calibration("focus", transpose="yes")
