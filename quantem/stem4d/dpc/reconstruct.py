"""Differential phase contrast: CoM, scan-detector rotation, iDPC phase and dDPC.

:func:`dpc` runs the stages in order; each stage is a public function so the harness can
time them apart (``harness run compute dpc``):

1. :func:`measure_com`: exact centre of mass per frame (:mod:`quantem.stem4d.detector`), in
   detector pixels.
2. :func:`beam_shifts`: the CoM relative to its scan mean (descan removed), NaN (frames
   without counts) replaced by 0, as float64 (or float32 on CUDA by option), converted to
   a phase gradient when the calibration allows.
3. :func:`quantem.stem4d.dpc.rotation.find_rotation` (unless the rotation is given).
4. :func:`reconstruct`: rotation into scan axes, Fourier integration (iDPC) and
   divergence (dDPC); the half-turn the curl leaves open is chosen so that the phase has
   positive skewness (atoms are sparse positive peaks of the projected potential).

Units: with a calibration giving the detector's angular pixel size, the beam energy and
the scan step, the gradient is ``2 pi alpha / lambda`` (rad/A; ``alpha`` the beam tilt in
rad), the phase is in rad and the divergence in rad/A^2. Without any calibration, the
gradient is the shift in detector pixels, the step one scan pixel, and the phase is in
pixel*pixel. A calibration that is given but cannot be applied in full (a beam energy
without a scan step, say) is refused with :class:`CalibrationError` naming what is
missing: never dropped. A convergence angle without a detector sampling is completed with
the measured BF disk radius, recorded as derived. Given values are checked against the
data (:mod:`quantem.stem4d.virtual.calibration_check`): the BF radius, the scan step
against the probe size, and a given rotation against the curl estimate. A given
``c10_angstrom`` (the probe's defocus, C10 = -defocus) far beyond the probe's depth of
field is a :class:`DPCWarning` (:mod:`quantem.stem4d.dpc.focus`): the iDPC phase is then
the phase averaged over a wide probe, no image of the specimen's detail.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

from quantem.stem4d.arrays import array_module, to_numpy
from quantem.stem4d.detector.session import CenterOfMass
from quantem.stem4d.dpc.fields import divergence, rotate_field
from quantem.stem4d.dpc.focus import defocus_note
from quantem.stem4d.dpc.integrate import DEFAULT_LOW_FREQUENCY_REGULARIZATION, integrate_gradient
from quantem.stem4d.dpc.rotation import MAX_RESIDUAL_CURL, RotationFit, find_rotation
from quantem.stem4d.errors import CalibrationError, ComputeError, DPCWarning
from quantem.stem4d.virtual.calibration import Calibration
from quantem.stem4d.virtual.calibration_check import (
    Finding,
    check_bf_radius,
    check_rotation,
    check_scan_step,
    settle,
)
from quantem.stem4d.virtual.frames import Frames, open_frames

DTYPES = ("float64", "float32")


@dataclass
class BeamShifts:
    """Mean-free beam shifts in detector axes and what they are measured in."""

    row: Any
    col: Any
    step: tuple[float, float]
    units: str  # "rad/A" (phase gradient) or "px" (detector pixels)
    mean_com: tuple[float, float]


@dataclass
class DPCResult:
    """Outputs and fitted parameters of :func:`dpc` (arrays on the source's backend)."""

    com_row: Any
    com_col: Any
    gradient_row: Any
    gradient_col: Any
    phase: Any
    divergence: Any
    rotation: RotationFit
    rotation_deg: float
    half_turn: bool
    units: dict = field(default_factory=dict)
    parameters: dict = field(default_factory=dict)
    calibration: dict | None = None
    calibration_check: list = field(default_factory=list)
    warnings: list = field(default_factory=list)

    def outputs(self) -> dict[str, Any]:
        """Every output array by name (the names ``harness run compute dpc`` saves)."""
        return {
            "com_row": self.com_row,
            "com_col": self.com_col,
            "gradient_row": self.gradient_row,
            "gradient_col": self.gradient_col,
            "phase": self.phase,
            "divergence": self.divergence,
        }

    def fitted(self) -> dict:
        """The fitted parameters as plain JSON values."""
        return {
            "rotation_deg": self.rotation_deg,
            "transpose": self.rotation.transpose,
            "half_turn_flipped": self.half_turn,
            "residual_curl": self.rotation.residual,
            "residual_curl_other_transpose": self.rotation.residual_other,
            "units": dict(self.units),
            "calibration": self.calibration,
            "calibration_check": list(self.calibration_check),
            "warnings": list(self.warnings),
        }


def measure_com(frames: Frames, mask: Any = None) -> CenterOfMass:
    """Exact per-frame centre of mass (detector pixels from the centre of pixel (0, 0))."""
    return frames.center_of_mass(mask)


def beam_shifts(
    com: CenterOfMass, calibration: Calibration | None = None, dtype: str = "float64"
) -> BeamShifts:
    """CoM minus its scan mean (NaN -> 0), in ``dtype``, as a phase gradient if calibrated."""
    if dtype not in DTYPES:
        raise ComputeError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    xp = array_module(com.row)
    if xp.__name__ == "numpy" and dtype != "float64":
        raise ComputeError("CPU outputs are float64; float32 is a CUDA option")
    step, units, scale = (1.0, 1.0), "px", None
    if calibration is not None and calibration.given():
        try:
            mrad_per_pixel = calibration.detector_mrad_per_pixel
            wavelength = calibration.wavelength_angstrom
            step = calibration.scan_step
        except CalibrationError as exc:
            # A given calibration is applied in full or refused, never dropped.
            raise CalibrationError(
                f"dpc: the calibration given ({', '.join(calibration.given())}) cannot be "
                f"applied: {exc}. The phase gradient needs the detector's angular pixel "
                "size, the beam energy and the scan step; give all of them or none"
            ) from None
        scale = (2 * math.pi * mrad_per_pixel * 1e-3) / wavelength
        units = "rad/A"
    device = xp.__name__ != "numpy"
    if device:
        from quantem.stem4d.cuda import dpc_fields

        # One launch; the count and the two sums reach the host together.
        n_valid, sum_r, sum_c = dpc_fields.com_sums(com.row, com.col)
    else:
        valid = ~(xp.isnan(com.row) | xp.isnan(com.col))
        n_valid = int(valid.sum())
        sum_r = float(xp.where(valid, com.row, 0).sum())
        sum_c = float(xp.where(valid, com.col, 0).sum())
    if n_valid == 0:
        raise ComputeError("no frame has counts in the CoM mask: the CoM is undefined")
    mean_r = float(sum_r) / n_valid
    mean_c = float(sum_c) / n_valid
    if device:
        shift_r, shift_c = dpc_fields.beam_shifts(
            com.row, com.col, (mean_r, mean_c), 1.0 if scale is None else scale, dtype
        )
        return BeamShifts(shift_r, shift_c, step, units, (mean_r, mean_c))
    shift_r = xp.where(valid, com.row - mean_r, 0.0)
    shift_c = xp.where(valid, com.col - mean_c, 0.0)
    if scale is not None:
        shift_r = shift_r * scale
        shift_c = shift_c * scale
    return BeamShifts(shift_r.astype(dtype), shift_c.astype(dtype), step, units, (mean_r, mean_c))


def complete_calibration(calibration: Calibration | None, frames: Frames) -> Calibration | None:
    """The calibration with the BF radius measured when only a convergence angle sets the scale."""
    if (
        calibration is None
        or calibration.convergence_mrad is None
        or calibration.has_detector_sampling
        or calibration.bf_radius_px is not None
    ):
        return calibration
    return calibration.with_disk_radius(frames.disk().radius)


def check_dpc_calibration(
    calibration: Calibration | None,
    frames: Frames,
    shifts: BeamShifts,
    rotation: RotationFit,
    *,
    rotation_given: bool,
    accept_mismatch: bool = False,
) -> list[dict]:
    """The calibration checks of a DPC run (warnings; an error unless ``accept_mismatch``)."""
    findings = []
    if calibration is not None:
        if calibration.has_detector_sampling and calibration.convergence_mrad is not None:
            findings.append(check_bf_radius(calibration, frames.disk().radius))
        findings.append(check_scan_step(calibration))
    if rotation_given:
        estimate = find_rotation(shifts.row, shifts.col, step=shifts.step)
        if estimate.residual > MAX_RESIDUAL_CURL:
            findings.append(
                Finding(
                    "rotation",
                    "unchecked",
                    f"rotation: the DPC field keeps a relative curl of {estimate.residual:.2f} "
                    f"at its best angle (over {MAX_RESIDUAL_CURL}): its estimate cannot judge "
                    "the given rotation",
                )
            )
        else:
            findings.append(
                check_rotation(
                    rotation.angle_deg, rotation.transpose, estimate.angle_deg, estimate.transpose
                )
            )
    return settle(findings, workload="dpc", accept_mismatch=accept_mismatch)


def units_of(gradient_units: str) -> dict[str, str]:
    """Every DPC output's unit, from the gradient's."""
    calibrated = gradient_units == "rad/A"
    return {
        "com": "detector px",
        "gradient": gradient_units,
        "phase": "rad" if calibrated else "px*px",
        "divergence": "rad/A^2" if calibrated else "px",
    }


def _skewness(values: Any) -> float:
    xp = array_module(values)
    if xp.__name__ != "numpy":
        from quantem.stem4d.cuda.dpc_fields import skewness

        return skewness(values)
    centred = values - values.mean()
    square = centred * centred
    second, third = to_numpy(xp.stack([square.mean(), (square * centred).mean()])).tolist()
    return third / second**1.5 if second > 0 else 0.0


def _negated(*arrays: Any) -> tuple[Any, ...]:
    if array_module(arrays[0]).__name__ != "numpy":
        from quantem.stem4d.cuda.dpc_fields import negate

        return negate(*arrays)
    return tuple(-a for a in arrays)


def reconstruct(
    shifts: BeamShifts,
    rotation: RotationFit,
    *,
    low_frequency_regularization: float = DEFAULT_LOW_FREQUENCY_REGULARIZATION,
    boundary: str = "mirror",
    resolve_half_turn: bool = True,
) -> tuple[Any, Any, Any, Any, float, bool]:
    """Rotate, integrate and differentiate: ``(grad_r, grad_c, phase, div, angle, flipped)``."""
    grad_r, grad_c = rotate_field(shifts.row, shifts.col, rotation.angle_deg, rotation.transpose)
    phase = integrate_gradient(
        grad_r,
        grad_c,
        step=shifts.step,
        low_frequency_regularization=low_frequency_regularization,
        boundary=boundary,
    )
    angle, flipped = rotation.angle_deg, False
    if resolve_half_turn and _skewness(phase) < 0:
        # A half turn negates the field and everything linear in it.
        grad_r, grad_c, phase = _negated(grad_r, grad_c, phase)
        angle, flipped = (angle + 180.0) % 360.0, True
    div = divergence(grad_r, grad_c, shifts.step)
    return grad_r, grad_c, phase, div, angle, flipped


def dpc(
    source: Any,
    *,
    calibration: Calibration | None = None,
    rotation_deg: float | None = None,
    transpose: bool | None = None,
    mask: Any = None,
    scan_region: Any = None,
    dtype: str = "float64",
    low_frequency_regularization: float = DEFAULT_LOW_FREQUENCY_REGULARIZATION,
    boundary: str = "mirror",
    accept_calibration_mismatch: bool = False,
    c10_angstrom: float | None = None,
) -> DPCResult:
    """CoM, rotation (by minimum curl unless ``rotation_deg`` is given), iDPC and dDPC.

    ``source``: anything :func:`~quantem.stem4d.virtual.frames.open_frames` accepts. A given
    ``rotation_deg`` is used as it is (with ``transpose``, default False), without the
    half-turn choice. The calibration is applied in full or refused, and checked against
    the data (module docstring); ``accept_calibration_mismatch`` turns a gross mismatch
    from an error into a warning. ``c10_angstrom``, the probe's defocus as known (set on the
    microscope, or fitted by parallax or SSB), needs the beam energy and convergence angle;
    beyond :data:`quantem.stem4d.dpc.focus.MAX_DEPTHS_OF_FIELD` depths of field it is a
    :class:`DPCWarning`, also listed in ``warnings`` of the result.
    """
    # before any work: a defocus without the optics to judge it is refused
    notes = []
    if c10_angstrom is not None:
        note = defocus_note(float(c10_angstrom), calibration)
        if note is not None:
            notes.append(note)
            warnings.warn(f"dpc: {note}", DPCWarning, stacklevel=2)
    frames = open_frames(source, scan_region=scan_region)
    com = measure_com(frames, mask)
    calibration = complete_calibration(calibration, frames)
    shifts = beam_shifts(com, calibration, dtype)
    if rotation_deg is None:
        rotation = find_rotation(shifts.row, shifts.col, transpose=transpose, step=shifts.step)
    else:
        rotation = RotationFit(float(rotation_deg), bool(transpose), math.nan, None)
    grad_r, grad_c, phase, div, angle, flipped = reconstruct(
        shifts,
        rotation,
        low_frequency_regularization=low_frequency_regularization,
        boundary=boundary,
        resolve_half_turn=rotation_deg is None,
    )
    check = check_dpc_calibration(
        calibration,
        frames,
        shifts,
        rotation,
        rotation_given=rotation_deg is not None,
        accept_mismatch=accept_calibration_mismatch,
    )
    units = units_of(shifts.units)
    parameters = {
        "dtype": dtype,
        "low_frequency_regularization": low_frequency_regularization,
        "boundary": boundary,
        "c10_angstrom": c10_angstrom,
        "mean_com": list(shifts.mean_com),
        "scan_step": list(shifts.step),
    }
    return DPCResult(
        com.row,
        com.col,
        grad_r,
        grad_c,
        phase,
        div,
        rotation,
        angle,
        flipped,
        units,
        parameters,
        None if calibration is None else calibration.to_dict(),
        check,
        notes,
    )


__all__ = [
    "DTYPES",
    "BeamShifts",
    "DPCResult",
    "beam_shifts",
    "check_dpc_calibration",
    "complete_calibration",
    "dpc",
    "measure_com",
    "reconstruct",
    "units_of",
]
