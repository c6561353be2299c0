"""Parallax at large defocus (the alignment guided by a defocus guess) and in focus (the
rotation reported undetermined), issue 34's validation matrix."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from harness.run.compute import validate as compute_validate
from quantem.stem4d.errors import ComputeError, ParallaxWarning
from quantem.stem4d.io import load
from quantem.stem4d.parallax import align, fit_aberrations, parallax
from quantem.stem4d.parallax.align import fourier_shift, object_frame_windows, tukey_window
from quantem.stem4d.parallax.fit import predicted_shifts
from quantem.stem4d.parallax.guided import guided_align
from quantem.stem4d.virtual import Calibration, open_frames

ROOT = Path(__file__).resolve().parents[1] / "tests" / "data" / "validation"
TRUTH = json.loads((ROOT / "truth.json").read_text())
STEP = 0.5
MRAD = 3.0


def disk_angles(n=6):
    rows, cols = np.mgrid[-n : n + 1, -n : n + 1]
    keep = rows**2 + cols**2 <= n * n
    return np.column_stack([rows[keep], cols[keep]]).astype(float) * MRAD * 1e-3


def crystal_images(shifts, shape=(40, 40), seed=1):
    """``I_j(r) = O(r - s_j)`` cut from a larger field: a lattice of period 8 px plus a
    smooth random part, so the images are not periodic and the correlation repeats."""
    big = (128, 128)
    rng = np.random.default_rng(seed)
    r, c = np.mgrid[: big[0], : big[1]]
    lattice = (
        np.cos(2 * np.pi * r / 8)
        + np.cos(2 * np.pi * c / 8)
        + 0.5 * np.cos(2 * np.pi * (r + c) / 8)
    )
    q2 = np.fft.fftfreq(big[0])[:, None] ** 2 + np.fft.fftfreq(big[1])[None, :] ** 2
    smooth = np.fft.ifft2(np.fft.fft2(rng.normal(size=big)) * np.exp(-q2 / (2 * 0.05**2))).real
    obj = 10.0 + lattice + 3.0 * smooth / smooth.std()
    spectrum = np.repeat(np.fft.fft2(obj)[None], len(shifts), 0)
    moved = np.fft.ifft2(fourier_shift(spectrum, -np.asarray(shifts))).real
    a, b = (big[0] - shape[0]) // 2, (big[1] - shape[1]) // 2
    return moved[:, a : a + shape[0], b : b + shape[1]]


C10 = -200.0
ROTATION = 15.0


@pytest.fixture(scope="module")
def large_defocus():
    angles = disk_angles()
    shifts = predicted_shifts(angles, (STEP, STEP), C10, ROTATION)
    assert np.abs(shifts).max() > 6  # twice the search range
    return angles, shifts, crystal_images(shifts)


def test_unguided_alignment_fails_beyond_the_search_range_and_says_so(large_defocus):
    angles, _, images = large_defocus
    found = align(images, max_shift=3.0)
    fit = fit_aberrations(found.shifts, angles, (STEP, STEP), rotation_hint_deg=ROTATION)
    assert abs(fit.c10_angstrom - C10) > 0.2 * abs(C10)
    assert found.at_bound > 0


@pytest.mark.parametrize(("factor", "rotation_error"), [(1.0, 0.0), (0.7, 5.0), (1.3, -5.0)])
def test_guided_alignment_recovers_large_defocus_from_a_wrong_guess(
    large_defocus, factor, rotation_error
):
    angles, shifts, images = large_defocus
    found = guided_align(
        images,
        angles,
        (STEP, STEP),
        factor * C10,
        rotation_deg=ROTATION + rotation_error,
        max_shift=3.0,
    )
    fit = fit_aberrations(found.shifts, angles, (STEP, STEP), rotation_hint_deg=ROTATION)
    assert fit.c10_angstrom == pytest.approx(C10, rel=0.01)
    assert fit.rotation_deg == pytest.approx(ROTATION, abs=0.3)
    assert found.at_bound == 0
    np.testing.assert_allclose(found.shifts, shifts - shifts.mean(0), atol=0.1)


def test_object_frame_windows_follow_the_object_and_refuse_no_overlap():
    flat = object_frame_windows(32, 0.1, np.zeros(3), np)
    np.testing.assert_array_equal(
        flat[0][:, None] * flat[0][None, :], tukey_window((32, 32), 0.1, np)
    )
    moved = object_frame_windows(32, 0.1, np.array([-4.0, 0.0, 4.0]), np)
    # the same object coordinates are weighted alike in every image
    np.testing.assert_allclose(moved[0, 2:22], moved[2, 10:30])
    with pytest.raises(ComputeError, match="no part of the object"):
        object_frame_windows(32, 0.1, np.array([-15.0, 15.0]), np)


def test_fit_uncertainty_matches_the_scatter_of_repeated_fits():
    angles = disk_angles()
    rng = np.random.default_rng(5)
    exact = predicted_shifts(angles, (STEP, STEP), -30.0, 10.0)
    fits = [
        fit_aberrations(exact + rng.normal(scale=0.1, size=exact.shape), angles, (STEP, STEP))
        for _ in range(300)
    ]
    c10 = np.array([f.c10_angstrom for f in fits])
    rotation = np.array([f.rotation_deg for f in fits])
    reported_c10 = np.median([f.c10_uncertainty_angstrom for f in fits])
    reported_rotation = np.median([f.rotation_uncertainty_deg for f in fits])
    assert reported_c10 == pytest.approx(c10.std(), rel=0.2)
    assert reported_rotation == pytest.approx(rotation.std(), rel=0.2)
    assert all(f.rotation_determined for f in fits)


def test_rotation_is_undetermined_when_the_shifts_vanish():
    angles = disk_angles()
    rng = np.random.default_rng(6)
    noise = rng.normal(scale=0.1, size=(len(angles), 2))
    focused = fit_aberrations(noise, angles, (STEP, STEP))
    assert not focused.rotation_determined
    assert focused.rotation_uncertainty_deg > 19
    assert focused.to_dict()["rotation_determined"] is False
    defocused = fit_aberrations(
        predicted_shifts(angles, (STEP, STEP), -30.0, 10.0) + noise, angles, (STEP, STEP)
    )
    assert defocused.rotation_determined
    assert defocused.rotation_uncertainty_deg < 1


def _two_defocus_shifts(c10_inner, c10_outer, noise=0.05, seed=7):
    """Shifts of one defocus for the inner half of the disk and another for the outer."""
    angles = disk_angles()
    radius = np.hypot(angles[:, 0], angles[:, 1])
    inner = radius <= np.median(radius)
    shifts = np.where(
        inner[:, None],
        predicted_shifts(angles, (STEP, STEP), c10_inner, 10.0),
        predicted_shifts(angles, (STEP, STEP), c10_outer, 10.0),
    )
    rng = np.random.default_rng(seed)
    return angles, shifts + rng.normal(scale=noise, size=shifts.shape)


@pytest.mark.parametrize(
    ("c10_inner", "c10_outer", "determined"),
    [
        (-30.0, -30.0, True),  # one defocus
        (0.5, 0.5, True),  # in focus and consistent: a small C10 is still a measurement
        (212.0, 201.0, True),  # a thick slab's few per cent: the halves disagree, not the size
        (17.0, -11.0, False),  # in focus, the one-sided edge images: not even the size
    ],
)
def test_c10_is_undetermined_when_the_inner_and_outer_images_disagree_beyond_it(
    c10_inner, c10_outer, determined
):
    angles, shifts = _two_defocus_shifts(c10_inner, c10_outer)
    fit = fit_aberrations(shifts, angles, (STEP, STEP), rotation_hint_deg=10.0)
    assert fit.c10_inner_angstrom == pytest.approx(c10_inner, abs=1.0)
    assert fit.c10_outer_angstrom == pytest.approx(c10_outer, abs=1.0)
    assert fit.c10_determined is determined
    assert fit.to_dict()["C10_determined"] is determined


def test_c10_halves_need_four_images_each():
    angles = disk_angles(1)[:6]
    shifts = predicted_shifts(angles, (STEP, STEP), -30.0, 0.0)
    fit = fit_aberrations(shifts, angles, (STEP, STEP))
    assert math.isnan(fit.c10_inner_angstrom) and math.isnan(fit.c10_outer_angstrom)
    assert fit.c10_determined


def _fixture(name):
    for cell in TRUTH["cells"].values():
        if name in cell["acquisitions"]:
            entry = cell["acquisitions"][name]
            calibration = Calibration(
                energy_ev=TRUTH["energy_ev"],
                convergence_mrad=TRUTH["semiangle_mrad"],
                mrad_per_pixel=cell["mrad_per_pixel"],
                scan_step_angstrom=TRUTH["scan_step_a"],
            )
            return cell, entry, calibration
    raise KeyError(name)


@pytest.mark.slow
def test_matrix_large_defocus_needs_the_guess_and_warns_without_it():
    cell, entry, calibration = _fixture("t4nm_dfm20nm_rot0_high")
    with load(ROOT / entry["master"]) as acq:
        with pytest.warns(ParallaxWarning, match="edge of the search range"):
            plain = parallax(open_frames(acq), calibration=calibration, max_shift=3.0)
        assert plain.warnings and plain.fitted()["alignment_at_bound"] > 0
        with warnings.catch_warnings():
            warnings.simplefilter("error", ParallaxWarning)
            for factor in (0.7, 1.0, 1.3):
                guided = parallax(
                    open_frames(acq),
                    calibration=calibration,
                    max_shift=3.0,
                    c10_guess_angstrom=factor * cell["c10_entrance_a"],
                    rotation_hint_deg=3.0,
                )
                assert guided.fit.c10_angstrom == pytest.approx(cell["c10_entrance_a"], rel=0.05)
                assert abs(guided.fit.rotation_deg - entry["rotation_deg"]) < 1.0
    assert abs(plain.fit.c10_angstrom - cell["c10_entrance_a"]) > 0.5 * abs(cell["c10_entrance_a"])


def test_matrix_in_focus_rotation_and_c10_are_reported_undetermined():
    _, entry, calibration = _fixture("t1nm_df0_rot0_high")
    with (
        load(ROOT / entry["master"]) as acq,
        pytest.warns(ParallaxWarning, match="rotation is undetermined"),
        pytest.warns(ParallaxWarning, match="C10 is undetermined"),
    ):
        result = parallax(
            open_frames(acq),
            calibration=calibration,
            max_shift=3.0,
            c10_guess_angstrom=0.0,
            rotation_hint_deg=0.0,
        )
    assert not result.fit.rotation_determined
    assert result.fitted()["rotation_determined"] is False
    # nor is C10: the inner and outer images disagree by more than the whole disk's value
    assert not result.fit.c10_determined
    assert any("C10 is undetermined" in note for note in result.warnings)
    assert math.isfinite(result.fit.rotation_uncertainty_deg)


def test_validate_verdict_says_undetermined_only_in_focus():
    score = {
        "dose": "low",
        "c10_entrance_a": 0.0,
        "parallax_c10_a": 1.0,
        "rotation_deg": 0.0,
        "parallax_rotation_deg": 12.0,
        "parallax_rotation_determined": False,
        "ssb_fitted": {"r": 0.9},
        "ssb_uncorrected": {"r": 0.9},
    }
    assert compute_validate.verdict(score)["parallax_rotation"] == "undetermined"
    assert (
        compute_validate.verdict({**score, "parallax_rotation_determined": True})[
            "parallax_rotation"
        ]
        == "fail"
    )
    defocused = {**score, "c10_entrance_a": -200.0, "parallax_c10_a": -200.0}
    assert compute_validate.verdict(defocused)["parallax_rotation"] == "fail"
    # C10 likewise: undetermined only in focus and only when the fit says so
    assert compute_validate.verdict(score)["parallax_c10"] == "pass"
    unsure = {**score, "parallax_c10_a": -4.0, "parallax_c10_determined": False}
    assert compute_validate.verdict(unsure)["parallax_c10"] == "undetermined"
    assert (
        compute_validate.verdict({**unsure, "parallax_c10_determined": True})["parallax_c10"]
        == "fail"
    )
    far = {**defocused, "parallax_c10_a": -150.0, "parallax_c10_determined": False}
    assert compute_validate.verdict(far)["parallax_c10"] == "fail"
