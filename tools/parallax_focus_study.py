"""Parallax C10 and rotation on the validation matrix: the fit's plain least squares against
one weighted by each image's correlation signal-to-noise (a study, not the method).

For each acquisition of ``tests/data/validation`` it runs :func:`quantem.stem4d.parallax.parallax`
as ``harness run compute validate`` does (defocus and rotation of the simulation as the
guess), then refits the same shifts with weights ``a_j^2 / misfit_j``: ``a_j`` the image's
contrast amplitude against the aligned reference, ``misfit_j`` what the shifted reference
leaves unexplained. In focus most BF images hardly differ from the mean and their shifts
are noise; the weights show what the images that do carry contrast say. Run from the
repository root::

    PYTHONPATH=$PWD python tools/parallax_focus_study.py
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np

from quantem.stem4d.errors import ParallaxWarning
from quantem.stem4d.io import load
from quantem.stem4d.parallax import fit_aberrations, parallax
from quantem.stem4d.parallax.align import contrast, fourier_shift, tukey_window
from quantem.stem4d.virtual import Calibration, open_frames

ROOT = Path(__file__).resolve().parents[1] / "tests" / "data" / "validation"
EDGE = 0.1  # the alignment's default taper


def correlation_weights(images: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """``a_j^2 / misfit_j`` of every image against the mean of the aligned images."""
    window = tukey_window(images.shape[1:], EDGE, np)
    spectra = fourier_shift(np.fft.fft2(contrast(images) * window[None]), shifts)
    reference = spectra.mean(axis=0)
    amplitude = (spectra * np.conj(reference)).real.sum(axis=(1, 2)) / (
        np.abs(reference) ** 2
    ).sum()
    misfit = (np.abs(spectra - amplitude[:, None, None] * reference[None]) ** 2).sum(axis=(1, 2))
    return amplitude**2 / misfit


def weighted_fit(shifts, angles, step, weights, rotation_hint):
    """The aberration fit of the weighted least-squares model shifts."""
    design = np.column_stack([angles, np.ones(len(angles))])
    root = np.sqrt(weights / weights.mean())[:, None]
    coefficients, *_ = np.linalg.lstsq(design * root, shifts * root, rcond=None)
    return fit_aberrations(design @ coefficients, angles, step, rotation_hint_deg=rotation_hint)


def main() -> None:
    truth = json.loads((ROOT / "truth.json").read_text())
    print("acquisition | C10 truth | plain C10 +- se, rotation +- se | weighted C10, rotation")
    for cell in truth["cells"].values():
        calibration = Calibration(
            energy_ev=truth["energy_ev"],
            convergence_mrad=truth["semiangle_mrad"],
            mrad_per_pixel=cell["mrad_per_pixel"],
            scan_step_angstrom=truth["scan_step_a"],
        )
        for name, entry in cell["acquisitions"].items():
            with load(ROOT / entry["master"]) as acq, warnings.catch_warnings():
                warnings.simplefilter("ignore", ParallaxWarning)
                result = parallax(
                    open_frames(acq),
                    calibration=calibration,
                    max_shift=3.0,
                    c10_guess_angstrom=-cell["defocus_entrance_a"],
                    rotation_hint_deg=entry["rotation_deg"],
                )
            angles = result.stack.positions * (cell["mrad_per_pixel"] * 1e-3)
            shifts = np.asarray(result.alignment.shifts)
            weights = correlation_weights(np.asarray(result.stack.images), shifts)
            fit = result.fit
            other = weighted_fit(
                shifts, angles, calibration.scan_step, weights, entry["rotation_deg"]
            )
            print(
                f"{name} | {cell['c10_entrance_a'] + 0.0:.0f} "
                f"| {fit.c10_angstrom:.2f} +- {fit.c10_uncertainty_angstrom:.2g}, "
                f"{fit.rotation_deg:.2f} +- {fit.rotation_uncertainty_deg:.2g} "
                f"| {other.c10_angstrom:.2f}, {other.rotation_deg:.2f}"
            )


if __name__ == "__main__":
    main()
