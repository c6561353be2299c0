"""Parallax (tilt-corrected bright field): stack, alignment, aberration fit, shift-and-sum.

:func:`parallax` runs the stages in order; each is a public function so the harness can
time them apart (``harness run compute parallax``):

1. :func:`quantem.stem4d.parallax.stack.build_stack`: one image per BF pixel (or binned group).
2. :func:`quantem.stem4d.parallax.align.align`: sub-pixel shifts against a refined reference.
3. :func:`quantem.stem4d.parallax.fit.fit_aberrations`: C10, C12, phi12, rotation (needs the
   calibration's angular pixel size and scan step; skipped without them).
4. :func:`shift_and_sum`: the upsampled reconstruction.

Shift-and-sum, upsampled by ``u``: image ``j`` is a set of samples of the object at the
positions ``p - s_j`` (``p`` the scan grid). Their kernel-density estimate on a grid
``u`` times finer is computed in Fourier space, which needs no scattered (atomic) adds:
the spectrum of image ``j`` placed on the fine grid is its scan-grid spectrum tiled
``u x u`` times, times the phase ramp of the shift; the sum over images is multiplied by
a Gaussian kernel (sigma ``kernel_sigma`` scan pixels) and divided, in real space, by the
same sum for images of ones (the sampling density). All sums run in a fixed order.

Aberration correction (``correct_aberrations=True``, needs a fit): after alignment the
transfer of the summed image is that of the probe's aberration function at the image
frequency ``q``, ``2 sin(chi(q))`` for the second-order aberrations fitted (the linear
part was removed by the shifts; the probe is ``exp(-i chi)`` as in abTEM), so its contrast
reversals are undone by multiplying the spectrum by ``sign(sin chi(q))``, with
``chi(q) = pi lambda (C10 |q|^2 + C12 terms)`` and ``q`` taken into detector axes. On the
SrTiO3 simulation (C10 = -60 A) this turns the image's correlation with the projected
potential from -0.67 (contrast reversed) to +0.78 (``tests/test_compute_physics.py``). Only the sign changes (no division by small values), so
noise is not amplified.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

from quantem.stem4d.arrays import array_module, to_numpy
from quantem.stem4d.errors import CalibrationError, ComputeError, ParallaxWarning
from quantem.stem4d.parallax.agreement import check_fit
from quantem.stem4d.parallax.align import (
    DEFAULT_EDGE,
    DEFAULT_ITERATIONS,
    DEFAULT_UPSAMPLE,
    Alignment,
    align,
    contrast,
    separable_ramp,
)
from quantem.stem4d.parallax.fit import AberrationFit, fit_aberrations
from quantem.stem4d.parallax.guided import guided_align
from quantem.stem4d.parallax.stack import DEFAULT_DISK_FRACTION, BrightFieldStack, build_stack
from quantem.stem4d.virtual.calibration import Calibration
from quantem.stem4d.virtual.calibration_check import check_bf_radius, check_scan_step, settle
from quantem.stem4d.virtual.frames import open_frames

DEFAULT_RECONSTRUCTION_UPSAMPLE = 2
DEFAULT_KERNEL_SIGMA = 0.5
#: Images placed on the fine grid per batch (bounds the memory of shift-and-sum).
SUM_BATCH_IMAGES = 16


@dataclass
class ParallaxResult:
    """Outputs and fitted parameters of :func:`parallax`."""

    stack: BrightFieldStack
    alignment: Alignment
    fit: AberrationFit | None
    image: Any
    image_corrected: Any
    parameters: dict = field(default_factory=dict)
    calibration: dict | None = None
    calibration_check: list = field(default_factory=list)
    warnings: list = field(default_factory=list)

    def outputs(self) -> dict[str, Any]:
        """Every output array by name (the names ``harness run compute parallax`` saves)."""
        out = {
            "positions": self.stack.positions,
            "shifts": self.alignment.shifts,
            "reference": self.alignment.reference,
            "image": self.image,
        }
        if self.fit is not None:
            out["fitted_shifts"] = self.fit.fitted_shifts
        if self.image_corrected is not None:
            out["image_corrected"] = self.image_corrected
        return out

    def fitted(self) -> dict:
        fitted = {} if self.fit is None else self.fit.to_dict()
        fitted.update(
            {
                "n_images": len(self.stack.positions),
                "disk_center_px": list(self.stack.center),
                "disk_radius_px": self.stack.radius,
                "units": dict(UNITS),
                "calibration": self.calibration,
                "calibration_check": list(self.calibration_check),
                "alignment_at_bound": self.alignment.at_bound,
                "warnings": list(self.warnings),
            }
        )
        return fitted


#: Units of the outputs and fitted values (the images are bright-field contrast, no unit).
UNITS = {
    "positions": "detector px",
    "shifts": "scan px",
    "image": "BF intensity (a.u.)",
    "c10": "A",
    "c12": "A",
    "rotation": "deg",
}

#: The calibration fields the aberration fit applies (energy only for the correction or a
#: reciprocal-space detector sampling).
FIT_FIELDS = frozenset(
    {
        "mrad_per_pixel",
        "inverse_angstrom_per_pixel",
        "convergence_mrad",
        "bf_radius_px",
        "scan_step_angstrom",
    }
)


def parallax_calibration(
    calibration: Calibration | None,
    stack: BrightFieldStack,
    *,
    correct_aberrations: bool,
    accept_mismatch: bool = False,
) -> tuple[Calibration, list[dict]]:
    """The fit's calibration (BF radius derived when needed) and its checks against the data.

    Every given field is applied or checked, else refused (:meth:`Calibration.refuse_unused`).
    """
    if calibration is None or not calibration.given():
        raise CalibrationError(
            "parallax: the aberration fit needs a calibration (the detector's angular pixel "
            "size or convergence_mrad, and scan_step_angstrom); pass fit=False to skip it"
        )
    applied = set(FIT_FIELDS)
    if correct_aberrations or calibration.inverse_angstrom_per_pixel is not None:
        applied.add("energy_ev")
    calibration.refuse_unused("parallax", applied)
    findings = []
    if calibration.has_detector_sampling:
        findings.append(check_bf_radius(calibration, stack.radius))
    findings.append(check_scan_step(calibration))
    check = settle(findings, workload="parallax", accept_mismatch=accept_mismatch)
    return calibration.with_disk_radius(stack.radius), check


def aberration_sign(
    shape: tuple[int, int], step: tuple[float, float], fit: AberrationFit, wavelength: float, xp
) -> Any:
    q_r = xp.fft.fftfreq(shape[0], d=step[0])[:, None] * xp.ones((1, shape[1]))
    q_c = xp.fft.fftfreq(shape[1], d=step[1])[None, :] * xp.ones((shape[0], 1))
    # Scan-axis frequencies into detector axes: inverse rotation, then undo the swap.
    a = math.radians(-fit.rotation_deg)
    d_r = math.cos(a) * q_r - math.sin(a) * q_c
    d_c = math.sin(a) * q_r + math.cos(a) * q_c
    if fit.transpose:
        d_r, d_c = d_c, d_r
    phi = math.radians(fit.phi12_deg)
    c12a = fit.c12_angstrom * math.cos(2 * phi)
    c12b = fit.c12_angstrom * math.sin(2 * phi)
    chi = (
        math.pi
        * wavelength
        * (
            fit.c10_angstrom * (d_r * d_r + d_c * d_c)
            + c12a * (d_r * d_r - d_c * d_c)
            + 2 * c12b * d_r * d_c
        )
    )
    return xp.sign(xp.sin(chi))


def shift_and_sum(
    images: Any,
    shifts: Any,
    *,
    upsample: int = DEFAULT_RECONSTRUCTION_UPSAMPLE,
    kernel_sigma: float = DEFAULT_KERNEL_SIGMA,
    correction: Any = None,
) -> Any:
    """Kernel-density shift-and-sum of contrast images on a grid ``upsample`` times finer.

    ``correction``: optional real array of the fine grid's spectrum shape to multiply the
    summed spectrum by (the aberration sign of :func:`parallax`).
    """
    if int(upsample) != upsample or upsample < 1:
        raise ComputeError(f"upsample must be a positive integer, got {upsample!r}")
    if kernel_sigma <= 0:
        raise ComputeError(f"kernel_sigma must be > 0, got {kernel_sigma}")
    xp = array_module(images)
    u = int(upsample)
    n, n_r, n_c = images.shape
    shifts = xp.asarray(shifts, dtype=xp.float64)
    f_r, f_c = u * n_r, u * n_c
    q_r = xp.fft.fftfreq(f_r, d=1.0 / u)  # cycles per scan pixel
    q_c = xp.fft.fftfreq(f_c, d=1.0 / u)
    kernel = xp.exp(-2 * xp.pi**2 * kernel_sigma**2 * (q_r[:, None] ** 2 + q_c[None, :] ** 2))
    spectra = xp.fft.fft2(contrast(images))
    numerator = xp.zeros((f_r, f_c), dtype=xp.complex128)
    ramps = xp.zeros((f_r, f_c), dtype=xp.complex128)
    for a in range(0, n, SUM_BATCH_IMAGES):
        ramp = separable_ramp((f_r, f_c), shifts[a : a + SUM_BATCH_IMAGES], xp, 1.0 / u)
        numerator += (xp.tile(spectra[a : a + SUM_BATCH_IMAGES], (1, u, u)) * ramp).sum(axis=0)
        ramps += ramp.sum(axis=0)
    # Density of the samples: the same sum for images of ones, whose spectrum is
    # n_r * n_c at q = 0, tiled onto the frequencies that are whole cycles per scan pixel.
    ones = xp.zeros((n_r, n_c), dtype=xp.complex128)
    ones[0, 0] = n_r * n_c
    density_spectrum = xp.tile(ones, (u, u)) * ramps
    numerator *= kernel
    if correction is not None:
        numerator *= correction
    density = xp.fft.ifft2(density_spectrum * kernel).real
    image = xp.fft.ifft2(numerator).real
    floor = 1e-6 * float(density.max())
    return image / xp.maximum(density, floor)


def parallax(
    source: Any,
    *,
    calibration: Calibration | None = None,
    scan_region: Any = None,
    bin_factor: int = 1,
    disk_fraction: float = DEFAULT_DISK_FRACTION,
    align_upsample: int = DEFAULT_UPSAMPLE,
    iterations: int = DEFAULT_ITERATIONS,
    edge: float = DEFAULT_EDGE,
    lowpass: float = 0.0,
    max_shift: float | None = None,
    c10_guess_angstrom: float | None = None,
    fit: bool = True,
    transpose: bool | None = None,
    rotation_hint_deg: float | None = None,
    upsample: int = DEFAULT_RECONSTRUCTION_UPSAMPLE,
    kernel_sigma: float = DEFAULT_KERNEL_SIGMA,
    use_fitted_shifts: bool = True,
    correct_aberrations: bool = False,
    accept_calibration_mismatch: bool = False,
) -> ParallaxResult:
    """Tilt-corrected bright-field reconstruction with the aberration fit (module docstring).

    The fit needs ``calibration`` with the detector's angular pixel size (or convergence
    angle; the BF radius defaults to the automatic disk estimate) and the scan step;
    ``correct_aberrations`` also needs the beam energy. Every given calibration is applied
    or checked against the data, else refused; a gross mismatch is an error unless
    ``accept_calibration_mismatch`` (:mod:`quantem.stem4d.virtual.calibration_check`).

    ``c10_guess_angstrom`` (C10 = -defocus, at the entrance surface) with
    ``rotation_hint_deg`` (and ``transpose``) predicts every BF image's shift, and the
    alignment searches only the residual within ``max_shift`` of it, coarse to fine in beam
    angle (:mod:`quantem.stem4d.parallax.guided`), so a wrong guess is still corrected. Shifts at the bound, and
    a rotation the fit cannot determine, are a :class:`ParallaxWarning` and are listed in
    ``warnings`` of the result.
    """
    frames = open_frames(source, scan_region=scan_region)
    stack = build_stack(frames, disk_fraction=disk_fraction, bin_factor=bin_factor)
    if c10_guess_angstrom is not None and not fit:
        raise ComputeError(
            "c10_guess_angstrom seeds the aberration fit's alignment: needs fit=True"
        )
    if c10_guess_angstrom is not None and not math.isfinite(c10_guess_angstrom):
        raise ComputeError(f"c10_guess_angstrom must be finite, got {c10_guess_angstrom!r}")
    result_fit, check, angles = None, [], None
    if fit:
        calibration, check = parallax_calibration(
            calibration,
            stack,
            correct_aberrations=correct_aberrations,
            accept_mismatch=accept_calibration_mismatch,
        )
        angles = stack.positions * (calibration.detector_mrad_per_pixel * 1e-3)

    options = dict(upsample=align_upsample, iterations=iterations, edge=edge, lowpass=lowpass)
    if c10_guess_angstrom is None:
        alignment = align(stack.images, max_shift=max_shift, **options)
    else:
        alignment = guided_align(
            stack.images,
            angles,
            calibration.scan_step,
            c10_guess_angstrom,
            rotation_deg=rotation_hint_deg,
            transpose=transpose,
            max_shift=max_shift,
            **options,
        )
    if fit:
        result_fit = fit_aberrations(
            to_numpy(alignment.shifts),
            angles,
            calibration.scan_step,
            transpose=transpose,
            rotation_hint_deg=rotation_hint_deg,
        )
    notes = []
    if alignment.at_bound:
        notes.append(
            f"{alignment.at_bound} of {len(stack.positions)} bright-field shifts reached the "
            f"edge of the search range (max_shift {max_shift} scan px"
            + (" around the guess)" if c10_guess_angstrom is not None else ")")
            + ": the true shifts may lie beyond it and the fit may be wrong"
            + (
                "; give c10_guess_angstrom (and rotation_hint_deg)"
                if c10_guess_angstrom is None
                else ""
            )
        )
    if result_fit is not None and not result_fit.rotation_determined:
        notes.append(
            f"the rotation is undetermined: its standard error is "
            f"{result_fit.rotation_uncertainty_deg:.3g} deg (the shifts are too small, as "
            "near focus)"
        )
    if result_fit is not None and not result_fit.c10_determined:
        notes.append(
            f"C10 is undetermined: the inner and outer bright-field images give "
            f"{result_fit.c10_inner_angstrom:.3g} and {result_fit.c10_outer_angstrom:.3g} A, "
            "beyond their standard errors and by more than a fifth of the whole disk's "
            f"{result_fit.c10_angstrom:.3g} A (the images are not shifted copies of one image, "
            "as in focus): that value is no measurement of the defocus"
        )
    if result_fit is not None:
        result_fit, note = check_fit(stack.images, alignment.shifts, result_fit, edge)
        if note is not None:
            notes.append(note)
    for note in notes:
        warnings.warn(f"parallax: {note}", ParallaxWarning, stacklevel=2)
    xp = array_module(stack.images)
    shifts = alignment.shifts
    if result_fit is not None and use_fitted_shifts:
        shifts = xp.asarray(result_fit.fitted_shifts)
    image = shift_and_sum(stack.images, shifts, upsample=upsample, kernel_sigma=kernel_sigma)
    corrected = None
    if correct_aberrations:
        if result_fit is None:
            raise ComputeError("correct_aberrations needs the aberration fit (fit=True)")
        step = calibration.scan_step
        fine = (image.shape[0], image.shape[1])
        sign = aberration_sign(
            fine,
            (step[0] / upsample, step[1] / upsample),
            result_fit,
            calibration.wavelength_angstrom,
            xp,
        )
        corrected = shift_and_sum(
            stack.images, shifts, upsample=upsample, kernel_sigma=kernel_sigma, correction=sign
        )
    parameters = {
        "bin_factor": int(bin_factor),
        "disk_fraction": disk_fraction,
        "align_upsample": int(align_upsample),
        "iterations": int(iterations),
        "edge": edge,
        "lowpass": lowpass,
        "max_shift": max_shift,
        "c10_guess_angstrom": c10_guess_angstrom,
        "rotation_hint_deg": rotation_hint_deg,
        "upsample": int(upsample),
        "kernel_sigma": kernel_sigma,
        "use_fitted_shifts": bool(use_fitted_shifts and result_fit is not None),
        "correct_aberrations": bool(correct_aberrations),
    }
    if not fit and calibration is not None and calibration.given():
        raise CalibrationError(
            f"parallax: fit=False uses no calibration, but {', '.join(calibration.given())} "
            "was given"
        )
    return ParallaxResult(
        stack,
        alignment,
        result_fit,
        image,
        corrected,
        parameters,
        None if calibration is None else calibration.to_dict(),
        check,
        notes,
    )


__all__ = [
    "DEFAULT_KERNEL_SIGMA",
    "DEFAULT_RECONSTRUCTION_UPSAMPLE",
    "FIT_FIELDS",
    "UNITS",
    "ParallaxResult",
    "parallax",
    "parallax_calibration",
    "shift_and_sum",
]
