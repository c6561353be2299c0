"""DPC: rotation by minimum curl (with transpose), Fourier integration, dDPC, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.arrays import array_digest
from quantem.stem4d.dpc import divergence, dpc, find_rotation, integrate_gradient, rotate_field
from quantem.stem4d.errors import CalibrationError, CalibrationWarning, ComputeError
from quantem.stem4d.io import synthetic
from quantem.stem4d.virtual import Calibration


def blob_phase(shape=(48, 56)) -> np.ndarray:
    rows, cols = np.mgrid[: shape[0], : shape[1]].astype(float)
    return (
        np.exp(-((rows - 15) ** 2 + (cols - 20) ** 2) / 40.0)
        + 0.6 * np.exp(-((rows - 33) ** 2 + (cols - 41) ** 2) / 25.0)
        + 0.3 * np.exp(-((rows - 10) ** 2 + (cols - 45) ** 2) / 10.0)
    )


@pytest.mark.parametrize(("angle", "transpose"), [(0.0, False), (33.0, False), (-71.0, True)])
def test_rotation_by_minimum_curl(angle, transpose):
    phase = blob_phase()
    g_r, g_c = np.gradient(phase)
    # The detector sees the field rotated back (and swapped when transposed).
    d_r, d_c = rotate_field(g_r, g_c, -angle)
    if transpose:
        d_r, d_c = d_c, d_r
    fit = find_rotation(d_r, d_c)
    assert fit.transpose is transpose
    assert (fit.angle_deg - angle) % 180.0 == pytest.approx(0.0, abs=1e-6) or (
        fit.angle_deg - angle
    ) % 180.0 == pytest.approx(180.0, abs=1e-6)
    assert fit.residual < 1e-6 < fit.residual_other
    back_r, _back_c = rotate_field(d_r, d_c, fit.angle_deg, fit.transpose)
    sign = 1 if math.isclose((fit.angle_deg - angle) % 360.0, 0.0, abs_tol=1e-6) else -1
    np.testing.assert_allclose(sign * back_r, g_r, atol=1e-9)


@pytest.mark.parametrize("boundary", ["mirror", "periodic"])
def test_integration_recovers_the_phase(boundary):
    phase = blob_phase()
    if boundary == "periodic":
        rows, cols = np.mgrid[:48, :56]
        phase = np.cos(2 * np.pi * 3 * rows / 48) * np.sin(2 * np.pi * 5 * cols / 56)
        spectrum_r = np.fft.fftfreq(48)[:, None] * 2j * np.pi
        spectrum_c = np.fft.fftfreq(56)[None, :] * 2j * np.pi
        g_r = np.fft.ifft2(np.fft.fft2(phase) * spectrum_r).real
        g_c = np.fft.ifft2(np.fft.fft2(phase) * spectrum_c).real
    else:
        g_r, g_c = np.gradient(phase)
    got = integrate_gradient(g_r, g_c, boundary=boundary, low_frequency_regularization=0.0)
    expected = phase - phase.mean()
    got = got - got.mean()
    tol = 1e-10 if boundary == "periodic" else 0.02
    np.testing.assert_allclose(got, expected, atol=tol * np.abs(expected).max())


def test_regularisation_damps_the_lowest_frequencies_as_documented():
    n = 64
    rows = np.arange(n)[:, None] * np.ones((1, n))
    phase = np.cos(2 * np.pi * rows / n)  # the lowest frequency, 1 / L
    g_r = np.fft.ifft2(np.fft.fft2(phase) * (np.fft.fftfreq(n)[:, None] * 2j * np.pi)).real
    g_c = np.zeros_like(g_r)
    for reg in (0.1, 1.0):
        got = integrate_gradient(g_r, g_c, boundary="periodic", low_frequency_regularization=reg)
        ratio = np.abs(got).max() / np.abs(phase).max()
        assert ratio == pytest.approx(1 / (1 + reg**2), rel=1e-9)
    with pytest.raises(ComputeError, match="boundary"):
        integrate_gradient(g_r, g_c, boundary="wrap")


def test_divergence_of_gradient_is_laplacian():
    rows, cols = np.mgrid[:20, :20].astype(float)
    phase = rows**2 + 2 * cols**2
    g_r, g_c = np.gradient(phase)
    assert np.allclose(divergence(g_r, g_c)[2:-2, 2:-2], 6.0)


def synthetic_acquisition(seed=4):
    scan, det = (20, 24), (40, 40)
    model = synthetic.SyntheticModel(scan, det, "uint16", dose=200000.0, seed=seed)
    data = model.make_frames(0, model.n_frames).reshape(*scan, *det)
    meta = {"scan_shape": scan, "detector_shape": det, "dtype": "uint16"}
    return Acquisition(data, meta, model.pixel_mask == 0, "cpu"), model


def test_dpc_end_to_end_on_synthetic_data_and_determinism():
    acq, model = synthetic_acquisition()
    result = dpc(acq)
    potential, _shift_r, _shift_c = model._sample
    # The synthetic disk moves along the potential's gradient: no rotation, phase ~ potential.
    assert min(abs(result.rotation_deg), abs(result.rotation_deg - 360)) < 2.0
    r = np.corrcoef(result.phase.ravel(), potential.ravel())[0, 1]
    assert r > 0.9
    assert result.phase.dtype == np.float64
    again = dpc(acq)
    for name, array in result.outputs().items():
        assert array_digest(array) == array_digest(again.outputs()[name]), name
    fitted = result.fitted()
    assert fitted["units"]["phase"] == "px*px"
    # Calibrated: phase in rad; a fixed rotation is used as given.
    cal = Calibration(energy_ev=200e3, mrad_per_pixel=1.0, scan_step_angstrom=0.5)
    # 90 degrees from the data's rotation: refused unless the mismatch is accepted.
    with pytest.raises(CalibrationError, match="rotation: given 90 deg"):
        dpc(acq, calibration=cal, rotation_deg=90.0)
    with pytest.warns(CalibrationWarning, match="rotation"):
        fixed = dpc(acq, calibration=cal, rotation_deg=90.0, accept_calibration_mismatch=True)
    assert fixed.rotation_deg == 90.0 and fixed.units["phase"] == "rad"
    assert fixed.calibration_check[0]["status"] == "error"
    with pytest.raises(ComputeError, match="float32 is a CUDA option"):
        dpc(acq, dtype="float32")


def test_a_given_rotation_is_unchecked_where_the_field_has_no_structure(tmp_path):
    """Structureless counts give a curl estimate at random: it must not judge (nor refuse)
    a given rotation, and the record says the rule was not applied."""
    import quantem.stem4d.io as qio
    from quantem.stem4d.dpc import dpc
    from quantem.stem4d.io.synthetic import write_arina_frames

    # a bright disk whose counts are noise alone: no beam shift follows the scan
    rows, cols = np.mgrid[:32, :32]
    disk = ((rows - 15.5) ** 2 + (cols - 15.5) ** 2 < 8**2).astype(np.float64)
    frames = np.random.default_rng(7).poisson(50 * disk, size=(12, 12, 32, 32))
    master = write_arina_frames(tmp_path, "noise", frames.astype(np.uint16))
    with qio.load(master) as acq:
        result = dpc(acq, rotation_deg=10.0)
    (rotation,) = [c for c in result.calibration_check if c["rule"] == "rotation"]
    assert rotation["status"] == "unchecked", rotation
    assert "relative curl" in rotation["message"]
