"""Alignment guided by a defocus and rotation guess, coarse to fine in beam angle.

At large defocus the BF images shift by many scan pixels (``C10 alpha / step``), beyond
what a bounded correlation search can follow on a crystal (its correlation repeats with
the lattice). Given the user's defocus (C10) and rotation guess, each image's shift is
predicted (:func:`quantem.stem4d.parallax.fit.predicted_shifts`) and only the residual is
searched, within ``max_shift`` of the prediction. A wrong guess leaves a residual that grows
with the beam angle, so the images are taken in growing discs of beam angle: the inner
images (small residual) are aligned around the guess and fitted first; the fit then predicts
the shifts of the next disc, and so on out to the whole BF disk. The last stage aligns every
image around the previous fit, which is what the aberration fit then uses.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from quantem.stem4d.arrays import array_module, to_numpy
from quantem.stem4d.errors import ComputeError
from quantem.stem4d.parallax.align import Alignment, align
from quantem.stem4d.parallax.fit import predicted_shifts

#: Fractions of the largest beam angle of the discs aligned in turn.
STAGES = (0.4, 0.6, 0.8, 1.0)
#: Chi-square (2 x 2 matrix M, 4 degrees of freedom) above which a stage's fit replaces the
#: prediction: about the 0.3% tail, so noise alone rarely moves it.
UPDATE_CHI2 = 16.0
#: Fewest images a stage aligns and fits (the inner disc is widened to reach it).
MIN_STAGE_IMAGES = 12


def _linear_prediction(
    found: Any, angles: np.ndarray, subset: np.ndarray, current: np.ndarray
) -> np.ndarray:
    """Shifts of every image from the linear model ``s = M alpha + t`` fitted on ``subset``
    (the aberration fit's model, :mod:`quantem.stem4d.parallax.fit`, in scan pixels), or
    ``current`` when the fitted ``M`` does not differ from the current prediction's by more
    than its noise (:data:`UPDATE_CHI2`): near focus the inner images' shifts are mostly
    noise, and extrapolating it would mislead the search of the outer ones."""
    design = np.column_stack([angles, np.ones(len(angles))])
    x = design[subset]
    shifts = to_numpy(found)
    coefficients, *_ = np.linalg.lstsq(x, shifts, rcond=None)
    reference, *_ = np.linalg.lstsq(x, current[subset], rcond=None)
    dof = max(len(x) - 3, 1)
    variance = ((shifts - x @ coefficients) ** 2).sum(axis=0) / dof
    normal = x[:, :2].T @ x[:, :2] - np.outer(x[:, :2].sum(0), x[:, :2].sum(0)) / len(x)
    chi2 = 0.0
    for c in range(2):
        delta = coefficients[:2, c] - reference[:2, c]
        chi2 += float(delta @ normal @ delta) / max(float(variance[c]), 1e-30)
    if chi2 <= UPDATE_CHI2:
        return current
    return design @ coefficients


def guided_align(
    images: Any,
    angles_rad: np.ndarray,
    scan_step_angstrom: tuple[float, float],
    c10_guess_angstrom: float,
    *,
    rotation_deg: float | None = None,
    transpose: bool | None = None,
    max_shift: float | None,
    **align_options: Any,
) -> Alignment:
    """Shifts of every image, searched around the guess's prediction, disc by disc.

    ``align_options`` go to :func:`quantem.stem4d.parallax.align.align` (upsample,
    iterations, edge, lowpass). Returns the last stage's alignment of all the images.
    """
    angles = np.asarray(angles_rad, dtype=np.float64)
    if len(angles) != images.shape[0]:
        raise ComputeError(f"{len(angles)} beam angles for {images.shape[0]} images")
    xp = array_module(images)
    prediction = predicted_shifts(
        angles,
        scan_step_angstrom,
        c10_guess_angstrom,
        0.0 if rotation_deg is None else rotation_deg,
        bool(transpose),
    )
    radius = np.hypot(angles[:, 0], angles[:, 1])
    largest = float(np.hypot(prediction[:, 0], prediction[:, 1]).max())
    field = max(images.shape[1:])
    if largest > field:
        # Shifted by more than the scan field, the images share no specimen to align on.
        raise ComputeError(
            f"c10_guess_angstrom {c10_guess_angstrom!r} predicts bright-field shifts up to "
            f"{largest:.0f} scan px, more than the {images.shape[1]} x {images.shape[2]} scan: "
            "the images would not overlap (the guess is in angstrom, C10 = -defocus)"
        )
    # A guess whose shifts stay within the search range needs no stages: even half wrong,
    # its residuals do too.
    stages = STAGES if max_shift is not None and largest > max_shift else STAGES[-1:]
    order = np.sort(radius)
    smallest = order[min(MIN_STAGE_IMAGES, len(order)) - 1]
    alignment = None
    for fraction in stages:
        subset = radius <= max(fraction * order[-1], smallest)
        if fraction == stages[-1]:
            subset = np.ones(len(radius), dtype=bool)
        index = np.flatnonzero(subset)
        alignment = align(
            images[xp.asarray(index)],
            max_shift=max_shift,
            initial_shifts=xp.asarray(prediction[index]),
            **align_options,
        )
        if fraction == stages[-1] or int(subset.sum()) < 4:
            continue
        prediction = _linear_prediction(alignment.shifts, angles, subset, prediction)
    return alignment


__all__ = ["MIN_STAGE_IMAGES", "STAGES", "UPDATE_CHI2", "guided_align"]
