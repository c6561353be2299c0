"""One-launch field derivatives (quantem.stem4d.cuda.stencil) against cupy.gradient and numpy."""

from __future__ import annotations

import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy (not installed here)")

from quantem.stem4d.cuda.stencil import partials  # noqa: E402
from quantem.stem4d.dpc import fields  # noqa: E402


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(2, 2), (3, 7), (64, 48), (512, 512)])
@pytest.mark.parametrize("step", [(1.0, 1.0), (0.37, 2.5)])
def test_partials_are_bit_identical_to_gradient(dtype, shape, step):
    rng = np.random.default_rng([*shape, np.dtype(dtype).itemsize])
    host = (rng.standard_normal(shape) * 1e3).astype(dtype)
    field = cupy.asarray(host)
    d_r, d_c = partials(field, step)
    assert d_r.dtype == dtype and d_c.dtype == dtype
    np.testing.assert_array_equal(d_r.get(), cupy.gradient(field, step[0], axis=0).get())
    np.testing.assert_array_equal(d_c.get(), cupy.gradient(field, step[1], axis=1).get())
    np.testing.assert_array_equal(d_r.get(), np.gradient(host, step[0], axis=0))
    np.testing.assert_array_equal(d_c.get(), np.gradient(host, step[1], axis=1))


def test_non_contiguous_fields_and_the_dpc_operators():
    rng = np.random.default_rng(4)
    host = rng.standard_normal((40, 30))
    field = cupy.asarray(host).T  # a transposed view
    d_r, d_c = partials(field)
    np.testing.assert_array_equal(d_r.get(), np.gradient(host.T, axis=0))
    np.testing.assert_array_equal(d_c.get(), np.gradient(host.T, axis=1))
    other = rng.standard_normal((40, 30))
    a, b = cupy.asarray(host), cupy.asarray(other)
    np.testing.assert_array_equal(fields.curl(a, b).get(), fields.curl(host, other))
    np.testing.assert_array_equal(fields.divergence(a, b).get(), fields.divergence(host, other))


def test_too_small_or_integer_fields_are_refused():
    with pytest.raises(ValueError):
        partials(cupy.zeros((1, 5)))
    with pytest.raises(ValueError):
        partials(cupy.zeros((4, 4), dtype=cupy.int32))
