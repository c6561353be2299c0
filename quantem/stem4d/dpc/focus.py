"""Whether the probe is focused enough for the iDPC phase to image the specimen.

The centre of mass of a phase object's diffraction pattern is the phase gradient averaged
over the probe's intensity, so the iDPC phase is the phase convolved with ``|P(r)|^2``: its
transfer is the probe intensity's spectrum, the autocorrelation of the aperture weighted by
``exp(-i (chi(k) - chi(k + q)))``. In focus it falls smoothly over the band ``2 alpha /
lambda``. Defocused by ``C10``, the probe spreads to a radius ``|C10| alpha`` and its
transfer oscillates and falls towards zero at every frequency the spread exceeds. The
scale is the probe's depth of field ``lambda / alpha^2``: defocused by several of them the
iDPC phase keeps little of the specimen's contrast and may reverse it (the validation
matrix's SrTiO3 at 10-20 nm defocus: the transfer at the lattice's first frequencies falls
from over 0.7 in focus to about 0.1 and changes sign).
"""

from __future__ import annotations

import math

from quantem.stem4d.errors import CalibrationError
from quantem.stem4d.virtual.calibration import Calibration

#: Defocus, in depths of field ``lambda / alpha^2``, beyond which the iDPC phase is warned
#: about: the probe's geometric radius ``|C10| alpha`` is then twice ``lambda / alpha``.
MAX_DEPTHS_OF_FIELD = 2.0


def depth_of_field_angstrom(calibration: Calibration | None, parameter: str) -> float:
    """``lambda / alpha^2`` (angstrom); refuses, naming ``parameter``, without the beam
    energy and the convergence angle."""
    missing = [
        name
        for name in ("energy_ev", "convergence_mrad")
        if calibration is None or getattr(calibration, name) is None
    ]
    if missing:
        raise CalibrationError(
            f"{parameter} needs the calibration's {' and '.join(missing)} (the probe's depth "
            "of field)"
        )
    alpha = calibration.convergence_mrad * 1e-3
    return calibration.wavelength_angstrom / (alpha * alpha)


def defocus_note(c10_angstrom: float, calibration: Calibration | None) -> str | None:
    """A warning's text when the probe, defocused by ``c10_angstrom`` (C10 = -defocus), is
    beyond :data:`MAX_DEPTHS_OF_FIELD` depths of field; None when it is not."""
    if not math.isfinite(c10_angstrom):
        raise CalibrationError(f"c10_angstrom must be finite, got {c10_angstrom!r}")
    depth = depth_of_field_angstrom(calibration, "c10_angstrom")
    if abs(c10_angstrom) <= MAX_DEPTHS_OF_FIELD * depth:
        return None
    radius = abs(c10_angstrom) * calibration.convergence_mrad * 1e-3
    return (
        f"the probe is defocused by {abs(c10_angstrom):.3g} A, {abs(c10_angstrom) / depth:.2g} "
        f"depths of field (lambda / alpha^2 = {depth:.3g} A; over {MAX_DEPTHS_OF_FIELD:g}): "
        f"the CoM follows the phase gradient averaged over a probe of radius {radius:.3g} A, "
        "and the iDPC phase loses or reverses the contrast of finer detail (use parallax "
        "with correct_aberrations, or SSB)"
    )


__all__ = ["MAX_DEPTHS_OF_FIELD", "defocus_note", "depth_of_field_angstrom"]
