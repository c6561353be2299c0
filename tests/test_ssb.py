"""SSB on the CPU against an independent weak-phase forward model (tests/_ssb_helpers.py)."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest
from _ssb_helpers import pearson, simulate

from quantem.stem4d.ssb import (
    Aberrations,
    Calibration,
    chi,
    fit_aberrations,
    fit_regions,
    loss,
    prepare,
    reconstruct,
    sideband_sums,
    split_regions,
)
from quantem.stem4d.ssb.reconstruct import select_sums

POLAR = {"C10": 50.0, "C12": 20.0, "phi12": math.radians(30.0)}
TRUE = Aberrations.from_polar(**POLAR)


@pytest.fixture(scope="module")
def clean():
    data, calibration, truth = simulate(polar=POLAR)
    return prepare(data, calibration), truth


@pytest.fixture(scope="module")
def noisy():
    data, calibration, truth = simulate(polar=POLAR, dose=20000, seed=3)
    return data, calibration, truth


def test_true_aberrations_reconstruct_the_phase_object(clean):
    prepared, truth = clean
    right = reconstruct(prepared, TRUE)
    wrong = reconstruct(prepared, Aberrations())
    assert right.loss < 1e-3 < 0.5 < wrong.loss
    assert pearson(right.phase, truth) > 0.999
    assert pearson(wrong.phase, truth) < 0.6
    # The phase is the object's phase, not only correlated with it: sigma * V, mean removed.
    assert np.allclose(right.phase - right.phase.mean(), truth - truth.mean(), atol=0.01)
    assert right.object.dtype == np.complex64 and right.phase.dtype == np.float32


def test_loss_is_smallest_at_the_simulated_coefficients(clean):
    prepared, _ = clean
    best = loss(prepared, TRUE)
    for name, delta in (("C10", 5.0), ("C10", -5.0), ("C12a", 5.0), ("C12b", -5.0)):
        assert loss(prepared, TRUE.replace(**{name: getattr(TRUE, name) + delta})) > best
    # The opposite sign of defocus is not a mirror solution.
    assert loss(prepared, TRUE.replace(C10=-TRUE.C10)) > 0.5


def test_sums_do_not_depend_on_the_block_size(clean):
    prepared, _ = clean
    whole = sideband_sums(prepared, TRUE)
    small = sideband_sums(prepared, TRUE, block_bytes=1)
    assert whole.tobytes() == small.tobytes()


def test_chi_polynomial_equals_the_polar_formula():
    rng = np.random.default_rng(1)
    polar = {
        "C10": 31.0,
        "C12": 12.0,
        "phi12": 0.4,
        "C21": 900.0,
        "phi21": 2.1,
        "C23": 400.0,
        "phi23": 0.7,
        "C30": 2.0e4,
    }
    kx, ky = rng.uniform(-0.03, 0.03, size=(2, 200))
    a, phi = np.hypot(kx, ky), np.arctan2(ky, kx)
    wavelength = 0.025
    expected = (
        2
        * np.pi
        / wavelength
        * (
            a**2 / 2 * (polar["C10"] + polar["C12"] * np.cos(2 * (phi - polar["phi12"])))
            + a**3
            / 3
            * (
                polar["C21"] * np.cos(phi - polar["phi21"])
                + polar["C23"] * np.cos(3 * (phi - polar["phi23"]))
            )
            + a**4 / 4 * polar["C30"]
        )
    )
    got = chi(kx, ky, Aberrations.from_polar(**polar), wavelength, np)
    assert np.allclose(got, expected, rtol=1e-12, atol=1e-12)
    back = Aberrations.from_polar(**polar).to_polar()
    for name, value in polar.items():
        assert back[name] == pytest.approx(value, rel=1e-12)


@pytest.mark.slow
def test_fit_recovers_defocus_and_astigmatism(noisy):
    data, calibration, truth = noisy
    prepared = prepare(data, calibration)
    result = fit_aberrations(prepared, n_trials=60, seed=1)
    polar = result.aberrations.to_polar()
    assert abs(polar["C10"] - POLAR["C10"]) < 3.0
    assert abs(polar["C12"] - POLAR["C12"]) < 3.0
    assert abs(math.degrees(polar["phi12"] - POLAR["phi12"])) < 5.0
    assert result.n_trials == 60
    assert result.n_evaluations == 60 + result.refine["evaluations"]
    assert [s["stage"] for s in result.trajectory[:61]] == ["search"] * 60 + ["refine"]
    assert result.loss <= result.search_loss
    assert result.loss == min(s["loss"] for s in result.trajectory)
    assert pearson(reconstruct(prepared, result.aberrations).phase, truth) > 0.95


def _object_hash(prepared, aberrations) -> str:
    return hashlib.sha256(reconstruct(prepared, aberrations).object.tobytes()).hexdigest()


def test_same_seed_same_trajectory_and_object(noisy):
    data, calibration, _ = noisy
    runs = []
    for _ in range(2):
        prepared = prepare(data, calibration)
        result = fit_aberrations(prepared, n_trials=12, seed=7, refine_max_evaluations=20)
        runs.append(
            (
                result.trajectory_sha256(),
                _object_hash(prepared, result.aberrations),
                result.to_json(),
            )
        )
    assert runs[0] == runs[1]
    record = json.loads(runs[0][2])
    assert record["seed"] == 7 and record["n_trials"] == 12
    assert record["n_evaluations"] == len(record["trajectory"]) > 12
    assert record["trajectory_sha256"] == runs[0][0]
    assert set(record["aberrations_polar"]) >= {"C10", "C12", "phi12", "C21", "phi21", "C30"}
    other = fit_aberrations(prepare(data, calibration), n_trials=12, seed=8, refine=False)
    assert other.trajectory_sha256() != runs[0][0]


def test_regional_fits_each_find_the_probe(noisy):
    data, calibration, _ = noisy
    start = TRUE.replace(C10=TRUE.C10 + 8.0)  # a nearby estimate, as parallax would give
    fits = fit_regions(
        data, calibration, (2, 1), n_trials=8, seed=0, start=start, refine_max_evaluations=60
    )
    assert [f.region for f in fits] == [(0, 16, 0, 32), (16, 32, 0, 32)]
    for fit in fits:
        assert abs(fit.result.aberrations.C10 - POLAR["C10"]) < 6.0


def test_detector_binning_keeps_the_fit(noisy):
    data, calibration, _ = noisy
    prepared = prepare(data, calibration, detector_bin=2)
    assert prepared.detector_sampling_mrad[0] == pytest.approx(
        2 * calibration.detector_sampling_mrad[0]
    )
    assert loss(prepared, TRUE) < loss(prepared, TRUE.replace(C10=TRUE.C10 + 10.0))


def test_rotation_of_the_detector_is_calibrated():
    data, calibration, truth = simulate(polar=POLAR, scan=24)
    # np.rot90 over the detector axes puts the pattern's (row, col) at (N-1-col, row):
    # a detector turned by -90 degrees relative to the scan.
    rotated = np.ascontiguousarray(np.rot90(data, k=1, axes=(2, 3)))
    kwargs = {
        k: getattr(calibration, k)
        for k in ("energy_ev", "semiangle_mrad", "scan_step_a", "detector_sampling_mrad")
    }
    right = prepare(rotated, Calibration(**kwargs, rotation_deg=-90.0))
    wrong = prepare(rotated, Calibration(**kwargs, rotation_deg=90.0))
    assert loss(right, TRUE) < 1e-3 < 0.3 < loss(wrong, TRUE)
    assert pearson(reconstruct(right, TRUE).phase, truth) > 0.999


def test_complex128_agrees_with_complex64(clean):
    prepared, _ = clean
    data, calibration, _ = simulate(polar=POLAR)
    wide = prepare(data, calibration, dtype="complex128")
    a = reconstruct(prepared, TRUE).object
    b = reconstruct(wide, TRUE).object
    assert b.dtype == np.complex128
    assert np.abs(a - b).max() < 1e-4


def test_bad_inputs_are_refused_with_a_reason():
    data, calibration, _ = simulate(polar=POLAR, scan=16)
    with pytest.raises(ValueError, match="4D"):
        prepare(data[0], calibration)
    with pytest.raises(ValueError, match="scan_region"):
        prepare(data, calibration, scan_region=(0, 17, 0, 4))
    with pytest.raises(ValueError, match="detector_bin"):
        prepare(data, calibration, detector_bin=0)
    with pytest.raises(ValueError, match="semiangle"):
        Calibration(energy_ev=2e5, semiangle_mrad=0.0, scan_step_a=0.2)
    with pytest.raises(ValueError, match="energy"):
        Calibration(energy_ev=-1, semiangle_mrad=20.0, scan_step_a=0.2)
    with pytest.raises(ValueError, match="no counts"):
        prepare(np.zeros_like(data), calibration, disk=prepare(data, calibration).disk)
    prepared = prepare(data, calibration)
    with pytest.raises(ValueError, match="parameters"):
        fit_aberrations(prepared, parameters=("C99",), n_trials=2)
    with pytest.raises(ValueError, match="bounds"):
        fit_aberrations(prepared, bounds={"C10": (5.0, -5.0)}, n_trials=2)
    with pytest.raises(ValueError, match="engine"):
        loss(prepared, TRUE, engine="gpu")
    with pytest.raises(ValueError, match="region grid"):
        split_regions((8, 8), (5, 1))


def test_numba_engine_matches_the_array_reference():
    polar = {
        "C10": 40.0,
        "C12": 15.0,
        "phi12": 0.3,
        "C21": 800.0,
        "phi21": 1.1,
        "C23": 500.0,
        "phi23": 0.4,
        "C30": 3.0e4,
    }
    data, calibration, _ = simulate(polar=polar, dose=5000, scan=24)
    prepared = prepare(data, calibration)
    aberrations = Aberrations.from_polar(**polar)
    reference = sideband_sums(prepared, aberrations)
    compiled = select_sums(prepared, "numba")(prepared, aberrations)
    assert select_sums(prepared) is select_sums(prepared, "numba")
    scale = np.abs(reference).max()
    # float32 phases and sums in the reference, float64 in the loop: rounding only.
    assert np.abs(compiled - reference).max() < 1e-4 * scale
    assert (
        abs(
            loss(prepared, aberrations, engine="numba")
            - loss(prepared, aberrations, engine="array")
        )
        < 1e-5
    )
    again = select_sums(prepared, "numba")(prepared, aberrations)
    assert again.tobytes() == compiled.tobytes()
    with pytest.raises(TypeError, match="CuPy"):
        select_sums(prepared, "fused")(prepared, aberrations)


def test_importing_quantem_ssb_imports_no_gpu_or_search_library():
    import subprocess
    import sys

    code = (
        "import sys, quantem.stem4d.ssb;"
        "bad = [m for m in ('cupy', 'torch', 'optuna', 'harness') if m in sys.modules];"
        "print(','.join(bad)); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_extended_fit_recovers_coma_and_spherical_aberration():
    polar = {"C10": 50.0, "C12": 20.0, "phi12": 0.5, "C21": 2000.0, "phi21": 1.0, "C30": 1.0e5}
    data, calibration, _ = simulate(polar=polar, dose=20000, seed=2)
    prepared = prepare(data, calibration)
    names = ("C10", "C12a", "C12b", "C21a", "C21b", "C30")
    result = fit_aberrations(prepared, parameters=names, n_trials=200, seed=0)
    fitted = result.aberrations.to_polar()
    assert abs(fitted["C10"] - 50.0) < 2.0 and abs(fitted["C12"] - 20.0) < 2.0
    assert abs(fitted["C21"] - 2000.0) < 100.0 and abs(fitted["phi21"] - 1.0) < 0.05
    assert abs(fitted["C30"] - 1.0e5) < 5.0e3
    assert result.loss <= loss(prepared, Aberrations.from_polar(**polar)) + 1e-4
