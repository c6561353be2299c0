"""The rotation between scan and detector axes, from the curl of the centre-of-mass field.

A phase object deflects the beam along the gradient of its phase, so the CoM field,
expressed in scan axes, is curl-free. Rotating the detector-frame field by ``a`` gives the
curl ``cos(a) * C + sin(a) * D``, with ``C`` the curl and ``D`` the divergence of the
unrotated field (both linear in it). The sum of its squares over the scan,
``[cos a, sin a] M [cos a, sin a]^T`` with ``M = [[C.C, C.D], [C.D, D.D]]``, is smallest for
the eigenvector of ``M`` with the smaller eigenvalue: a closed-form answer, no search,
and deterministic. It fixes the angle up to a half turn (``a`` and ``a + 180`` have the
same curl); :func:`quantem.dpc.reconstruct.dpc` resolves that from the integrated phase.

With ``transpose=None`` both the plain and the transposed detector axes are tried and the
one with the smaller residual curl wins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from quantem.dpc.fields import curl, divergence


@dataclass(frozen=True)
class RotationFit:
    """Result of :func:`find_rotation`.

    Attributes
    ----------
    angle_deg
        Rotation of the detector-frame field into scan axes, in [0, 180) (half-turn open).
    transpose
        Whether the detector axes are swapped before rotating.
    residual
        Relative residual curl: RMS curl at the best angle over the RMS of the field's
        curl and divergence together (0 for a perfectly curl-free field).
    residual_other
        The same for the other transpose choice (None when it was fixed by the caller).
    """

    angle_deg: float
    transpose: bool
    residual: float
    residual_other: float | None


def _solve(field_r: Any, field_c: Any, step: tuple[float, float]) -> tuple[float, float]:
    c = curl(field_r, field_c, step)
    d = divergence(field_r, field_c, step)
    # Host float64 scalars from deterministic reductions (no atomics).
    cc = float((c * c).sum())
    cd = float((c * d).sum())
    dd = float((d * d).sum())
    matrix = np.array([[cc, cd], [cd, dd]])
    values, vectors = np.linalg.eigh(matrix)
    cos, sin = vectors[:, 0]
    angle = math.degrees(math.atan2(sin, cos)) % 180.0
    total = cc + dd
    residual = math.sqrt(max(values[0], 0.0) / total) if total > 0 else 0.0
    return angle, residual


def find_rotation(
    field_r: Any,
    field_c: Any,
    *,
    transpose: bool | None = None,
    step: tuple[float, float] = (1.0, 1.0),
) -> RotationFit:
    """The scan-detector rotation that makes the (mean-free) CoM field curl-free.

    ``field_r``/``field_c`` are the detector-frame CoM shifts over the scan (NaN-free).
    ``transpose``: True or False to fix it, None to choose the smaller residual curl.
    """
    choices = [False, True] if transpose is None else [bool(transpose)]
    fits = []
    for swap in choices:
        a, b = (field_c, field_r) if swap else (field_r, field_c)
        angle, residual = _solve(a, b, step)
        fits.append((residual, swap, angle))
    fits.sort(key=lambda item: (item[0], item[1]))
    residual, swap, angle = fits[0]
    other = fits[1][0] if len(fits) > 1 else None
    return RotationFit(angle, swap, residual, other)


__all__ = ["RotationFit", "find_rotation"]
