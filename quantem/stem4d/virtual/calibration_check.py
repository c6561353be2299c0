"""Given calibrations checked against what the data show (docs/compute.md, "Calibration checks").

Three rules, each a :class:`Finding` (``ok``, ``warning`` or ``error``):

* ``bf_radius``: the bright-field disk radius expected from the semi-angle and the
  detector sampling (``convergence_mrad / mrad_per_pixel``; with a reciprocal-space
  sampling ``dk`` it is ``convergence / (lambda * dk)``, so the beam energy is checked too)
  against the measured radius. The measured radius is good to a few per cent, so a
  mismatch over :data:`RADIUS_TOLERANCE` is a warning and one over :data:`RADIUS_GROSS` an
  error. With the sampling in mrad the energy does not enter the radius: a wrong voltage
  is then caught only where the sampling is given in 1/A.
* ``scan_step``: a step under :data:`STEP_PROBE_FRACTION` of the focused probe's diameter
  (``1.22 lambda / alpha``) is implausible for a real scan (typical of a step in nm
  entered as angstrom): a warning.
* ``rotation``: a given scan-detector rotation against the curl-minimising DPC estimate
  (modulo the half turn the curl cannot see): over :data:`ROTATION_TOLERANCE_DEG` a
  warning, over :data:`ROTATION_GROSS_DEG` an error.

:func:`settle` turns findings into :class:`~quantem.stem4d.errors.CalibrationWarning`
warnings and, for errors, a :class:`~quantem.stem4d.errors.CalibrationError` unless the
caller accepts the mismatch (then a warning).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from quantem.stem4d.errors import CalibrationError, CalibrationWarning
from quantem.stem4d.virtual.calibration import Calibration

#: Relative BF radius mismatch beyond which a warning is given (the estimate's accuracy
#: is a few per cent on binned detectors with radii of 6 px and more).
RADIUS_TOLERANCE = 0.07
#: Relative BF radius mismatch beyond which the run is refused unless overridden.
RADIUS_GROSS = 0.25
#: A scan step under this fraction of the focused probe's diameter is implausible.
STEP_PROBE_FRACTION = 1.0 / 8.0
#: Given rotation against the DPC estimate: warning and error thresholds (degrees).
ROTATION_TOLERANCE_DEG = 5.0
ROTATION_GROSS_DEG = 25.0

#: "unchecked": the rule could not be applied (the data do not determine the quantity).
STATUSES = ("ok", "warning", "error", "unchecked")


@dataclass(frozen=True)
class Finding:
    """One rule's verdict on the given calibration."""

    rule: str
    status: str
    message: str
    expected: float | None = None
    measured: float | None = None

    def to_dict(self) -> dict:
        return {
            "rule": self.rule,
            "status": self.status,
            "message": self.message,
            "expected": self.expected,
            "measured": self.measured,
        }


def expected_bf_radius_px(calibration: Calibration) -> float | None:
    """The BF disk radius the given semi-angle and detector sampling predict (None: unknown)."""
    if calibration.convergence_mrad is None or not calibration.has_detector_sampling:
        return None
    if calibration.mrad_per_pixel is None and calibration.energy_ev is None:
        return None
    return calibration.convergence_mrad / calibration.detector_mrad_per_pixel


def check_bf_radius(calibration: Calibration, measured_px: float) -> Finding | None:
    expected = expected_bf_radius_px(calibration)
    if expected is None:
        return None
    mismatch = measured_px / expected - 1.0
    status = (
        "error"
        if abs(mismatch) > RADIUS_GROSS
        else "warning"
        if abs(mismatch) > RADIUS_TOLERANCE
        else "ok"
    )
    sampling = (
        f"mrad_per_pixel {calibration.mrad_per_pixel:g}"
        if calibration.mrad_per_pixel is not None
        else f"inverse_angstrom_per_pixel {calibration.inverse_angstrom_per_pixel:g} at "
        f"energy_ev {calibration.energy_ev:g}"
    )
    message = (
        f"BF disk radius: convergence_mrad {calibration.convergence_mrad:g} with {sampling} "
        f"predicts {expected:.2f} px, the data show {measured_px:.2f} px "
        f"({100 * mismatch:+.1f}%, tolerance {100 * RADIUS_TOLERANCE:g}%)"
    )
    return Finding("bf_radius", status, message, expected, float(measured_px))


def probe_diameter_angstrom(calibration: Calibration) -> float:
    """Diameter of the focused probe's central disk (Airy), ``1.22 lambda / alpha``."""
    return 1.22 * calibration.wavelength_angstrom / (calibration.convergence_mrad * 1e-3)


def check_scan_step(calibration: Calibration) -> Finding | None:
    if (
        calibration.scan_step_angstrom is None
        or calibration.energy_ev is None
        or calibration.convergence_mrad is None
    ):
        return None
    probe = probe_diameter_angstrom(calibration)
    step = min(calibration.scan_step_angstrom)
    low = STEP_PROBE_FRACTION * probe
    status = "warning" if step < low else "ok"
    message = (
        f"scan step {step:g} A against a focused probe of {probe:.3g} A diameter "
        f"(energy_ev {calibration.energy_ev:g}, convergence_mrad "
        f"{calibration.convergence_mrad:g}); under {low:.3g} A is implausible "
        "(a step in nm given as angstrom?)"
    )
    return Finding("scan_step", status, message, low, step)


def rotation_difference_deg(given_deg: float, estimate_deg: float) -> float:
    """|given - estimate| modulo the half turn, in [0, 90]."""
    difference = (given_deg - estimate_deg) % 180.0
    return min(difference, 180.0 - difference)


def check_rotation(
    given_deg: float, given_transpose: bool, estimate_deg: float, estimate_transpose: bool
) -> Finding:
    difference = rotation_difference_deg(given_deg, estimate_deg)
    if bool(given_transpose) != bool(estimate_transpose) or difference > ROTATION_GROSS_DEG:
        status = "error"
    elif difference > ROTATION_TOLERANCE_DEG:
        status = "warning"
    else:
        status = "ok"
    message = (
        f"rotation: given {given_deg:g} deg (transpose {bool(given_transpose)}), the DPC curl "
        f"estimate is {estimate_deg:.2f} deg (transpose {bool(estimate_transpose)}), "
        f"{difference:.2f} deg apart modulo 180 (tolerance {ROTATION_TOLERANCE_DEG:g})"
    )
    return Finding("rotation", status, message, float(estimate_deg), float(given_deg))


def settle(
    findings: list[Finding | None], *, workload: str, accept_mismatch: bool = False
) -> list[dict]:
    """Warn for each warning; refuse on an error unless ``accept_mismatch``; the record."""
    kept = [f for f in findings if f is not None]
    for finding in kept:
        if finding.status == "error" and not accept_mismatch:
            raise CalibrationError(
                f"{workload}: {finding.message}; fix the parameter, or accept the mismatch "
                "(accept_calibration_mismatch=True, --accept-calibration-mismatch)"
            )
        if finding.status in ("warning", "error"):
            warnings.warn(f"{workload}: {finding.message}", CalibrationWarning, stacklevel=3)
    return [f.to_dict() for f in kept]


__all__ = [
    "RADIUS_GROSS",
    "RADIUS_TOLERANCE",
    "ROTATION_GROSS_DEG",
    "ROTATION_TOLERANCE_DEG",
    "STEP_PROBE_FRACTION",
    "Finding",
    "check_bf_radius",
    "check_rotation",
    "check_scan_step",
    "expected_bf_radius_px",
    "probe_diameter_angstrom",
    "rotation_difference_deg",
    "settle",
]
