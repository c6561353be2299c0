"""The CPU kernel interface (quantem.detector.cpu_kernels) against plain numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from quantem.detector import cpu_kernels
from quantem.errors import UnsupportedDtypeError


@settings(max_examples=60, deadline=None)
@given(arrays(np.bool_, st.tuples(st.integers(1, 9), st.integers(1, 9))))
def test_mask_runs_cover_exactly_the_mask(mask):
    runs = cpu_kernels.mask_runs(mask)
    assert runs.dtype == np.int64 and runs.shape[1] == 3
    rebuilt = np.zeros_like(mask)
    for row, start, stop in runs:
        assert start < stop
        assert not rebuilt[row, start:stop].any()  # runs never overlap
        rebuilt[row, start:stop] = True
    np.testing.assert_array_equal(rebuilt, mask)


@pytest.mark.parametrize("n_frames", [1, 3, 63, 64, 65, 130])
def test_sum_frames_any_number_of_frames(n_frames):
    rng = np.random.default_rng(n_frames)
    data = rng.integers(0, 2**16, size=(n_frames, 1, 6, 5), dtype=np.uint16)
    expected = [[sum(int(v) for v in data[:, 0, r, c]) for c in range(5)] for r in range(6)]
    assert cpu_kernels.sum_frames(data).tolist() == expected
    assert cpu_kernels.sum_frames(data.reshape(1, n_frames, 6, 5)).tolist() == expected


def test_empty_inputs():
    data = np.zeros((0, 4, 3, 3), dtype=np.uint8)
    assert cpu_kernels.masked_sum(data, np.ones((3, 3), bool)).shape == (0, 4)
    np.testing.assert_array_equal(cpu_kernels.sum_frames(data), np.zeros((3, 3), np.uint64))
    full = np.ones((2, 2, 3, 3), dtype=np.uint8)
    np.testing.assert_array_equal(cpu_kernels.masked_sum(full, np.zeros((3, 3), bool)), 0)
    total, sum_r, sum_c = cpu_kernels.moments(full, np.zeros((3, 3), bool))
    assert total.dtype == np.uint64 and not total.any() and not sum_r.any() and not sum_c.any()


@pytest.mark.parametrize("dtype", ["float32", "uint16"])
def test_results_do_not_depend_on_thread_count(dtype):
    rng = np.random.default_rng(3)
    # Large enough (> PARALLEL_MIN_WORK pixel visits) that the thread pool is used.
    data = (rng.random((80, 45, 24, 24)) * 1e4).astype(dtype)
    mask = rng.random((24, 24)) > 0.3
    assert data[..., mask].size > cpu_kernels.PARALLEL_MIN_WORK
    results = []
    for threads in (1, 2, 3, 8):
        total, sum_r, sum_c = cpu_kernels.moments(data, mask, threads=threads)
        results.append(
            [
                cpu_kernels.sum_frames(data, threads=threads),
                cpu_kernels.masked_sum(data, mask, threads=threads),
                total,
                sum_r,
                sum_c,
            ]
        )
    expected_sum = data.astype(np.float64).sum(axis=(0, 1))
    np.testing.assert_allclose(results[0][0], expected_sum, rtol=1e-12)
    np.testing.assert_allclose(
        results[0][1], (data.astype(np.float64) * mask).sum(axis=(2, 3)), rtol=1e-12
    )
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_threads_argument_is_checked():
    data = np.zeros((2, 2, 4, 4), dtype=np.uint16)
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="threads"):
            cpu_kernels.sum_frames(data, threads=bad)
    assert cpu_kernels.default_threads() >= 1


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32"])
def test_moments_at_dtype_maximum(dtype):
    top = np.iinfo(dtype).max
    data = np.full((2, 3, 7, 9), top, dtype=dtype)
    mask = np.ones((7, 9), bool)
    total, sum_r, sum_c = cpu_kernels.moments(data, mask)
    assert int(total[0, 0]) == top * 63
    assert int(sum_r[1, 2]) == top * 9 * sum(range(7))
    assert int(sum_c[0, 1]) == top * 7 * sum(range(9))


def test_kernel_input_checks():
    data = np.zeros((2, 2, 4, 4), dtype=np.uint16)
    with pytest.raises(UnsupportedDtypeError, match="int32"):
        cpu_kernels.masked_sum(data.astype(np.int32), np.ones((4, 4), bool))
    with pytest.raises(ValueError, match="4D"):
        cpu_kernels.sum_frames(data[0])
    with pytest.raises(ValueError, match="mask shape"):
        cpu_kernels.masked_sum(data, np.ones((4, 3), bool))
    with pytest.raises(TypeError, match="boolean"):
        cpu_kernels.moments(data, np.ones((4, 4), np.uint8))
    with pytest.raises(IndexError):
        cpu_kernels.frame(data, 4)
    assert cpu_kernels.accumulator_dtype("uint32") == np.uint64
    assert cpu_kernels.accumulator_dtype("float32") == np.float64
