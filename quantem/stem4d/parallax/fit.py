"""Fit of the parallax shifts to the aberration function: C10, C12 and its angle, rotation.

A bright-field pixel at beam angle ``alpha`` (rad, detector axes, relative to the disk
centre) sees the specimen through the part of the probe that crosses it at
``r_p + grad chi(alpha) * lambda / (2 pi)``; for the aberrations up to second order this is
``A alpha`` with the symmetric matrix

    A = [[C10 + C12a, C12b], [C12b, C10 - C12a]],   C12a = C12 cos 2 phi12, C12b = C12 sin 2 phi12,

so its image is displaced by ``s = -R(theta) A alpha`` in scan axes (angstrom), ``R`` the
rotation from detector into scan axes (``quantem.stem4d.dpc.fields.rotate_field``; after the
row/column swap when ``transpose``). ``phi12`` is measured in detector axes from the row
axis towards the column axis. C10 follows the convention of abTEM and of Krivanek's
notation (``chi = 2 pi / lambda (C10 alpha^2 / 2 + ...)``, C10 = -defocus).

The fit is linear: least squares of ``s = M alpha + t`` (``t`` takes up the free origin of
the shifts), then the polar decomposition ``-M = R S`` (SVD) gives the rotation and the
symmetric ``S = A``. A transposed detector shows as ``det M < 0`` and is undone before the
decomposition. ``R`` and ``S`` are fixed up to a common sign (``R(theta + 180)``, ``-S``): the
rotation nearest ``rotation_hint_deg`` is kept, by default the one in (-90, 90].

The model holds when every BF image is a shifted copy of one image, the shift linear in the
beam angle. In focus it does not: the images barely shift, and the images near the disk
edge, which alone keep contrast there, see one side of each frequency band, whose contrast is
not a shifted copy of the rest. So the same fit is also made on the inner and on the outer
half of the images (by beam angle): if their C10 differ by more than
:data:`C10_CONSISTENCY_SIGMAS` standard errors of the difference, the shifts are not those of
one defocus, and if they differ by more than :data:`C10_CONSISTENCY_FRACTION` of the whole
disk's C10 as well, not even its size is known: C10 is then reported as undetermined
(``c10_determined``), its value kept. (Through a thick slab focused outside it the halves
disagree by a few per cent of a large C10, the inner images seeing another depth of the
slab; that C10 is still reported as determined. In focus they disagree by 40 per cent and
more: the validation matrix's 1.2 and 10 nm samples, and the 1.2 nm sample as a weak phase
object.) :mod:`quantem.stem4d.parallax.agreement` checks the same model on the images
themselves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from quantem.stem4d.errors import ComputeError

#: The rotation's standard error (deg) beyond which it is reported as undetermined: the
#: fitted shift field is then under about three standard errors from zero (1/3 rad).
ROTATION_DETERMINED_DEG = math.degrees(1.0 / 3.0)
#: Standard errors of their difference beyond which the C10 of the inner and of the outer
#: half of the BF images disagree (C10 undetermined if also by more than
#: :data:`C10_CONSISTENCY_FRACTION` of C10 itself).
C10_CONSISTENCY_SIGMAS = 3.0
#: Fraction of the whole disk's C10 by which the halves' C10 may differ and still measure its
#: size: between a thick slab's few per cent and the 40 per cent and more of a sample in focus.
C10_CONSISTENCY_FRACTION = 0.2


@dataclass(frozen=True)
class AberrationFit:
    """Fitted second-order aberrations and the scan-detector geometry.

    ``c10_angstrom``, ``c12_angstrom`` (>= 0), ``phi12_deg`` in [0, 180), ``rotation_deg``,
    ``transpose``, ``residual_px`` (RMS misfit of the shifts, scan pixels) and the fitted
    shifts ``fitted_shifts`` ``(n, 2)`` in scan pixels. The standard errors of C10 and of
    the rotation follow from the least-squares covariance (the misfit taken as independent
    noise); ``rotation_determined`` is False when the rotation's standard error exceeds
    :data:`ROTATION_DETERMINED_DEG`: near focus the shifts vanish and so does the rotation
    they carry, and its number is then no measurement. ``c10_inner_angstrom`` and
    ``c10_outer_angstrom`` are the C10 of the inner and outer half of the images (NaN with
    fewer than 8 images, or when a half alone fits no geometry of the whole's handedness;
    the check is then not made), ``c10_determined`` False when they disagree (module
    docstring) or when the images moved by the fitted shifts agree far less than moved by
    their own (``model_agreement``, :mod:`quantem.stem4d.parallax.agreement`; NaN where not
    checked).
    """

    c10_angstrom: float
    c12_angstrom: float
    phi12_deg: float
    rotation_deg: float
    transpose: bool
    residual_px: float
    fitted_shifts: np.ndarray
    c10_uncertainty_angstrom: float = math.nan
    rotation_uncertainty_deg: float = math.nan
    rotation_determined: bool = True
    c10_inner_angstrom: float = math.nan
    c10_outer_angstrom: float = math.nan
    c10_determined: bool = True
    model_agreement: float = math.nan

    def to_dict(self) -> dict:
        return {
            "C10_angstrom": self.c10_angstrom,
            "defocus_angstrom": -self.c10_angstrom,
            "C12_angstrom": self.c12_angstrom,
            "phi12_deg": self.phi12_deg,
            "rotation_deg": self.rotation_deg,
            "transpose": self.transpose,
            "residual_px": self.residual_px,
            "C10_uncertainty_angstrom": self.c10_uncertainty_angstrom,
            "rotation_uncertainty_deg": self.rotation_uncertainty_deg,
            "rotation_determined": self.rotation_determined,
            "C10_inner_angstrom": self.c10_inner_angstrom,
            "C10_outer_angstrom": self.c10_outer_angstrom,
            "C10_determined": self.c10_determined,
            "model_agreement": self.model_agreement,
        }


def _rotation(theta_deg: float) -> np.ndarray:
    t = math.radians(theta_deg)
    return np.array([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]])


def predicted_shifts(
    angles_rad: np.ndarray,
    scan_step_angstrom: tuple[float, float],
    c10_angstrom: float,
    rotation_deg: float = 0.0,
    transpose: bool = False,
) -> np.ndarray:
    """The shifts ``(n, 2)`` (scan pixels) of a pure defocus: ``s = -R(theta) C10 P alpha``.

    The forward model of :func:`fit_aberrations` with C12 = 0; it seeds the alignment with
    a user's defocus and rotation guess (:func:`quantem.stem4d.parallax.align.align`).
    """
    angles = np.asarray(angles_rad, dtype=np.float64)
    if transpose:
        angles = angles[:, ::-1]
    shifts = -float(c10_angstrom) * angles @ _rotation(float(rotation_deg)).T
    return shifts / np.asarray(scan_step_angstrom, dtype=np.float64)[None, :]


def _decompose(matrix: np.ndarray, swap: bool, hint: float) -> tuple[float, float, float, float]:
    """C10, C12, phi12 (deg) and the rotation (deg) of the fitted matrix ``M``."""
    permutation = np.array([[0.0, 1.0], [1.0, 0.0]]) if swap else np.eye(2)
    # s = -R A P alpha  =>  -M P^-1 = R A.
    target = -matrix @ permutation
    u, sigma, vt = np.linalg.svd(target)
    rotation = u @ vt
    symmetric = vt.T @ np.diag(sigma) @ vt
    if np.linalg.det(rotation) < 0:
        raise ComputeError(
            "the shifts fit a reflected geometry for the given transpose choice; "
            "leave transpose=None"
        )
    theta = math.degrees(math.atan2(rotation[1, 0], rotation[0, 0]))
    if abs((theta - hint + 180.0) % 360.0 - 180.0) > 90.0:
        theta = theta + 180.0
        symmetric = -symmetric
    theta = (theta + 180.0) % 360.0 - 180.0
    c10 = 0.5 * (symmetric[0, 0] + symmetric[1, 1])
    c12a = 0.5 * (symmetric[0, 0] - symmetric[1, 1])
    c12b = 0.5 * (symmetric[0, 1] + symmetric[1, 0])
    phi12 = (0.5 * math.degrees(math.atan2(c12b, c12a))) % 180.0
    return float(c10), float(math.hypot(c12a, c12b)), float(phi12), float(theta)


def _uncertainties(
    matrix: np.ndarray, covariance: np.ndarray, swap: bool, hint: float
) -> tuple[float, float]:
    """Standard errors of C10 and of the rotation (deg), by linear propagation of the
    covariance ``(4, 4)`` of the entries of ``M`` (row-major) through :func:`_decompose`."""
    base = _decompose(matrix, swap, hint)
    scale = max(float(np.abs(matrix).max()), 1e-12)
    jacobian = np.zeros((2, 4))
    for k in range(4):
        h = np.zeros(4)
        h[k] = 1e-6 * scale
        try:
            up = _decompose(matrix + h.reshape(2, 2), swap, base[3])
            down = _decompose(matrix - h.reshape(2, 2), swap, base[3])
        except ComputeError:  # the matrix sits on a reflection: nothing is determined
            return math.inf, math.inf
        jacobian[0, k] = (up[0] - down[0]) / (2 * h[k])
        jacobian[1, k] = ((up[3] - down[3] + 180.0) % 360.0 - 180.0) / (2 * h[k])
    variance = np.diag(jacobian @ covariance @ jacobian.T)
    return float(math.sqrt(max(variance[0], 0.0))), float(math.sqrt(max(variance[1], 0.0)))


def fit_aberrations(
    shifts_px: np.ndarray,
    angles_rad: np.ndarray,
    scan_step_angstrom: tuple[float, float],
    *,
    transpose: bool | None = None,
    rotation_hint_deg: float | None = None,
) -> AberrationFit:
    """Fit ``shifts_px`` ``(n, 2)`` (scan pixels) against beam ``angles_rad`` ``(n, 2)``."""
    shifts_px = np.asarray(shifts_px, dtype=np.float64)
    angles = np.asarray(angles_rad, dtype=np.float64)
    if shifts_px.shape != angles.shape or shifts_px.ndim != 2 or shifts_px.shape[1] != 2:
        raise ComputeError(
            f"shifts {shifts_px.shape} and angles {angles.shape} must both be (n, 2)"
        )
    if shifts_px.shape[0] < 4:
        raise ComputeError("the aberration fit needs at least 4 bright-field images")
    step = np.asarray(scan_step_angstrom, dtype=np.float64)
    shifts = shifts_px * step[None, :]
    hint = 0.0 if rotation_hint_deg is None else float(rotation_hint_deg)
    design, coefficients, swap, (c10, c12, phi12, theta), c10_error, rotation_error = (
        _least_squares(shifts, angles, transpose, hint)
    )
    inner = outer = math.nan
    consistent = True
    radius = np.hypot(angles[:, 0], angles[:, 1])
    half = radius <= np.median(radius)
    if min(int(half.sum()), int((~half).sum())) >= 4:
        parts = []
        for subset in (half, ~half):
            try:
                _, _, _, decomposed, error, _ = _least_squares(
                    shifts[subset], angles[subset], swap, theta
                )
            except (ComputeError, np.linalg.LinAlgError):  # a half alone may be degenerate
                parts = []
                break
            parts.append((decomposed[0], error))
        if parts:
            (inner, inner_error), (outer, outer_error) = parts
            spread = math.hypot(inner_error, outer_error)
            gap = abs(inner - outer)
            bound = max(C10_CONSISTENCY_SIGMAS * spread, C10_CONSISTENCY_FRACTION * abs(c10))
            consistent = bool(gap <= bound)
    fitted = design @ coefficients / step[None, :]
    residual = float(np.sqrt(np.mean(np.sum((fitted - shifts_px) ** 2, axis=1))))
    return AberrationFit(
        c10,
        c12,
        phi12,
        theta,
        swap,
        residual,
        fitted,
        c10_error,
        rotation_error,
        rotation_error <= ROTATION_DETERMINED_DEG,
        float(inner),
        float(outer),
        consistent,
    )


def _least_squares(shifts: np.ndarray, angles: np.ndarray, transpose: bool | None, hint: float):
    """The linear fit ``s = M alpha + t`` of ``shifts`` (angstrom): the design, the
    coefficients, the swap, the decomposition and the standard errors of C10 and rotation."""
    design = np.column_stack([angles, np.ones(len(angles))])
    coefficients, *_ = np.linalg.lstsq(design, shifts, rcond=None)
    matrix = coefficients[:2].T  # s = M alpha + t
    swap = bool(np.linalg.det(matrix) < 0) if transpose is None else bool(transpose)
    decomposed = _decompose(matrix, swap, hint)
    fitted = design @ coefficients
    # Each shift component has its own misfit variance (scan steps may differ); the rows
    # of M are the two components' coefficients, independent of each other.
    dof = max(len(angles) - design.shape[1], 1)
    variance = ((shifts - fitted) ** 2).sum(axis=0) / dof
    normal = np.linalg.inv(design.T @ design)[:2, :2]
    covariance = np.zeros((4, 4))
    covariance[:2, :2] = variance[0] * normal
    covariance[2:, 2:] = variance[1] * normal
    c10_error, rotation_error = _uncertainties(matrix, covariance, swap, decomposed[3])
    return design, coefficients, swap, decomposed, c10_error, rotation_error


__all__ = [
    "C10_CONSISTENCY_FRACTION",
    "C10_CONSISTENCY_SIGMAS",
    "ROTATION_DETERMINED_DEG",
    "AberrationFit",
    "fit_aberrations",
    "predicted_shifts",
]
