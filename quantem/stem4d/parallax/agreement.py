"""Whether the fitted shift model aligns the bright-field images as well as their own shifts.

The aberration fit (:mod:`quantem.stem4d.parallax.fit`) replaces each image's measured shift
by the shift of one defocus (and astigmatism) at its beam angle. When every BF image is a
shifted copy of one image, moving the images by the fitted shifts lines them up almost as
well as moving them by their measured shifts. When it is not (a thick slab, whose tilted
images see its depths shifted by different amounts, or a sample in focus, whose disk-edge
images carry one-sided contrast), the measured shifts scatter about the fit and the images
moved by the fitted shifts agree far less: the fitted C10 then describes no shift of the
images and is no measurement of the defocus.

The measure is the mean, over images, of the Pearson correlation of each aligned image with
the mean of the others (leaving itself out, so that noise does not correlate with itself),
with the fitted shifts divided by the same with the measured ones. Images are contrast
``I / mean(I) - 1``, tapered by Tukey windows fixed to the object
(:func:`quantem.stem4d.parallax.align.object_frame_windows`, centred on the fitted shifts) as
in the alignment, and moved by Fourier phase ramps. Sums run in a fixed order, in the
images' array module (numpy or CuPy).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from quantem.stem4d.arrays import array_module
from quantem.stem4d.errors import ComputeError
from quantem.stem4d.parallax.align import contrast, fourier_shift, object_frame_windows
from quantem.stem4d.parallax.fit import AberrationFit

#: Images moved per batch (bounds the memory of the aligned copies).
BATCH_IMAGES = 64
#: Agreement under which the fitted C10 is reported undetermined. Where the shift model holds
#: the fitted shifts keep 96-100 per cent of the measured shifts' correlation (the validation
#: matrix's 2 and 4 nm cells), where it fails 75 per cent or less (its 10 nm cells, its
#: 1.2 nm sample in focus).
MIN_AGREEMENT = 0.9


def _mean_leave_one_out_correlation(spectra: Any, shifts: Any) -> float:
    xp = array_module(spectra)
    n = spectra.shape[0]
    total = None
    for a in range(0, n, BATCH_IMAGES):
        batch = slice(a, a + BATCH_IMAGES)
        part = xp.fft.ifft2(fourier_shift(spectra[batch], shifts[batch])).real.sum(axis=0)
        total = part if total is None else total + part
    correlations = []
    for a in range(0, n, BATCH_IMAGES):
        batch = slice(a, a + BATCH_IMAGES)
        moved = xp.fft.ifft2(fourier_shift(spectra[batch], shifts[batch])).real
        others = (total[None] - moved) / (n - 1)
        moved = moved - moved.mean(axis=(1, 2), keepdims=True)
        others = others - others.mean(axis=(1, 2), keepdims=True)
        norm = xp.sqrt((moved * moved).sum(axis=(1, 2)) * (others * others).sum(axis=(1, 2)))
        cross = (moved * others).sum(axis=(1, 2))
        correlations.append(xp.where(norm > 0, cross / xp.where(norm > 0, norm, 1.0), 0.0))
    return float(xp.concatenate(correlations).mean())


def shift_model_agreement(images: Any, measured: Any, fitted: Any, edge: float) -> dict:
    """How well the ``fitted`` shifts align ``images`` against the ``measured`` ones.

    ``images`` ``(n, scan_r, scan_c)`` (counts), ``measured`` and ``fitted`` ``(n, 2)`` scan
    pixels, ``edge`` the alignment's taper. Returns ``measured_r`` and ``fitted_r`` (mean
    leave-one-out correlations) and ``agreement`` (``fitted_r / measured_r``; NaN when the
    images moved by their own shifts do not correlate at all).
    """
    xp = array_module(images)
    n, n_r, n_c = images.shape
    if n < 2:
        raise ComputeError("the shift model's agreement needs at least 2 bright-field images")
    measured = xp.asarray(measured, dtype=xp.float64)
    fitted = xp.asarray(fitted, dtype=xp.float64)
    if measured.shape != (n, 2) or fitted.shape != (n, 2):
        raise ComputeError(
            f"shifts {measured.shape} and {fitted.shape} must both be ({n}, 2) scan pixels"
        )
    centred = fitted - fitted.mean(axis=0, keepdims=True)
    moved = contrast(images)
    if edge > 0:
        moved = moved * object_frame_windows(n_r, edge, centred[:, 0], xp)[:, :, None]
        moved = moved * object_frame_windows(n_c, edge, centred[:, 1], xp)[:, None, :]
    spectra = xp.fft.fft2(moved)
    measured_r = _mean_leave_one_out_correlation(spectra, measured)
    fitted_r = _mean_leave_one_out_correlation(spectra, fitted)
    agreement = fitted_r / measured_r if measured_r > 0 else math.nan
    return {"measured_r": measured_r, "fitted_r": fitted_r, "agreement": agreement}


def check_fit(
    images: Any, measured: Any, fit: AberrationFit, edge: float
) -> tuple[AberrationFit, str | None]:
    """``fit`` with its ``model_agreement`` set and C10 undetermined below
    :data:`MIN_AGREEMENT` (or where the images do not correlate at all), and then a
    warning's text (else None)."""
    agreement = shift_model_agreement(images, measured, fit.fitted_shifts, edge)["agreement"]
    agrees = bool(agreement >= MIN_AGREEMENT)  # NaN does not
    checked = dataclasses.replace(
        fit, model_agreement=float(agreement), c10_determined=fit.c10_determined and agrees
    )
    if agrees:
        return checked, None
    return checked, (
        "C10 is undetermined: the bright-field images moved by the fitted shifts correlate "
        f"{agreement:.2f} times as well as moved by their own measured shifts (under "
        f"{MIN_AGREEMENT}): the shifts are not those of one defocus (a thick slab, or in "
        f"focus), and the fitted {fit.c10_angstrom:.3g} A is no measurement of the defocus"
    )


__all__ = ["MIN_AGREEMENT", "check_fit", "shift_model_agreement"]
