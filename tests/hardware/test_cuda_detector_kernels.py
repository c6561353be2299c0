"""GPU detector kernels against exact numpy uint64 references (contract B)."""

from __future__ import annotations

import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy (not installed here)")

from quantem.stem4d.cuda import detector_kernels as dk  # noqa: E402
from quantem.stem4d.errors import UnsupportedDtypeError  # noqa: E402


def reference_moments(data: np.ndarray, mask: np.ndarray):
    frames = data.reshape(-1, *data.shape[-2:]).astype(np.uint64)
    rows, cols = np.nonzero(mask)
    values = frames[:, rows, cols]
    total = values.sum(axis=1, dtype=np.uint64)
    sum_r = (values * rows.astype(np.uint64)).sum(axis=1, dtype=np.uint64)
    sum_c = (values * cols.astype(np.uint64)).sum(axis=1, dtype=np.uint64)
    scan = data.shape[:-2]
    return total.reshape(scan), sum_r.reshape(scan), sum_c.reshape(scan)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32])
@pytest.mark.parametrize("shape", [(5, 7, 32, 48), (3, 4, 17, 19), (1, 1, 8, 8), (9, 11, 64, 64)])
def test_products_match_exact_reference(dtype, shape):
    rng = np.random.default_rng([3, *shape, np.dtype(dtype).itemsize])
    info = np.iinfo(dtype)
    data = rng.integers(0, info.max, shape, dtype=dtype, endpoint=True)  # extremes included
    data.reshape(-1)[:5] = info.max
    gpu = cupy.asarray(data)
    for density in (0.02, 0.5, 1.0):
        mask = rng.random(shape[-2:]) < density
        total, sum_r, sum_c = reference_moments(data, mask)
        got = dk.masked_sum(gpu, cupy.asarray(mask))
        assert got.dtype == np.uint64 and got.shape == shape[:2]
        np.testing.assert_array_equal(got.get(), total)
        t, r, c = dk.moments(gpu, mask)
        np.testing.assert_array_equal(t.get(), total)
        np.testing.assert_array_equal(r.get(), sum_r)
        np.testing.assert_array_equal(c.get(), sum_c)
    expected = data.reshape(-1, *shape[-2:]).astype(np.uint64).sum(axis=0, dtype=np.uint64)
    np.testing.assert_array_equal(dk.sum_frames(gpu).get(), expected)
    np.testing.assert_array_equal(dk.frame(gpu, 3 % (shape[0] * shape[1])).get(),
                                  data.reshape(-1, *shape[-2:])[3 % (shape[0] * shape[1])])  # fmt: skip


def test_sum_frames_many_frames_groups():
    rng = np.random.default_rng(5)
    data = rng.integers(0, 65535, (40, 50, 12, 10), dtype=np.uint16, endpoint=True)
    expected = data.reshape(-1, 12, 10).astype(np.uint64).sum(axis=0)
    np.testing.assert_array_equal(dk.sum_frames(cupy.asarray(data)).get(), expected)


def test_empty_mask_gives_zeros_and_bad_inputs_raise():
    data = cupy.ones((2, 3, 4, 5), dtype=cupy.uint16)
    np.testing.assert_array_equal(dk.masked_sum(data, np.zeros((4, 5), bool)).get(), 0)
    with pytest.raises(ValueError):
        dk.masked_sum(data, np.zeros((5, 4), bool))
    with pytest.raises(UnsupportedDtypeError):
        dk.masked_sum(data.astype(cupy.int16), np.ones((4, 5), bool))
    with pytest.raises(IndexError):
        dk.frame(data, 6)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32])
def test_vector_moments_at_full_scale_values(dtype):
    """The vector moments (rows of whole 16-byte vectors) on ARINA-sized frames: every
    value at the dtype's maximum (the widest per-vector partial sums), a full mask with
    scattered holes (partial vectors beside whole ones), and a disk."""
    info = np.iinfo(dtype)
    data = np.full((2, 3, 192, 192), info.max, dtype=dtype)
    rng = np.random.default_rng(11)
    data[1] = rng.integers(0, info.max, (3, 192, 192), dtype=dtype, endpoint=True)
    gpu = cupy.asarray(data)
    rr, cc = np.mgrid[:192, :192]
    holes = np.ones((192, 192), bool)
    holes.reshape(-1)[rng.choice(192 * 192, 300, replace=False)] = False
    for mask in (np.ones((192, 192), bool), holes, (rr - 96) ** 2 + (cc - 90) ** 2 < 23**2):
        total, sum_r, sum_c = reference_moments(data, mask)
        t, r, c = dk.moments(gpu, mask)
        np.testing.assert_array_equal(t.get(), total)
        np.testing.assert_array_equal(r.get(), sum_r)
        np.testing.assert_array_equal(c.get(), sum_c)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32])
@pytest.mark.parametrize("shape", [(5, 7, 32, 48), (3, 4, 17, 19), (2, 3, 192, 192)])
def test_zero_invalid_pixels_equals_numpy(dtype, shape):
    rng = np.random.default_rng([7, *shape, np.dtype(dtype).itemsize])
    data = rng.integers(1, np.iinfo(dtype).max, shape, dtype=dtype, endpoint=True)
    for density in (0.0, 0.01, 0.3, 1.0):
        valid = rng.random(shape[-2:]) >= density
        expected = np.where(valid, data, 0).astype(dtype)
        for validity in (valid, cupy.asarray(valid)):
            gpu = cupy.asarray(data)
            assert dk.zero_invalid_pixels(gpu, validity) is None  # in place
            np.testing.assert_array_equal(gpu.get(), expected)


def test_zero_invalid_pixels_refuses_what_it_cannot_do_in_place():
    data = cupy.ones((4, 6, 8), dtype=cupy.uint16)
    with pytest.raises(ValueError, match="C-contiguous"):
        dk.zero_invalid_pixels(data[:, :, ::2], np.ones((6, 4), dtype=bool))
    with pytest.raises(ValueError, match="does not match"):
        dk.zero_invalid_pixels(data, np.ones((6, 7), dtype=bool))
    with pytest.raises(UnsupportedDtypeError):
        dk.zero_invalid_pixels(cupy.ones((2, 4, 4), dtype=cupy.int16), np.ones((4, 4), dtype=bool))
