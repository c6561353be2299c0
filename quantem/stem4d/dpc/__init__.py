"""Differential phase contrast: CoM, rotation by minimum curl, iDPC and dDPC (``docs/compute.md``)."""

from quantem.stem4d.dpc.fields import curl, divergence, rotate_field
from quantem.stem4d.dpc.integrate import integrate_gradient
from quantem.stem4d.dpc.reconstruct import (
    BeamShifts,
    DPCResult,
    beam_shifts,
    check_dpc_calibration,
    complete_calibration,
    dpc,
    measure_com,
    reconstruct,
    units_of,
)
from quantem.stem4d.dpc.rotation import RotationFit, find_rotation

__all__ = [
    "BeamShifts",
    "DPCResult",
    "RotationFit",
    "beam_shifts",
    "check_dpc_calibration",
    "complete_calibration",
    "curl",
    "divergence",
    "dpc",
    "find_rotation",
    "integrate_gradient",
    "measure_com",
    "reconstruct",
    "rotate_field",
    "units_of",
]
