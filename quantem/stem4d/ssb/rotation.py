"""The scan-detector rotation SSB uses: given, or estimated by :mod:`quantem.stem4d.dpc`.

SSB needs the detector angles in scan axes, so it needs the rotation (and whether the
detector axes are swapped) from the detector frame to the scan frame. When the caller
does not give it (``Calibration(rotation_deg=None)``), it is the DPC estimate: the exact
centre of mass of every frame (:mod:`quantem.stem4d.detector`'s integer moments), the mean-free
beam shifts (:func:`quantem.stem4d.dpc.beam_shifts`), the rotation that makes that field
curl-free (:func:`quantem.stem4d.dpc.find_rotation`, closed form) and the half turn the curl
leaves open chosen by :func:`quantem.stem4d.dpc.reconstruct` (the integrated phase of atoms is
positively skewed). A half turn matters to SSB: it maps each left double-overlap region
onto a right one, which the loss cannot tell apart from the opposite aberrations and the
conjugate object, so it has to come from outside SSB.

The estimate is refused (:class:`~quantem.stem4d.errors.CalibrationError`, asking for the
rotation) when the field is far from curl-free (:data:`MAX_RESIDUAL_CURL`): then its
angle means little, and a wrong rotation would give a wrong object without a sign. The
half-turn rule assumes a thin sample; channelling in a thick one can turn its phase's
skewness over (the thick abTEM slab of tests/data/ssb does), so give the rotation there.

The sign conventions are the same on both sides: DPC rotates a detector-frame vector
``(r, c)`` into ``(cos a r - sin a c, sin a r + cos a c)``, and so does
:func:`quantem.stem4d.ssb.prepare` with the detector angles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.dpc import beam_shifts, find_rotation, measure_com
from quantem.stem4d.dpc import reconstruct as dpc_reconstruct
from quantem.stem4d.dpc.rotation import MAX_RESIDUAL_CURL
from quantem.stem4d.errors import CalibrationError
from quantem.stem4d.virtual import Calibration as DPCCalibration
from quantem.stem4d.virtual import open_frames

#: Where the rotation of a reconstruction came from.
ROTATION_SOURCES = ("given", "dpc")


@dataclass(frozen=True)
class RotationEstimate:
    """The rotation a reconstruction used and where it came from.

    Attributes
    ----------
    rotation_deg
        From the detector axes to the scan axes (the half turn resolved for ``"dpc"``).
    transpose
        Whether the detector axes are swapped before rotating.
    source
        ``"given"`` (by the caller) or ``"dpc"`` (the curl-minimising DPC estimate).
    residual_curl
        DPC only: relative RMS curl left at the estimate (0 for a curl-free field).
    residual_curl_other_transpose
        DPC only, when the transpose was not given: the same for the other choice.
    half_turn_flipped
        DPC only: whether the half-turn choice added 180 degrees to the curl's angle.
    """

    rotation_deg: float
    transpose: bool
    source: str
    residual_curl: float | None = None
    residual_curl_other_transpose: float | None = None
    half_turn_flipped: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "rotation_deg": float(self.rotation_deg),
            "transpose": bool(self.transpose),
            "source": self.source,
            "residual_curl": self.residual_curl,
            "residual_curl_other_transpose": self.residual_curl_other_transpose,
            "half_turn_flipped": self.half_turn_flipped,
        }


def given_rotation(rotation_deg: float, transpose: bool = False) -> RotationEstimate:
    return RotationEstimate(float(rotation_deg), bool(transpose), "given")


def rotation_from_com(
    com: Any,
    *,
    energy_ev: float,
    semiangle_mrad: float,
    detector_sampling_mrad: tuple[float, float],
    scan_step_a: tuple[float, float],
    transpose: bool | None = None,
) -> RotationEstimate:
    """The DPC estimate from a centre-of-mass field (``com.row``, ``com.col``, detector px).

    ``detector_sampling_mrad`` is per detector axis (row, column) of the CoM's pixels; the
    scan step enters the curl, so an anisotropic step is respected.
    """
    sampling_r, sampling_c = (float(v) for v in detector_sampling_mrad)
    calibration = DPCCalibration(
        energy_ev=float(energy_ev),
        convergence_mrad=float(semiangle_mrad),
        mrad_per_pixel=sampling_r,
        scan_step_angstrom=tuple(float(v) for v in scan_step_a),
    )
    shifts = beam_shifts(com, calibration, "float64")
    if not math.isclose(sampling_r, sampling_c, rel_tol=0, abs_tol=0):
        # beam_shifts scales both axes by the row sampling; put the column's right.
        shifts.col = shifts.col * (sampling_c / sampling_r)
    fit = find_rotation(shifts.row, shifts.col, transpose=transpose, step=shifts.step)
    if not fit.residual <= MAX_RESIDUAL_CURL:
        raise CalibrationError(
            f"the DPC rotation estimate is not reliable on this data: the centre-of-mass "
            f"field keeps a relative curl of {fit.residual:.2f} at its best angle "
            f"({fit.angle_deg:.1f} deg; at most {MAX_RESIDUAL_CURL} is accepted). A detector "
            "cropped to the bright-field disk or strong dynamical scattering do this: give "
            "the rotation (Calibration rotation_deg, --rotation-deg)"
        )
    *_, angle, flipped = dpc_reconstruct(shifts, fit, resolve_half_turn=True)
    return RotationEstimate(
        rotation_deg=float(angle),
        transpose=bool(fit.transpose),
        source="dpc",
        residual_curl=float(fit.residual),
        residual_curl_other_transpose=None
        if fit.residual_other is None
        else float(fit.residual_other),
        half_turn_flipped=bool(flipped),
    )


def center_of_mass(data: Any, validity: Any = None) -> Any:
    """The exact per-frame CoM of an in-memory 4D array (numpy or CuPy), in detector px.

    Float data on the GPU is copied to the host for it (the GPU products are integer-only).

    Through :mod:`quantem.stem4d.dpc` and :mod:`quantem.stem4d.detector` (integer moments, exact ratio),
    so it is the CoM ``harness run compute dpc`` measures.
    """
    backend = "cuda" if type(data).__module__.split(".")[0] == "cupy" else "cpu"
    if backend == "cuda" and np.dtype(data.dtype).kind == "f":
        # The GPU detector kernels are integer-only; float frames take the CPU's fixed order.
        data, backend = data.get(), "cpu"
    if validity is None:
        validity = np.ones(tuple(int(v) for v in data.shape[2:]), dtype=bool)
    scan_r, scan_c, det_r, det_c = (int(v) for v in data.shape)
    metadata = {
        "scan_shape": (scan_r, scan_c),
        "detector_shape": (det_r, det_c),
        "dtype": str(data.dtype),
        "n_frames": scan_r * scan_c,
    }
    acq = Acquisition(data, metadata, np.asarray(validity, dtype=bool), backend)
    return measure_com(open_frames(acq))


__all__ = [
    "MAX_RESIDUAL_CURL",
    "ROTATION_SOURCES",
    "RotationEstimate",
    "center_of_mass",
    "given_rotation",
    "rotation_from_com",
]
