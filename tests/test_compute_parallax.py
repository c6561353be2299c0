"""Parallax: sub-pixel alignment, aberration fit, shift-and-sum, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest

from quantem.stem4d.arrays import array_digest
from quantem.stem4d.errors import ComputeError
from quantem.stem4d.parallax import align, fit_aberrations, shift_and_sum
from quantem.stem4d.parallax.align import fourier_shift


def smooth_object(shape=(40, 48), seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    spectrum = np.fft.fft2(rng.normal(size=shape))
    q2 = np.fft.fftfreq(shape[0])[:, None] ** 2 + np.fft.fftfreq(shape[1])[None, :] ** 2
    return 1.0 + 0.2 * np.fft.ifft2(spectrum * np.exp(-q2 / (2 * 0.08**2))).real


def model_shifts(angles, c10, c12, phi12_deg, rotation_deg, transpose, step):
    phi = math.radians(phi12_deg)
    a = np.array(
        [
            [c10 + c12 * math.cos(2 * phi), c12 * math.sin(2 * phi)],
            [c12 * math.sin(2 * phi), c10 - c12 * math.cos(2 * phi)],
        ]
    )
    t = math.radians(rotation_deg)
    rot = np.array([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]])
    det = angles[:, ::-1] if transpose else angles
    return -(det @ a.T) @ rot.T / step


def grid_angles(n=7, mrad=3.0):
    rows, cols = np.mgrid[-n : n + 1, -n : n + 1]
    keep = rows**2 + cols**2 <= n * n
    return np.column_stack([rows[keep], cols[keep]]).astype(float) * mrad * 1e-3


@pytest.mark.parametrize(
    ("c10", "c12", "phi12", "rotation", "transpose"),
    [(-40.0, 0.0, 0.0, 12.0, False), (55.0, 8.0, 30.0, -20.0, True)],
)
def test_fit_recovers_aberrations_from_exact_shifts(c10, c12, phi12, rotation, transpose):
    angles = grid_angles()
    shifts = model_shifts(angles, c10, c12, phi12, rotation, transpose, 0.5) + np.array([0.3, -0.2])
    fit = fit_aberrations(shifts, angles, (0.5, 0.5))
    assert fit.c10_angstrom == pytest.approx(c10, abs=1e-9)
    assert fit.c12_angstrom == pytest.approx(c12, abs=1e-9)
    if c12:
        assert fit.phi12_deg == pytest.approx(phi12, abs=1e-6)
    assert fit.rotation_deg == pytest.approx(rotation, abs=1e-9)
    assert fit.transpose is transpose
    assert fit.residual_px < 1e-9
    # The half-turn ambiguity follows the hint.
    flipped = fit_aberrations(shifts, angles, (0.5, 0.5), rotation_hint_deg=rotation + 180)
    assert flipped.c10_angstrom == pytest.approx(-c10, abs=1e-9)
    with pytest.raises(ComputeError, match="at least 4"):
        fit_aberrations(shifts[:3], angles[:3], (0.5, 0.5))


def shifted_images(shifts):
    obj = smooth_object()
    spectrum = np.fft.fft2(obj)
    # I_j(r) = O(r - s_j): the spectrum moved by +s_j (fourier_shift moves by -s).
    return np.fft.ifft2(fourier_shift(np.repeat(spectrum[None], len(shifts), 0), -shifts)).real


def test_alignment_recovers_subpixel_shifts():
    angles = grid_angles(n=6)
    shifts = model_shifts(angles, -30.0, 0.0, 0.0, 25.0, False, 0.4)
    images = shifted_images(shifts) * 100.0
    got = align(images, upsample=50, iterations=3, edge=0.0)
    expected = shifts - shifts.mean(axis=0)
    np.testing.assert_allclose(got.shifts, expected, atol=0.02)
    fit = fit_aberrations(got.shifts, angles, (0.4, 0.4))
    assert fit.c10_angstrom == pytest.approx(-30.0, rel=0.02)
    assert fit.rotation_deg == pytest.approx(25.0, abs=0.5)
    again = align(images, upsample=50, iterations=3, edge=0.0)
    assert array_digest(got.shifts) == array_digest(again.shifts)
    with pytest.raises(ComputeError, match="upsample"):
        align(images, upsample=0)


def test_shift_and_sum_reassembles_the_object():
    obj = smooth_object()
    rng = np.random.default_rng(2)
    shifts = rng.uniform(-1.5, 1.5, size=(24, 2))
    images = shifted_images(shifts)
    image = shift_and_sum(images, shifts, upsample=2, kernel_sigma=0.5)
    assert image.shape == (80, 96)
    # On the scan grid (every other fine pixel), the reconstruction is the object's contrast.
    contrast = obj / obj.mean() - 1
    r = np.corrcoef(image[::2, ::2].ravel(), contrast.ravel())[0, 1]
    assert r > 0.98
    # Wrong shifts blur it.
    blurred = shift_and_sum(images, np.zeros_like(shifts), upsample=2)
    assert np.corrcoef(blurred[::2, ::2].ravel(), contrast.ravel())[0, 1] < r
    assert array_digest(image) == array_digest(shift_and_sum(images, shifts, upsample=2))
