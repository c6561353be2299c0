"""Calibration of an SSB reconstruction: beam energy, probe aperture, detector and scan.

All angles inside :mod:`quantem.stem4d.ssb` are scattering angles in radians expressed in the
*scan* frame: detector pixel offsets from the undiffracted beam are scaled by the angular
sampling and rotated by ``rotation_deg`` (the angle from the detector axes to the scan
axes). Axis 0 of the scan (rows, the slow axis) is "x" and axis 1 (columns) is "y", as in
abTEM; aberration angles (phi12, phi21, ...) are measured from axis 0 towards axis 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Electron rest energy, eV; Planck constant times the speed of light, eV*Angstrom.
ELECTRON_REST_ENERGY_EV = 510998.95
HC_EV_ANGSTROM = 12398.419843320026


def electron_wavelength_a(energy_ev: float) -> float:
    """Relativistic electron wavelength in Angstrom for a beam energy in eV."""
    if not (math.isfinite(energy_ev) and energy_ev > 0):
        raise ValueError(f"beam energy must be a positive number of eV, got {energy_ev!r}")
    return HC_EV_ANGSTROM / math.sqrt(energy_ev * (2 * ELECTRON_REST_ENERGY_EV + energy_ev))


@dataclass(frozen=True)
class Calibration:
    """What SSB needs to know about the experiment.

    Parameters
    ----------
    energy_ev
        Beam energy (``--voltage-kv`` * 1000).
    semiangle_mrad
        Convergence semi-angle of the probe (``--semiangle-mrad``).
    scan_step_a
        Scan step in Angstrom (``--scan-step-a``), one number or (rows, columns).
    rotation_deg
        Rotation from the detector axes to the scan axes (``--rotation-deg``). ``None``
        (the default): estimated by :func:`quantem.stem4d.ssb.prepare` from the data with the
        curl-minimising DPC estimate of :mod:`quantem.stem4d.dpc` (see
        :mod:`quantem.stem4d.ssb.rotation`); the prepared result records which was used.
    transpose
        Whether the detector axes are swapped before rotating (as in :mod:`quantem.stem4d.dpc`).
        ``None``: given as False with a given rotation, chosen by the DPC estimate (the
        smaller residual curl) without one.
    detector_sampling_mrad
        Angular size of one detector pixel (after binning is applied by :func:`prepare`,
        give the unbinned value here). ``None``: derived from the measured bright-field
        disk radius as ``semiangle_mrad / radius_px``.
    """

    energy_ev: float
    semiangle_mrad: float
    scan_step_a: float | tuple[float, float]
    rotation_deg: float | None = None
    detector_sampling_mrad: float | tuple[float, float] | None = None
    transpose: bool | None = None

    def __post_init__(self) -> None:
        electron_wavelength_a(self.energy_ev)
        if not (math.isfinite(self.semiangle_mrad) and self.semiangle_mrad > 0):
            raise ValueError(f"semiangle_mrad must be positive, got {self.semiangle_mrad!r}")
        step = _pair(self.scan_step_a, "scan_step_a")
        object.__setattr__(self, "scan_step_a", step)
        if self.rotation_deg is not None:
            try:
                rotation = float(self.rotation_deg)
            except (TypeError, ValueError):
                rotation = math.nan
            if not math.isfinite(rotation):
                raise ValueError(f"rotation_deg must be finite or None, got {self.rotation_deg!r}")
            object.__setattr__(self, "rotation_deg", rotation)
        if self.transpose is not None and not isinstance(self.transpose, (bool, np.bool_)):
            raise ValueError(f"transpose must be True, False or None, got {self.transpose!r}")
        if self.detector_sampling_mrad is not None:
            sampling = _pair(self.detector_sampling_mrad, "detector_sampling_mrad")
            object.__setattr__(self, "detector_sampling_mrad", sampling)

    @property
    def wavelength_a(self) -> float:
        return electron_wavelength_a(self.energy_ev)

    @property
    def semiangle_rad(self) -> float:
        return self.semiangle_mrad * 1e-3

    def to_dict(self) -> dict:
        return {
            "energy_ev": float(self.energy_ev),
            "semiangle_mrad": float(self.semiangle_mrad),
            "scan_step_a": list(self.scan_step_a),
            "rotation_deg": None if self.rotation_deg is None else float(self.rotation_deg),
            "transpose": None if self.transpose is None else bool(self.transpose),
            "detector_sampling_mrad": None
            if self.detector_sampling_mrad is None
            else list(self.detector_sampling_mrad),
            "wavelength_a": self.wavelength_a,
        }


def _pair(value, what: str) -> tuple[float, float]:
    pair = np.broadcast_to(np.asarray(value, dtype=np.float64), (2,))
    if not (np.isfinite(pair).all() and (pair > 0).all()):
        raise ValueError(f"{what} must be one or two positive numbers, got {value!r}")
    return float(pair[0]), float(pair[1])
