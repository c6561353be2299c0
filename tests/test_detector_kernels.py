"""The CPU kernel interface (quantem.stem4d.detector.cpu_kernels) against plain numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from quantem.stem4d.detector import cpu_kernels
from quantem.stem4d.errors import UnsupportedDtypeError


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


# -- the narrow (uint32 partial) and flat-span paths ------------------------------------


def python_masked_sum(frame, mask):
    """Independent reference: Python ints, pixel by pixel."""
    return sum(int(v) for v, m in zip(frame.ravel().tolist(), mask.ravel().tolist()) if m)


def python_moments(frame, mask):
    total = sum_r = sum_c = 0
    for (r, c), m in np.ndenumerate(mask):
        if m:
            value = int(frame[r, c])
            total += value
            sum_r += r * value
            sum_c += c * value
    return total, sum_r, sum_c


@settings(max_examples=60, deadline=None)
@given(arrays(np.bool_, st.tuples(st.integers(1, 9), st.integers(1, 9))))
def test_mask_spans_cover_exactly_the_flattened_mask(mask):
    spans = cpu_kernels.mask_spans(mask)
    assert spans.dtype == np.int64 and spans.shape[1] == 2
    rebuilt = np.zeros(mask.size, dtype=bool)
    for start, stop in spans:
        assert start < stop and not rebuilt[start:stop].any()
        rebuilt[start:stop] = True
    np.testing.assert_array_equal(rebuilt, mask.ravel())
    # Spans are maximal: no two touch (otherwise they would be one span).
    assert all(spans[k, 1] < spans[k + 1, 0] for k in range(len(spans) - 1))


@settings(max_examples=60, deadline=None)
@given(
    arrays(np.bool_, st.tuples(st.integers(1, 6), st.integers(1, 30))),
    st.integers(1, 7),
)
def test_split_runs_keep_the_pixels_and_bound_the_length(mask, max_length):
    def covered_by_runs(runs):  # (row, start, stop)
        out = np.zeros(mask.shape, dtype=bool)
        for row, start, stop in runs:
            out[row, start:stop] = True
        return out

    def covered_by_spans(spans):  # (start, stop) of the flattened mask
        out = np.zeros(mask.size, dtype=bool)
        for start, stop in spans:
            out[start:stop] = True
        return out.reshape(mask.shape)

    for table, covered in (
        (cpu_kernels.mask_runs(mask), covered_by_runs),
        (cpu_kernels.mask_spans(mask), covered_by_spans),
    ):
        pieces = cpu_kernels.split_runs(table, max_length)
        lengths = pieces[:, -1] - pieces[:, -2]
        assert pieces.shape[1] == table.shape[1]
        assert ((lengths >= 1) & (lengths <= max_length)).all()
        assert int(lengths.sum()) == int(mask.sum())  # no pixel twice
        np.testing.assert_array_equal(covered(pieces), mask)
    with pytest.raises(ValueError, match="max_length"):
        cpu_kernels.split_runs(cpu_kernels.mask_runs(mask), 0)


@pytest.mark.parametrize(
    "dtype,expected",
    [("uint8", 16843009), ("uint16", 65537), ("uint32", 0), ("float32", 0), ("float64", 0)],
)
def test_narrow_run_limit_is_the_largest_safe_length(dtype, expected):
    limit = cpu_kernels.narrow_run_limit(dtype)
    assert limit == expected
    if limit:
        top = int(np.iinfo(dtype).max)
        assert top * limit <= 2**32 - 1 < top * (limit + 1)


@pytest.mark.parametrize("dtype", ["uint8", "uint16"])
def test_narrow_paths_exact_at_dtype_maximum_with_split_runs(dtype):
    # Rows of 70000 pixels (moments: runs longer than the uint16 limit, 65537, are cut)
    # and 300 x 300 frames (masked sum: one span of 90000 > 65537 pixels is cut).
    top = np.iinfo(dtype).max
    wide = np.full((2, 3, 2, 70000), top, dtype=dtype)
    mask = np.ones((2, 70000), bool)
    total, sum_r, sum_c = cpu_kernels.moments(wide, mask)
    assert (int(total[1, 2]), int(sum_r[1, 2]), int(sum_c[1, 2])) == python_moments(
        wide[1, 2], mask
    )
    assert cpu_kernels.masked_sum(wide, mask)[0, 1] == top * 140000
    big = np.full((1, 2, 300, 300), top, dtype=dtype)
    full = np.ones((300, 300), bool)
    assert cpu_kernels.masked_sum(big, full).tolist() == [[top * 90000] * 2]


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "float32", "float64"])
@pytest.mark.parametrize("layout", ["contiguous", "scan_view", "detector_view"])
def test_every_path_matches_python_reference(dtype, layout):
    rng = np.random.default_rng(11)
    top = 255 if dtype == "uint8" else 65535
    base = rng.integers(0, top + 1, size=(5, 6, 13, 22)).astype(dtype)
    data = {
        "contiguous": base,
        "scan_view": base[1:4, ::2],  # frames still contiguous: flat spans
        "detector_view": base[:, :, :, ::2],  # frames strided: row runs
    }[layout]
    rows, cols = np.mgrid[: data.shape[2], : data.shape[3]]
    ring = np.hypot(rows - 6.2, cols - 5.1)
    for mask in (ring > 3.5, (ring > 2) & (ring <= 5), np.ones(data.shape[2:], bool)):
        sums = cpu_kernels.masked_sum(data, mask)
        total, sum_r, sum_c = cpu_kernels.moments(data, mask)
        for i, j in np.ndindex(data.shape[:2]):
            frame = data[i, j]
            if data.dtype.kind == "u":
                assert int(sums[i, j]) == python_masked_sum(frame, mask)
                assert (int(total[i, j]), int(sum_r[i, j]), int(sum_c[i, j])) == python_moments(
                    frame, mask
                )
            else:
                # Floats: one float64 accumulator in row-major pixel order, bit for bit.
                acc = 0.0
                for value in frame[mask].astype(np.float64).tolist():
                    acc += value
                assert sums[i, j] == acc


@pytest.mark.parametrize("dtype", ["uint8", "uint16"])
def test_sum_frames_narrow_partials_exact_at_dtype_maximum(dtype):
    top = int(np.iinfo(dtype).max)
    data = np.full((40, 50, 3, 4), top, dtype=dtype)
    out = cpu_kernels.sum_frames(data)
    assert out.dtype == np.uint64 and out.tolist() == [[top * 2000] * 4] * 3


def test_narrow_guards_keep_long_columns_and_many_frames_exact():
    top = 65535
    # A column of 65538 pixels: its uint32 column sum could overflow, so the moments
    # must take the uint64 path; 70000 frames of one pixel: the frame sum needs two
    # uint32 partials, not one.
    tall = np.full((1, 2, 65538, 1), top, dtype=np.uint16)
    total, sum_r, sum_c = cpu_kernels.moments(tall, np.ones((65538, 1), bool))
    assert int(total[0, 1]) == top * 65538
    assert int(sum_r[0, 0]) == top * sum(range(65538)) and int(sum_c[0, 0]) == 0
    many = np.full((7, 10000, 1, 1), top, dtype=np.uint16)
    assert cpu_kernels.sum_frames(many).tolist() == [[top * 70000]]
    assert cpu_kernels.sum_frames(many, threads=3).tolist() == [[top * 70000]]


def test_prefetch_distances_and_the_last_frames():
    from quantem.stem4d.detector import cpu_prefetch

    # The full 192 x 192 uint16 frame (73,728 bytes) is already 8 KiB of reads: 1 ahead;
    # a 46-pixel mask reads 92 bytes a frame: 90 frames ahead.
    assert cpu_prefetch.frames_ahead(192 * 192, np.uint16) == 1
    assert cpu_prefetch.frames_ahead(46, np.uint16) == -(-8192 // 92)
    assert cpu_prefetch.frames_ahead(0, np.uint8) == 8192
    assert cpu_prefetch.prefetch_steps(np.uint16) == (32, 1024)
    # Prefetches aimed past the last frame are dropped, never read: a 3-frame input
    # whose mask reads 1 pixel asks for frames thousands ahead, and sums exactly.
    data = np.arange(3 * 4 * 5, dtype=np.uint16).reshape(1, 3, 4, 5)
    mask = np.zeros((4, 5), bool)
    mask[2, 3] = True
    assert cpu_kernels.masked_sum(data, mask).tolist() == [[13, 33, 53]]
    total, sum_r, sum_c = cpu_kernels.moments(data, mask)
    assert total.tolist() == [[13, 33, 53]] and sum_r.tolist() == [[26, 66, 106]]
    assert sum_c.tolist() == [[39, 99, 159]]


@pytest.mark.parametrize("dense", [False, True])
def test_narrow_masked_sum_four_frames_a_pass_and_the_tails(dense):
    # Frames go four at a time across scan rows (a scan region of 53 columns), and ranges of
    # any length leave 1-3 frames; a sparse mask prefetches, a dense one does not.
    rng = np.random.default_rng(21)
    base = rng.integers(0, 65536, size=(52, 60, 64, 64), dtype=np.uint16)
    data = base[1:51, 2:55]
    mask = rng.random((64, 64)) > (0.1 if dense else 0.9)
    assert data[..., mask].size > cpu_kernels.PARALLEL_MIN_WORK  # ranges on a pool
    expected = data.astype(np.uint64)[..., mask].sum(axis=-1)
    for threads in (1, 3):
        np.testing.assert_array_equal(cpu_kernels.masked_sum(data, mask, threads=threads), expected)
