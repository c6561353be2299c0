"""The fused DPC field kernels (quantem.stem4d.cuda.dpc_fields) against numpy's arithmetic."""

from __future__ import annotations

import math

import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy (not installed here)")

from quantem.stem4d.cuda import dpc_fields  # noqa: E402
from quantem.stem4d.detector.session import CenterOfMass  # noqa: E402
from quantem.stem4d.dpc import beam_shifts, fields, find_rotation  # noqa: E402
from quantem.stem4d.dpc.reconstruct import _skewness  # noqa: E402
from quantem.stem4d.virtual.calibration import Calibration  # noqa: E402

SHAPES = [(2, 2), (3, 7), (64, 48), (512, 512), (301, 517)]


def _com(shape, seed, nan_fraction=0.05):
    rng = np.random.default_rng([seed, *shape])
    row = rng.standard_normal(shape) * 3 + 95.5
    col = rng.standard_normal(shape) * 3 + 96.25
    row[rng.random(shape) < nan_fraction] = np.nan
    col[rng.random(shape) < nan_fraction] = np.nan
    return row, col


@pytest.mark.parametrize("shape", SHAPES)
def test_com_sums_match_numpy_and_repeat_bit_for_bit(shape):
    row, col = _com(shape, 1)
    valid = ~(np.isnan(row) | np.isnan(col))
    d_row, d_col = cupy.asarray(row), cupy.asarray(col)
    count, sum_r, sum_c = dpc_fields.com_sums(d_row, d_col)
    assert count == int(valid.sum())
    assert sum_r == pytest.approx(float(row[valid].sum()), rel=1e-13)
    assert sum_c == pytest.approx(float(col[valid].sum()), rel=1e-13)
    assert dpc_fields.com_sums(d_row, d_col) == (count, sum_r, sum_c)


def test_com_sums_with_no_valid_frame_is_zero():
    nan = cupy.full((4, 5), cupy.nan)
    assert dpc_fields.com_sums(nan, nan) == (0, 0.0, 0.0)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("calibrated", [False, True])
def test_beam_shifts_equal_the_cpu_rule_given_the_same_mean(dtype, calibrated):
    row, col = _com((40, 33), 2)
    cal = None
    if calibrated:
        cal = Calibration(energy_ev=300e3, mrad_per_pixel=0.21, scan_step_angstrom=(0.4, 0.4))
    cpu = beam_shifts(CenterOfMass(row, col), cal, "float64")
    gpu = beam_shifts(CenterOfMass(cupy.asarray(row), cupy.asarray(col)), cal, dtype)
    assert gpu.units == cpu.units and gpu.step == cpu.step
    assert gpu.mean_com == pytest.approx(cpu.mean_com, rel=1e-14)
    # Recompute the CPU rule with the device's mean: then the shifts are bit-identical.
    valid = ~(np.isnan(row) | np.isnan(col))
    scale = 1.0
    if calibrated:
        scale = (2 * math.pi * cal.detector_mrad_per_pixel * 1e-3) / cal.wavelength_angstrom
    want_r = (np.where(valid, row - gpu.mean_com[0], 0.0) * scale).astype(dtype)
    want_c = (np.where(valid, col - gpu.mean_com[1], 0.0) * scale).astype(dtype)
    assert gpu.row.dtype == dtype and gpu.col.dtype == dtype
    np.testing.assert_array_equal(gpu.row.get(), want_r)
    np.testing.assert_array_equal(gpu.col.get(), want_c)


def _numpy_curl_sums(f_r, f_c, step):
    rr, rc = np.gradient(f_r, step[0], axis=0), np.gradient(f_r, step[1], axis=1)
    cr, cc = np.gradient(f_c, step[0], axis=0), np.gradient(f_c, step[1], axis=1)
    out = []
    for c, d in ((cr - rc, rr + cc), (rr - cc, cr + rc)):
        c, d = c.astype(np.float64), d.astype(np.float64)
        out += [float((c * c).sum()), float((c * d).sum()), float((d * d).sum())]
    return np.array(out)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("step", [(1.0, 1.0), (0.37, 2.5)])
def test_curl_sums_match_numpy(dtype, shape, step):
    rng = np.random.default_rng([5, *shape])
    f_r = rng.standard_normal(shape).astype(dtype)
    f_c = rng.standard_normal(shape).astype(dtype)
    got = dpc_fields.curl_sums(cupy.asarray(f_r), cupy.asarray(f_c), step)
    want = _numpy_curl_sums(f_r, f_c, step)
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11 * np.abs(want).max())
    again = dpc_fields.curl_sums(cupy.asarray(f_r), cupy.asarray(f_c), step)
    np.testing.assert_array_equal(got, again)


@pytest.mark.parametrize("transpose", [None, False, True])
def test_find_rotation_on_the_gpu_matches_the_cpu(transpose):
    # A curl-free field (the gradient of a smooth phase) rotated by 23 degrees.
    r, c = np.mgrid[0:96, 0:80] / 9.0
    phase = np.sin(r) * np.cos(0.7 * c) + 0.3 * np.cos(1.3 * r + 0.2 * c)
    g_r, g_c = np.gradient(phase)
    a = math.radians(-23.0)
    f_r = math.cos(a) * g_r - math.sin(a) * g_c
    f_c = math.sin(a) * g_r + math.cos(a) * g_c
    cpu = find_rotation(f_r, f_c, transpose=transpose)
    gpu = find_rotation(cupy.asarray(f_r), cupy.asarray(f_c), transpose=transpose)
    assert gpu.transpose == cpu.transpose
    assert gpu.angle_deg == pytest.approx(cpu.angle_deg, abs=1e-9)
    assert gpu.residual == pytest.approx(cpu.residual, rel=1e-6, abs=1e-12)
    if cpu.residual_other is None:
        assert gpu.residual_other is None
    else:
        assert gpu.residual_other == pytest.approx(cpu.residual_other, rel=1e-9)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("transpose", [False, True])
def test_rotate_field_agrees_with_numpy_to_rounding(dtype, transpose):
    rng = np.random.default_rng(7)
    f_r = rng.standard_normal((50, 61)).astype(dtype)
    f_c = rng.standard_normal((50, 61)).astype(dtype)
    want = fields.rotate_field(f_r, f_c, 37.5, transpose)
    got = fields.rotate_field(cupy.asarray(f_r), cupy.asarray(f_c), 37.5, transpose)
    eps = np.finfo(dtype).eps
    for g, w in zip(got, want, strict=True):
        assert g.dtype == dtype
        np.testing.assert_allclose(g.get(), w, rtol=0, atol=8 * eps)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", SHAPES)
def test_divergence_is_bit_identical_to_numpy_gradient(dtype, shape):
    rng = np.random.default_rng([9, *shape])
    f_r = (rng.standard_normal(shape) * 100).astype(dtype)
    f_c = (rng.standard_normal(shape) * 100).astype(dtype)
    step = (0.37, 2.5)
    got = fields.divergence(cupy.asarray(f_r), cupy.asarray(f_c), step)
    want = np.gradient(f_r, step[0], axis=0) + np.gradient(f_c, step[1], axis=1)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.get(), want)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", SHAPES)
def test_skewness_matches_the_two_pass_numpy_rule(dtype, shape):
    rng = np.random.default_rng([11, *shape])
    values = (rng.gamma(2.0, 1.0, size=shape) - 2.0 + 1e3).astype(dtype)
    centred = values.astype(np.float64) - values.astype(np.float64).mean()
    want = (centred**3).mean() / (centred**2).mean() ** 1.5
    got = _skewness(cupy.asarray(values))
    assert got == pytest.approx(want, rel=1e-6 if dtype == np.float32 else 1e-10)
    assert _skewness(cupy.asarray(values)) == got
    assert _skewness(-cupy.asarray(values)) == pytest.approx(-got, rel=1e-10)
    assert _skewness(cupy.full(shape, 3.0, dtype=dtype)) == 0.0


def test_negate_three_arrays():
    a, b, c = (cupy.arange(12, dtype=cupy.float32).reshape(3, 4) + k for k in range(3))
    x, y, z = dpc_fields.negate(a, b, c)
    for got, src in ((x, a), (y, b), (z, c)):
        np.testing.assert_array_equal(got.get(), -src.get())
