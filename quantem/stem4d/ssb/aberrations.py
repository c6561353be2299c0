"""The probe's aberration function chi(k) up to third order (Krivanek notation).

The probe's Fourier transform is ``A(k) = aperture(k) * exp(-i chi(k))`` with, for a
scattering angle of magnitude ``a`` and azimuth ``phi`` (radians, scan frame)::

    chi = 2 pi / lambda * ( a^2/2 * (C10 + C12 cos 2(phi - phi12))
                          + a^3/3 * (C21 cos(phi - phi21) + C23 cos 3(phi - phi23))
                          + a^4/4 * C30 )

the convention of abTEM (``C10 = -defocus``), coefficients in Angstrom, angles in radians.
The fit works on the Cartesian pairs ``C12a = C12 cos 2 phi12``, ``C12b = C12 sin 2 phi12``
(likewise C21 with phi21, C23 with 3 phi23): they have no wrap-around and make the loss
smooth for the local refinement. :class:`Aberrations` holds the Cartesian form.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

#: Names of the Cartesian coefficients, in the order of a parameter vector.
CARTESIAN_NAMES = ("C10", "C12a", "C12b", "C21a", "C21b", "C23a", "C23b", "C30")


@dataclass(frozen=True)
class Aberrations:
    """Cartesian aberration coefficients in Angstrom (zero: absent)."""

    C10: float = 0.0
    C12a: float = 0.0
    C12b: float = 0.0
    C21a: float = 0.0
    C21b: float = 0.0
    C23a: float = 0.0
    C23b: float = 0.0
    C30: float = 0.0

    @classmethod
    def from_polar(
        cls,
        C10: float = 0.0,
        C12: float = 0.0,
        phi12: float = 0.0,
        C21: float = 0.0,
        phi21: float = 0.0,
        C23: float = 0.0,
        phi23: float = 0.0,
        C30: float = 0.0,
    ) -> Aberrations:
        return cls(
            C10=C10,
            C12a=C12 * math.cos(2 * phi12),
            C12b=C12 * math.sin(2 * phi12),
            C21a=C21 * math.cos(phi21),
            C21b=C21 * math.sin(phi21),
            C23a=C23 * math.cos(3 * phi23),
            C23b=C23 * math.sin(3 * phi23),
            C30=C30,
        )

    def replace(self, **values: float) -> Aberrations:
        current = {f.name: getattr(self, f.name) for f in fields(self)}
        unknown = set(values) - set(current)
        if unknown:
            raise ValueError(f"unknown aberration coefficients {sorted(unknown)}")
        current.update({k: float(v) for k, v in values.items()})
        return Aberrations(**current)

    def to_polar(self) -> dict[str, float]:
        """C in Angstrom, phi in radians in [0, pi) for C12, [0, 2 pi) for C21, [0, 2 pi/3) for C23."""
        return {
            "C10": self.C10,
            "C12": math.hypot(self.C12a, self.C12b),
            "phi12": (math.atan2(self.C12b, self.C12a) / 2) % math.pi,
            "C21": math.hypot(self.C21a, self.C21b),
            "phi21": math.atan2(self.C21b, self.C21a) % (2 * math.pi),
            "C23": math.hypot(self.C23a, self.C23b),
            "phi23": (math.atan2(self.C23b, self.C23a) / 3) % (2 * math.pi / 3),
            "C30": self.C30,
        }

    def to_dict(self) -> dict[str, float]:
        return {name: float(getattr(self, name)) for name in CARTESIAN_NAMES}


def chi(kx: Any, ky: Any, aberrations: Aberrations, wavelength_a: float, xp: Any) -> Any:
    """chi (radians) at scattering angles ``(kx, ky)`` (radians, any broadcastable arrays).

    Evaluated with polynomials in kx, ky (no trigonometry), in the arrays' precision.
    """
    a = aberrations
    dtype = kx.dtype
    k2 = kx * kx + ky * ky
    c = dtype.type
    value = c(0.5 * a.C10) * k2
    if a.C12a or a.C12b:
        value = value + c(0.5 * a.C12a) * (kx * kx - ky * ky) + c(a.C12b) * (kx * ky)
    if a.C21a or a.C21b:
        value = value + (c(a.C21a / 3) * kx + c(a.C21b / 3) * ky) * k2
    if a.C23a or a.C23b:
        # Re[(kx + i ky)^3 e^{-3 i phi23}] = C23a (kx^3 - 3 kx ky^2) + C23b (3 kx^2 ky - ky^3)
        value = (
            value
            + c(a.C23a / 3) * kx * (kx * kx - c(3) * ky * ky)
            + c(a.C23b / 3) * ky * (c(3) * kx * kx - ky * ky)
        )
    if a.C30:
        value = value + c(0.25 * a.C30) * k2 * k2
    return value * c(2 * math.pi / wavelength_a)


__all__ = ["CARTESIAN_NAMES", "Aberrations", "chi"]
