"""The rotation between scan and detector axes, from the curl of the centre-of-mass field.

A phase object deflects the beam along the gradient of its phase, so the CoM field,
expressed in scan axes, is curl-free. Rotating the detector-frame field by ``a`` gives the
curl ``cos(a) * C + sin(a) * D``, with ``C`` the curl and ``D`` the divergence of the
unrotated field (both linear in it). The sum of its squares over the scan,
``[cos a, sin a] M [cos a, sin a]^T`` with ``M = [[C.C, C.D], [C.D, D.D]]``, is smallest for
the eigenvector of ``M`` with the smaller eigenvalue: a closed-form answer, no search,
and deterministic. It fixes the angle up to a half turn (``a`` and ``a + 180`` have the
same curl); :func:`quantem.stem4d.dpc.reconstruct.dpc` resolves that from the integrated phase.

With ``transpose=None`` both the plain and the transposed detector axes are tried and the
one with the smaller residual curl wins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from quantem.stem4d.arrays import array_module, to_numpy
from quantem.stem4d.dpc.fields import device_fusable, partials

#: Largest relative residual curl at which the curl-minimising estimate can be trusted:
#: a curl-free field gives 0, a field without structure about 0.7 (the SSB fixtures
#: cropped to the BF disk give 0.67-0.69 with angles wrong by 12 to 130 degrees).
MAX_RESIDUAL_CURL = 0.5


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


def _solve(sums: np.ndarray) -> tuple[float, float]:
    """Angle and relative residual from ``(C.C, C.D, D.D)``."""
    cc, cd, dd = (float(v) for v in sums)
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
    if device_fusable(field_r, field_c):
        from quantem.stem4d.cuda.dpc_fields import curl_sums

        both = curl_sums(field_r, field_c, step)
        sums = np.concatenate([both[3 * int(swap) : 3 * int(swap) + 3] for swap in choices])
        return _best(sums, choices)
    # The four derivatives serve both axis choices: the curl and divergence of
    # (field_r, field_c) are (dc/dr - dr/dc, dr/dr + dc/dc); swapping the axes gives
    # (dr/dr - dc/dc, dc/dr + dr/dc).
    rr, rc = partials(field_r, step)
    cr, cc = partials(field_c, step)
    fields = {False: (cr - rc, rr + cc), True: (rr - cc, cr + rc)}
    xp = array_module(rr)
    products = []
    for swap in choices:
        c, d = fields[swap]
        products += [c * c, c * d, d * d]
    # One reduction per product, all brought to the host at once (deterministic: no
    # atomics; one synchronisation instead of one per sum).
    sums = to_numpy(xp.stack(products).reshape(len(products), -1).sum(axis=1))
    return _best(sums, choices)


def _best(sums: np.ndarray, choices: list[bool]) -> RotationFit:
    """The fit of the smaller residual curl among ``choices`` (three sums each)."""
    fits = []
    for k, swap in enumerate(choices):
        angle, residual = _solve(sums[3 * k : 3 * k + 3])
        fits.append((residual, swap, angle))
    fits.sort(key=lambda item: (item[0], item[1]))
    residual, swap, angle = fits[0]
    other = fits[1][0] if len(fits) > 1 else None
    return RotationFit(angle, swap, residual, other)


__all__ = ["RotationFit", "find_rotation"]
