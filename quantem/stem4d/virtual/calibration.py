"""Calibration of a 4D-STEM acquisition: beam energy, detector angles, scan step.

Virtual detectors may be given in detector pixels or in mrad; DPC phases in radians and
parallax aberrations in angstrom need the detector's angular pixel size, the beam
energy and the scan step. A :class:`Calibration` holds what is known; each accessor
raises :class:`~quantem.stem4d.errors.CalibrationError` naming what is missing.

The detector's angular pixel size comes from ``mrad_per_pixel``, or from a reciprocal-space
pixel size ``inverse_angstrom_per_pixel`` and the beam energy (``lambda * dk``), or,
failing both, from the probe's convergence semi-angle and the bright-field disk radius in
pixels (``convergence_mrad / bf_radius_px``), which is how most experiments calibrate it.
A value filled in from the data (the BF radius) is listed in ``derived``, so a record says
which numbers the user gave and which the code measured.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from quantem.stem4d.errors import CalibrationError

#: Relativistic electron wavelength: lambda[A] = H_OVER_SQRT_2ME / sqrt(V (1 + V * RELATIVISTIC)).
_PLANCK = 6.62607015e-34
_ELECTRON_MASS = 9.1093837015e-31
_ELEMENTARY_CHARGE = 1.602176634e-19
_SPEED_OF_LIGHT = 299792458.0


def electron_wavelength_angstrom(energy_ev: float) -> float:
    """Relativistic de Broglie wavelength of an electron of kinetic energy ``energy_ev``."""
    if not (energy_ev > 0 and math.isfinite(energy_ev)):
        raise CalibrationError(f"beam energy must be a positive number of eV, got {energy_ev!r}")
    e_v = _ELEMENTARY_CHARGE * energy_ev
    momentum = math.sqrt(
        2 * _ELECTRON_MASS * e_v * (1 + e_v / (2 * _ELECTRON_MASS * _SPEED_OF_LIGHT**2))
    )
    return _PLANCK / momentum * 1e10


def _positive(value: Any, what: str) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise CalibrationError(f"{what} must be a number, got {value!r}") from None
    if not (number > 0 and math.isfinite(number)):
        raise CalibrationError(f"{what} must be positive and finite, got {value!r}")
    return number


@dataclass(frozen=True)
class Calibration:
    """What is known of the geometry of an acquisition (every field optional).

    Attributes
    ----------
    energy_ev
        Beam energy (electron kinetic energy) in eV.
    convergence_mrad
        Probe convergence semi-angle in mrad.
    bf_radius_px
        Bright-field disk radius in detector pixels (as loaded, after any ``det_bin``).
    mrad_per_pixel
        Detector angular pixel size; overrides ``convergence_mrad / bf_radius_px``.
    scan_step_angstrom
        Scan step ``(row, col)`` in angstrom (a single number means both).
    inverse_angstrom_per_pixel
        Detector pixel size in reciprocal space (1/A, as abTEM and py4DSTEM give it); with
        ``energy_ev`` it gives the angular pixel size. Exclusive with ``mrad_per_pixel``.
    derived
        Names of the fields measured from the data rather than given (see
        :meth:`with_disk_radius`).
    """

    energy_ev: float | None = None
    convergence_mrad: float | None = None
    bf_radius_px: float | None = None
    mrad_per_pixel: float | None = None
    scan_step_angstrom: tuple[float, float] | None = None
    inverse_angstrom_per_pixel: float | None = None
    derived: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in (*_NUMBERS, "inverse_angstrom_per_pixel"):
            object.__setattr__(self, name, _positive(getattr(self, name), name))
        if self.mrad_per_pixel is not None and self.inverse_angstrom_per_pixel is not None:
            raise CalibrationError(
                "give the detector sampling once: mrad_per_pixel or inverse_angstrom_per_pixel"
            )
        object.__setattr__(self, "derived", tuple(self.derived))
        step = self.scan_step_angstrom
        if step is not None:
            if isinstance(step, (int, float)):
                step = (step, step)
            try:
                row, col = step
            except (TypeError, ValueError):
                raise CalibrationError(
                    f"scan_step_angstrom must be a number or (row, col), got {step!r}"
                ) from None
            object.__setattr__(
                self,
                "scan_step_angstrom",
                (_positive(row, "scan step (row)"), _positive(col, "scan step (col)")),
            )

    @property
    def detector_mrad_per_pixel(self) -> float:
        """Angular size of one detector pixel in mrad."""
        if self.mrad_per_pixel is not None:
            return self.mrad_per_pixel
        if self.inverse_angstrom_per_pixel is not None:
            if self.energy_ev is None:
                raise CalibrationError(
                    "inverse_angstrom_per_pixel needs the beam energy (energy_ev) to give "
                    "the detector's angular pixel size"
                )
            return self.inverse_angstrom_per_pixel * self.wavelength_angstrom * 1e3
        if self.convergence_mrad is not None and self.bf_radius_px is not None:
            return self.convergence_mrad / self.bf_radius_px
        raise CalibrationError(
            "the detector's angular pixel size is unknown: give mrad_per_pixel, "
            "inverse_angstrom_per_pixel with energy_ev, or convergence_mrad with bf_radius_px"
        )

    @property
    def wavelength_angstrom(self) -> float:
        if self.energy_ev is None:
            raise CalibrationError("the beam energy (energy_ev) is unknown")
        return electron_wavelength_angstrom(self.energy_ev)

    @property
    def scan_step(self) -> tuple[float, float]:
        if self.scan_step_angstrom is None:
            raise CalibrationError("the scan step (scan_step_angstrom) is unknown")
        return self.scan_step_angstrom  # type: ignore[return-value]

    def pixels_from_mrad(self, mrad: float) -> float:
        """A detector angle in mrad as a distance in detector pixels."""
        return float(mrad) / self.detector_mrad_per_pixel

    @property
    def has_detector_sampling(self) -> bool:
        """Whether the angular pixel size is given directly (not through the BF radius)."""
        return self.mrad_per_pixel is not None or self.inverse_angstrom_per_pixel is not None

    def given(self) -> tuple[str, ...]:
        """The fields the user gave (known and not derived from the data)."""
        return tuple(
            name
            for name in (*_NUMBERS, "scan_step_angstrom", "inverse_angstrom_per_pixel")
            if getattr(self, name) is not None and name not in self.derived
        )

    def checked(self) -> set[str]:
        """The given fields that the data checks use (``calibration_check``)."""
        out: set[str] = set()
        if self.convergence_mrad is not None and (
            self.mrad_per_pixel is not None
            or (self.inverse_angstrom_per_pixel is not None and self.energy_ev is not None)
        ):
            out |= {"convergence_mrad", "mrad_per_pixel", "inverse_angstrom_per_pixel"}
            if self.inverse_angstrom_per_pixel is not None:
                out.add("energy_ev")
        if None not in (self.energy_ev, self.convergence_mrad, self.scan_step_angstrom):
            out |= {"energy_ev", "convergence_mrad", "scan_step_angstrom"}
        return out & set(self.given())

    def refuse_unused(self, workload: str, applied: set[str] | frozenset[str]) -> list[str]:
        """Refuse a given field that neither ``applied`` nor a data check uses; the used ones.

        A calibration the user gave must change the result or be checked against the data;
        silently ignoring it would let a wrong or misplaced number pass.
        """
        used = (set(applied) | self.checked()) & set(self.given())
        unused = [name for name in self.given() if name not in used]
        if unused:
            raise CalibrationError(
                f"{workload} does not use the given {', '.join(unused)} with this "
                f"combination (given: {', '.join(self.given())}); leave it out, or give what "
                "it needs to be applied"
            )
        return sorted(used)

    def with_disk_radius(self, radius_px: float) -> Calibration:
        """This calibration with ``bf_radius_px`` filled in (and listed as derived).

        Only when the radius is needed: unknown, and no direct detector sampling given.
        """
        if self.bf_radius_px is not None or self.has_detector_sampling:
            return self
        fields = asdict(self)
        fields["bf_radius_px"] = float(radius_px)
        fields["derived"] = (*self.derived, "bf_radius_px")
        return Calibration(**fields)

    def to_dict(self) -> dict:
        """Plain JSON-able dict of the known fields (None where unknown)."""
        out = asdict(self)
        if out["scan_step_angstrom"] is not None:
            out["scan_step_angstrom"] = list(out["scan_step_angstrom"])
        out["derived"] = list(self.derived)
        return out


_NUMBERS = ("energy_ev", "convergence_mrad", "bf_radius_px", "mrad_per_pixel")


__all__ = ["Calibration", "electron_wavelength_angstrom"]
