"""Finite differences of 2-D scan fields on CuPy arrays in one kernel launch.

:func:`partials` returns both first derivatives of a C-ordered 2-D float field, with the
arithmetic of ``numpy.gradient`` (and ``cupy.gradient``) at ``edge_order=1`` and uniform
spacing: central differences ``(f[i+1] - f[i-1]) / (2 h)`` inside, one-sided
``(f[1] - f[0]) / h`` and ``(f[-1] - f[-2]) / h`` at the edges, each in the field's own
precision, so the values are bit-identical to two ``cupy.gradient`` calls
(``tests/hardware/test_cuda_stencil.py``). ``cupy.gradient`` costs about eight array
operations per axis; the DPC stages (rotation by minimum curl, divergence) take several
derivatives of 512 x 512 fields, where the launches, not the bytes, set the time.
"""

from __future__ import annotations

from functools import cache
from typing import Any

_SOURCE = r"""
const long long r = i / n_c;
const long long c = i - r * n_c;
if (r == 0) {
    d_r = (f[i + n_c] - f[i]) / (T)h_r;
} else if (r == n_r - 1) {
    d_r = (f[i] - f[i - n_c]) / (T)h_r;
} else {
    d_r = (f[i + n_c] - f[i - n_c]) / (T)(2.0 * h_r);
}
if (c == 0) {
    d_c = (f[i + 1] - f[i]) / (T)h_c;
} else if (c == n_c - 1) {
    d_c = (f[i] - f[i - 1]) / (T)h_c;
} else {
    d_c = (f[i + 1] - f[i - 1]) / (T)(2.0 * h_c);
}
"""


@cache
def _kernel() -> Any:
    import cupy

    return cupy.ElementwiseKernel(
        "raw T f, int64 n_r, int64 n_c, float64 h_r, float64 h_c",
        "T d_r, T d_c",
        _SOURCE,
        "quantem_field_partials",
    )


def partials(field: Any, step: tuple[float, float] = (1.0, 1.0)) -> tuple[Any, Any]:
    """``(d field / d row, d field / d col)`` of a 2-D float CuPy array, at least 2 x 2."""
    import cupy

    if field.ndim != 2 or min(field.shape) < 2 or field.dtype.kind != "f":
        raise ValueError(f"partials needs a 2-D float field of at least 2 x 2, got {field.shape}")
    f = cupy.ascontiguousarray(field)
    d_r = cupy.empty_like(f)
    d_c = cupy.empty_like(f)
    n_r, n_c = f.shape
    _kernel()(f, n_r, n_c, float(step[0]), float(step[1]), d_r, d_c)
    return d_r, d_c


__all__ = ["partials"]
