"""Vector-field operations on scan grids: rotation of a detector-frame field, curl, divergence.

Fields are pairs ``(row, col)`` of 2D arrays over the scan (numpy or CuPy; the module
follows the input). Derivatives are central differences inside and one-sided at the
edges (``xp.gradient``), with the scan step as spacing; on CuPy both derivatives of a
field come from one kernel launch with the same arithmetic (:mod:`quantem.stem4d.cuda.stencil`),
and the rotation and divergence of a pair of fields from one launch each
(:mod:`quantem.stem4d.cuda.dpc_fields`).
"""

from __future__ import annotations

import math
from typing import Any

from quantem.stem4d.arrays import array_module


def rotate_field(
    field_r: Any, field_c: Any, angle_deg: float, transpose: bool = False
) -> tuple[Any, Any]:
    """A detector-frame vector field in scan axes.

    With ``transpose`` the detector's row and column are swapped first; then the vector
    is rotated by ``angle_deg`` from the row axis towards the column axis:
    ``r' = cos a * r - sin a * c``, ``c' = sin a * r + cos a * c``.
    """
    if transpose:
        field_r, field_c = field_c, field_r
    if device_fusable(field_r, field_c):
        from quantem.stem4d.cuda.dpc_fields import rotate_field as device_rotate

        return device_rotate(field_r, field_c, angle_deg)
    a = math.radians(angle_deg)
    cos, sin = math.cos(a), math.sin(a)
    return cos * field_r - sin * field_c, sin * field_r + cos * field_c


def _one_launch(field: Any) -> bool:
    """CuPy float fields of at least 2 x 2 take both derivatives in one launch."""
    if array_module(field).__name__ == "numpy":
        return False
    return field.ndim == 2 and min(field.shape) >= 2 and field.dtype.kind == "f"


def device_fusable(field_r: Any, field_c: Any) -> bool:
    """A pair of CuPy float fields of one shape and dtype, at least 2 x 2: the fused
    kernels of :mod:`quantem.stem4d.cuda.dpc_fields` apply."""
    return (
        _one_launch(field_r)
        and _one_launch(field_c)
        and field_r.shape == field_c.shape
        and field_r.dtype == field_c.dtype
    )


def partials(field: Any, step: tuple[float, float] = (1.0, 1.0)) -> tuple[Any, Any]:
    """``(d field / d row, d field / d col)``: ``xp.gradient`` along each axis."""
    if _one_launch(field):
        from quantem.stem4d.cuda.stencil import partials as device_partials

        return device_partials(field, step)
    xp = array_module(field)
    return xp.gradient(field, step[0], axis=0), xp.gradient(field, step[1], axis=1)


def curl(field_r: Any, field_c: Any, step: tuple[float, float] = (1.0, 1.0)) -> Any:
    """``d field_c / d row - d field_r / d col`` over the scan."""
    if _one_launch(field_r) and _one_launch(field_c):
        return partials(field_c, step)[0] - partials(field_r, step)[1]
    xp = array_module(field_r)
    return xp.gradient(field_c, step[0], axis=0) - xp.gradient(field_r, step[1], axis=1)


def divergence(field_r: Any, field_c: Any, step: tuple[float, float] = (1.0, 1.0)) -> Any:
    """``d field_r / d row + d field_c / d col`` over the scan."""
    if device_fusable(field_r, field_c):
        from quantem.stem4d.cuda.dpc_fields import divergence as device_divergence

        return device_divergence(field_r, field_c, step)
    xp = array_module(field_r)
    return xp.gradient(field_r, step[0], axis=0) + xp.gradient(field_c, step[1], axis=1)


__all__ = ["curl", "divergence", "partials", "rotate_field"]
