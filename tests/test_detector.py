"""DetectorSession products against independent plain-numpy / Python-int references."""

from __future__ import annotations

import math
import sys
import types
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.detector import prepare
from quantem.stem4d.detector.masks import DiskEstimate
from quantem.stem4d.errors import BackendUnavailableError, DetectorError, UnsupportedDtypeError

DTYPES = ["uint8", "uint16", "uint32", "float32"]
SEEDS = [0, 1, 7]


# -- helpers (independent of the code under test) --------------------------------------
def make_acquisition(data, validity=None, backend="cpu"):
    scan, det = data.shape[:2], data.shape[2:]
    pixel_mask = None if validity is None else (~validity).astype(np.uint32)
    metadata = {
        "scan_shape": scan,
        "detector_shape": det,
        "dtype": str(data.dtype),
        "n_frames": scan[0] * scan[1],
        "pixel_mask": pixel_mask,
    }
    return Acquisition(data, metadata, validity, backend)


def random_case(seed, dtype, scan=(5, 7), det=(12, 9)):
    """Random counts, a random validity with invalid pixels holding the dtype's maximum."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "u":
        high = min(np.iinfo(dtype).max, 5000)
        data = rng.integers(0, high, size=(*scan, *det), dtype=dtype)
        dead_value = np.iinfo(dtype).max
    else:
        data = (rng.random((*scan, *det)) * 1000).astype(dtype)
        dead_value = np.float32(3.0e38)
    validity = rng.random(det) > 0.15
    data[..., ~validity] = dead_value
    mask = rng.random(det) > 0.4
    return data, validity, mask


def reference_masked_sum(data, mask):
    """Per-frame sum over mask with Python ints (integers) or float64 (floats)."""
    out_int = data.dtype.kind == "u"
    scan_r, scan_c = data.shape[:2]
    out = np.zeros((scan_r, scan_c), dtype=np.uint64 if out_int else np.float64)
    for i in range(scan_r):
        for j in range(scan_c):
            values = data[i, j][mask]
            out[i, j] = sum(int(v) for v in values) if out_int else values.astype(np.float64).sum()
    return out


def reference_moments(data, mask):
    """(total, sum_r, sum_c) as Python-int object arrays, about pixel (0, 0)."""
    rows, cols = np.nonzero(mask)
    scan_r, scan_c = data.shape[:2]
    total = np.empty((scan_r, scan_c), dtype=object)
    sum_r = np.empty_like(total)
    sum_c = np.empty_like(total)
    for i in range(scan_r):
        for j in range(scan_c):
            values = [int(v) for v in data[i, j][rows, cols]]
            total[i, j] = sum(values)
            sum_r[i, j] = sum(int(r) * v for r, v in zip(rows, values))
            sum_c[i, j] = sum(int(c) * v for c, v in zip(cols, values))
    return total, sum_r, sum_c


def circle(det, center, inner, outer):
    """Reference mask: inner < distance <= outer (inner=None: a disk), by explicit loops."""
    out = np.zeros(det, dtype=bool)
    for r in range(det[0]):
        for c in range(det[1]):
            d2 = (r - center[0]) ** 2 + (c - center[1]) ** 2
            out[r, c] = d2 <= outer**2 and (inner is None or d2 > inner**2)
    return out


def assert_products_equal(actual, expected, kind):
    if kind == "u":
        assert actual.dtype == np.uint64
        np.testing.assert_array_equal(actual, expected)
    else:
        assert actual.dtype == np.float64
        np.testing.assert_allclose(actual, expected, rtol=1e-12)


# -- masked sums --------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_masked_sum_matches_reference(seed, dtype):
    data, validity, mask = random_case(seed, dtype)
    session = prepare(make_acquisition(data, validity))
    expected = reference_masked_sum(data, mask & validity)
    result = session.masked_sum(mask)
    assert isinstance(result, np.ndarray) and result.shape == data.shape[:2]
    assert_products_equal(result, expected, np.dtype(dtype).kind)
    exact = session.masked_sum_exact(mask)
    assert type(exact) is np.ndarray
    np.testing.assert_array_equal(exact, result)


@pytest.mark.parametrize("dtype", DTYPES)
def test_invalid_pixels_never_contribute(dtype):
    data, validity, _ = random_case(3, dtype)
    session = prepare(make_acquisition(data, validity))
    everything = np.ones(validity.shape, dtype=bool)
    expected = reference_masked_sum(data, validity)
    assert_products_equal(session.masked_sum(everything), expected, np.dtype(dtype).kind)
    # A mask made only of invalid pixels sums to exactly zero.
    np.testing.assert_array_equal(session.masked_sum(~validity), 0)
    assert np.all(session.mean_dp_exact()[~validity] == 0)


def test_counts_near_uint32_max_accumulate_in_uint64():
    rng = np.random.default_rng(11)
    top = np.iinfo(np.uint32).max
    data = (top - rng.integers(0, 1000, size=(3, 4, 10, 6))).astype(np.uint32)
    validity = np.ones((10, 6), dtype=bool)
    session = prepare(make_acquisition(data, validity))
    mask = np.ones((10, 6), dtype=bool)
    result = session.masked_sum_exact(mask)
    expected = [[sum(int(v) for v in data[i, j].ravel()) for j in range(4)] for i in range(3)]
    assert result.dtype == np.uint64
    assert result.tolist() == expected
    assert min(min(row) for row in expected) > 2**35  # far beyond 32 bits
    summed = session.mean_dp_exact()
    assert summed.tolist() == [
        [sum(int(v) for v in data[:, :, r, c].ravel()) for c in range(6)] for r in range(10)
    ]
    total, sum_r, sum_c = reference_moments(data, mask)
    com = session.center_of_mass()
    for i in range(3):
        for j in range(4):
            assert com.row[i, j] == pytest.approx(
                float(Fraction(sum_r[i, j], total[i, j])), rel=1e-15
            )
            assert com.col[i, j] == pytest.approx(
                float(Fraction(sum_c[i, j], total[i, j])), rel=1e-15
            )


def test_non_contiguous_data():
    data, validity, mask = random_case(5, "uint16", scan=(6, 8), det=(14, 10))
    view = data[::2, 1::2, :, :]
    assert not view.flags.c_contiguous
    session = prepare(make_acquisition(view, validity))
    np.testing.assert_array_equal(
        session.masked_sum(mask), reference_masked_sum(view, mask & validity)
    )


def test_integer_mask_accepted_and_cupy_like_mask_moved_to_host():
    data, validity, mask = random_case(2, "uint16")
    session = prepare(make_acquisition(data, validity))
    expected = session.masked_sum(mask)
    np.testing.assert_array_equal(session.masked_sum(mask.astype(np.uint8)), expected)

    class DeviceArray:  # stands in for cupy.ndarray: only .get() gives host memory
        def __init__(self, host):
            self._host = host

        def get(self):
            return self._host

    np.testing.assert_array_equal(session.masked_sum(DeviceArray(mask)), expected)


# -- mean pattern and frames ----------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_mean_dp_exact_and_mean(dtype):
    data, validity, _ = random_case(4, dtype, scan=(9, 4), det=(7, 11))
    session = prepare(make_acquisition(data, validity))
    summed = session.mean_dp_exact()
    kind = np.dtype(dtype).kind
    if kind == "u":
        expected = np.zeros(validity.shape, dtype=np.uint64)
        for r, c in zip(*np.nonzero(validity)):
            expected[r, c] = sum(int(v) for v in data[:, :, r, c].ravel())
    else:
        expected = np.where(validity, data.astype(np.float64).sum(axis=(0, 1)), 0.0)
    assert_products_equal(summed, expected, kind)
    np.testing.assert_allclose(session.mean_dp(), expected.astype(np.float64) / 36, rtol=1e-15)
    summed[0, 0] += 1  # the session hands out copies
    assert session.mean_dp_exact()[0, 0] == expected[0, 0]


def test_float_products_are_deterministic_and_ignore_nan_in_invalid_pixels():
    data, validity, mask = random_case(8, "float32", scan=(33, 17), det=(16, 16))
    data[..., ~validity] = np.nan
    session = prepare(make_acquisition(data, validity))
    first = session.mean_dp_exact()
    assert np.all(np.isfinite(first))
    again = prepare(make_acquisition(data.copy(), validity)).mean_dp_exact()
    assert first.tobytes() == again.tobytes()
    assert session.masked_sum(mask).tobytes() == session.masked_sum(mask).tobytes()
    assert np.all(np.isfinite(session.masked_sum(np.ones_like(mask))))


def test_frame_returns_raw_counts_including_invalid_pixels():
    data, validity, _ = random_case(6, "uint16", scan=(4, 6), det=(5, 8))
    acq = make_acquisition(data, validity)
    session = prepare(acq)
    np.testing.assert_array_equal(session.frame(0), data[0, 0])
    np.testing.assert_array_equal(session.frame(13), data[2, 1])
    np.testing.assert_array_equal(session.frame((3, 5)), data[3, 5])
    np.testing.assert_array_equal(session.frame(-1), data[3, 5])
    frame = session.frame(7)
    assert frame.dtype == np.uint16
    assert np.all(frame[~validity] == np.iinfo(np.uint16).max)
    frame[:] = 0  # a copy, not a view into the acquisition
    assert np.array_equal(acq.data[1, 1], data[1, 1]) and data[1, 1].any()
    for bad in (24, -25, (4, 0), (0, 6), 1.5, True, (1,)):
        with pytest.raises(IndexError):
            session.frame(bad)


# -- BF / ADF / centre of mass --------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_bf_adf_match_reference_masks(dtype):
    data, validity, _ = random_case(9, dtype, scan=(3, 5), det=(21, 17))
    session = prepare(make_acquisition(data, validity))
    center = (10.3, 7.6)
    kind = np.dtype(dtype).kind
    bf = session.bf(4.5, center=center)
    assert_products_equal(
        bf, reference_masked_sum(data, circle((21, 17), center, None, 4.5) & validity), kind
    )
    adf = session.adf(4.5, 8.0, center=center)
    ring = circle((21, 17), center, 4.5, 8.0) & validity
    assert_products_equal(adf, reference_masked_sum(data, ring), kind)
    if kind == "u":  # disk and annulus tile the larger disk exactly
        np.testing.assert_array_equal(bf + adf, session.bf(8.0, center=center))
    outer_open = session.adf(4.5, None, center=center)
    assert_products_equal(
        outer_open,
        reference_masked_sum(data, ~circle((21, 17), center, None, 4.5) & validity),
        kind,
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_center_of_mass_matches_exact_moments(seed, dtype):
    data, validity, mask = random_case(seed, dtype, scan=(4, 3), det=(11, 13))
    if np.dtype(dtype).kind == "f":
        data = np.round(data).astype(dtype)  # integral floats: the reference stays exact
    data[1, 2] = 0  # an empty frame gives NaN
    session = prepare(make_acquisition(data, validity))
    for user_mask in (None, mask):
        effective = validity if user_mask is None else validity & mask
        total, sum_r, sum_c = reference_moments(data, effective)
        com = session.center_of_mass(user_mask)
        assert com.row.dtype == np.float64 and com.col.dtype == np.float64
        assert com.row.shape == (4, 3)
        for i in range(4):
            for j in range(3):
                if total[i, j] == 0:
                    assert math.isnan(com.row[i, j]) and math.isnan(com.col[i, j])
                    continue
                assert com.row[i, j] == pytest.approx(
                    float(Fraction(sum_r[i, j], total[i, j])), rel=1e-14
                )
                assert com.col[i, j] == pytest.approx(
                    float(Fraction(sum_c[i, j], total[i, j])), rel=1e-14
                )
        row, col = com  # unpacks as a (row, col) pair
        assert row is com.row and col is com.col


# Pairs (count at row 0, count at row 190) whose CoM row 190*b/(a+b) the split
# ``q + r/total`` rounds twice to a different float64 than the one correct rounding.
DOUBLE_ROUNDING_PAIRS = [(10672756, 189544), (13191900, 280563), (12001852, 12456856)]


def test_center_of_mass_is_one_correct_rounding_of_the_exact_moments():
    data = np.zeros((1, len(DOUBLE_ROUNDING_PAIRS), 191, 1), dtype=np.uint32)
    for j, (a, b) in enumerate(DOUBLE_ROUNDING_PAIRS):
        data[0, j, 0, 0], data[0, j, 190, 0] = a, b
        exact = Fraction(190 * b, a + b)
        split = (190 * b // (a + b)) + float((190 * b) % (a + b)) / float(a + b)
        assert split != float(exact)  # the case really is one that double rounding misses
    com = prepare(make_acquisition(data)).center_of_mass()
    for j, (a, b) in enumerate(DOUBLE_ROUNDING_PAIRS):
        assert com.row[0, j] == float(Fraction(190 * b, a + b))
        assert com.col[0, j] == 0.0


def test_exact_ratio_matches_fractions_everywhere():
    from quantem.stem4d.detector.session import exact_ratio

    rng = np.random.default_rng(3)
    total = rng.integers(1, 2**40, 4000, dtype=np.uint64)
    numerator = (
        total * rng.integers(0, 192, 4000, dtype=np.uint64)
        + rng.integers(0, 2**40, 4000, dtype=np.uint64) % total
    )
    # operands past 2**53 (not exact in float64) and an empty frame
    numerator[:3] = [2**60 + 7, 2**53 + 1, 5]
    total[:3] = [2**55 + 3, 3, 2**54 + 1]
    total[3] = 0
    result = exact_ratio(numerator, total)
    assert math.isnan(result[3])
    for i in (0, 1, 2, *range(4, 4000)):
        assert result[i] == float(Fraction(int(numerator[i]), int(total[i]))), i


# -- automatic disk ---------------------------------------------------------------------------
def _disk_pattern_data(center, radius, det=(48, 40), scan=(4, 5), seed=0, dtype=np.uint16):
    rng = np.random.default_rng(seed)
    rows, cols = np.mgrid[: det[0], : det[1]]
    inside = (rows - center[0]) ** 2 + (cols - center[1]) ** 2 <= radius**2
    data = rng.poisson(2.0, size=(*scan, *det)).astype(dtype)
    data[..., inside] += dtype(400)
    return data


def reference_disk(pattern, validity):
    """The documented algorithm, written independently with Python integers and loops."""
    values = {
        (r, c): int(pattern[r, c])
        for r in range(pattern.shape[0])
        for c in range(pattern.shape[1])
        if validity[r, c]
    }
    ordered = sorted(values.values(), reverse=True)
    peak = ordered[min(4, len(ordered) - 1)]  # the 5th brightest: 4 hot pixels ignored
    values = {p: min(v, peak) for p, v in values.items()}
    core = {p: v for p, v in values.items() if 2 * v >= peak}
    total = sum(core.values())
    center_r = float(Fraction(sum(r * v for (r, _), v in core.items()), total))
    center_c = float(Fraction(sum(c * v for (_, c), v in core.items()), total))
    rings = {}
    for (r, c), v in values.items():
        d = math.sqrt((r - center_r) * (r - center_r) + (c - center_c) * (c - center_c))
        rings.setdefault(math.floor(d), []).append(v)
    keys = sorted(rings)
    profile = [float(Fraction(sum(rings[k]), len(rings[k]))) for k in keys]
    drops = [profile[i] - profile[i + 1] for i in range(len(profile) - 1)]
    allowed = [i for i in range(len(drops)) if drops[i] > 0 and 2 * profile[i] >= max(profile)]
    best = max(allowed, key=lambda i: drops[i])  # the first of equal maxima
    offset = 0.0
    if 0 < best < len(drops) - 1:
        a, b, c = drops[best - 1], drops[best], drops[best + 1]
        if a - 2 * b + c < 0:
            offset = min(0.5, max(-0.5, 0.5 * (a - c) / (a - 2 * b + c)))
    return (center_r, center_c), keys[best + 1] + offset


def test_bright_field_disk_found_and_exact():
    center, radius = (21.4, 18.7), 9.0
    data = _disk_pattern_data(center, radius)
    validity = np.ones(data.shape[2:], dtype=bool)
    validity[3, 3] = False
    validity[21, 18] = False  # a dead pixel inside the disk
    data[..., 3, 3] = 65535
    data[..., 21, 18] = 65535
    data[..., 44, 2] = 30000  # unflagged hot pixels, far brighter than the disk
    data[..., 1, 37] = 20000
    session = prepare(make_acquisition(data, validity))
    disk = session.bright_field_disk()
    assert isinstance(disk, DiskEstimate)
    assert abs(disk.center[0] - center[0]) < 0.1 and abs(disk.center[1] - center[1]) < 0.1
    assert abs(disk.radius - radius) < 0.5
    ref_center, ref_radius = reference_disk(session.mean_dp_exact(), validity)
    assert disk.center == ref_center
    assert disk.radius == ref_radius
    # Automatic geometry feeds bf()/adf(); the same explicit values give the same bits.
    np.testing.assert_array_equal(session.bf(), session.bf(disk.radius, disk.center))
    np.testing.assert_array_equal(
        session.adf(outer=20.0), session.adf(disk.radius, 20.0, disk.center)
    )
    again = prepare(make_acquisition(data.copy(), validity)).bright_field_disk()
    assert again == disk


def test_bright_field_disk_needs_counts():
    data = np.zeros((2, 2, 8, 8), dtype=np.uint8)
    session = prepare(make_acquisition(data, np.ones((8, 8), dtype=bool)))
    with pytest.raises(DetectorError, match="no counts"):
        session.bright_field_disk()
    with pytest.raises(DetectorError, match="no counts"):
        session.bf()
    np.testing.assert_array_equal(session.bf(3.0, center=(4, 4)), 0)


# -- several acquisitions ------------------------------------------------------------------
def test_several_acquisitions_keep_their_order():
    cases = [
        random_case(0, "uint8", scan=(3, 4), det=(10, 12)),
        random_case(1, "uint32", scan=(5, 2), det=(9, 7)),
        random_case(2, "uint16", scan=(3, 4), det=(10, 12)),
    ]
    acqs = [make_acquisition(d, v) for d, v, _ in cases]
    session = prepare(acqs)
    assert len(session) == 3 and session.acquisitions == tuple(acqs)
    frames = session.frame(1)
    assert isinstance(frames, list) and len(frames) == 3
    for k, (data, validity, mask) in enumerate(cases):
        np.testing.assert_array_equal(frames[k], data.reshape(-1, *data.shape[2:])[1])
        np.testing.assert_array_equal(
            session[k].masked_sum(mask), reference_masked_sum(data, mask & validity)
        )
        assert session[k].masked_sum(mask).shape == data.shape[:2]
    sums = session.mean_dp_exact()
    assert [s.shape for s in sums] == [(10, 12), (9, 7), (10, 12)]
    # The same mask for the two (10, 12) detectors but not the (9, 7) one: named error.
    with pytest.raises(DetectorError, match=r"acquisition 1: mask has shape \(10, 12\)"):
        session.masked_sum(cases[0][2])
    same = prepare([acqs[2], acqs[0]])
    mask = cases[0][2]
    first, second = same.masked_sum(mask)
    np.testing.assert_array_equal(first, reference_masked_sum(cases[2][0], mask & cases[2][1]))
    np.testing.assert_array_equal(second, reference_masked_sum(cases[0][0], mask & cases[0][1]))
    assert [s.acquisitions[0] for s in same] == [acqs[2], acqs[0]]
    # A tuple is a list too; a single acquisition returns bare products.
    assert isinstance(prepare((acqs[0],)).masked_sum(mask), list)
    assert isinstance(prepare(acqs[0]).masked_sum(mask), np.ndarray)


# -- bad input ---------------------------------------------------------------------------------
def test_bad_masks_raise_clear_errors():
    data, validity, mask = random_case(0, "uint16", det=(12, 9))
    session = prepare(make_acquisition(data, validity))
    with pytest.raises(DetectorError, match=r"shape \(9, 12\), but the detector is \(12, 9\)"):
        session.masked_sum(mask.T)
    with pytest.raises(DetectorError, match="shape"):
        session.masked_sum(mask[None])
    with pytest.raises(DetectorError, match="dtype float64"):
        session.masked_sum(mask.astype(np.float64))
    with pytest.raises(DetectorError, match="other than 0 and 1"):
        session.masked_sum(mask.astype(np.int32) * 2)
    with pytest.raises(DetectorError, match="None"):
        session.masked_sum(None)
    with pytest.raises(DetectorError, match="radius"):
        session.bf(-1.0, center=(3, 3))
    with pytest.raises(DetectorError, match="outer radius"):
        session.adf(5.0, 4.0, center=(3, 3))
    with pytest.raises(DetectorError, match="center"):
        session.bf(2.0, center=(1.0,))
    with pytest.raises(DetectorError, match="center"):
        session.bf(2.0, center=(np.nan, 1.0))
    assert isinstance(DetectorError("x"), ValueError)


def test_bad_acquisitions_raise_clear_errors():
    data, validity, _ = random_case(0, "uint16")
    with pytest.raises(DetectorError, match="empty"):
        prepare([])
    with pytest.raises(TypeError, match="acquisition 0"):
        prepare(data)
    with pytest.raises(UnsupportedDtypeError, match="int16"):
        prepare(make_acquisition(data.astype(np.int16), validity))
    with pytest.raises(UnsupportedDtypeError, match="float16"):
        prepare(make_acquisition(np.zeros(data.shape, np.float16), validity))
    with pytest.raises(UnsupportedDtypeError, match="byte order"):
        prepare(make_acquisition(data.astype(">u2"), validity))
    with pytest.raises(DetectorError, match="validity has shape"):
        prepare(make_acquisition(data, validity.T))
    with pytest.raises(DetectorError, match="validity must be boolean"):
        prepare(make_acquisition(data, validity.astype(np.uint8)))
    with pytest.raises(DetectorError, match="4D"):
        prepare(make_acquisition(data[0], validity))
    good = make_acquisition(data, validity)
    with pytest.raises(DetectorError, match="acquisition 1 is closed"):
        bad = make_acquisition(data, validity)
        bad.close()
        prepare([good, bad])
    session = prepare(good)
    good.close()
    with pytest.raises(DetectorError, match="closed after prepare"):
        session.masked_sum(validity)


def test_validity_none_means_every_pixel_valid():
    data, _, mask = random_case(1, "uint8")
    session = prepare(make_acquisition(data, None))
    np.testing.assert_array_equal(session.masked_sum(mask), reference_masked_sum(data, mask))


# -- dispatch: encoded payloads and the cuda kernel module ------------------------------------
class RecordingEncoded:
    """An ``acq.encoded`` stand-in that answers the kernel interface from numpy data."""

    def __init__(self, data):
        self._data = data
        self.calls = []

    def masked_sum(self, mask):
        self.calls.append("masked_sum")
        return reference_masked_sum(self._data, mask)

    def sum_frames(self):
        self.calls.append("sum_frames")
        return self._data.astype(np.uint64).sum(axis=(0, 1))

    def moments(self, mask):
        self.calls.append("moments")
        total, sum_r, sum_c = reference_moments(self._data, mask)
        return total.astype(np.uint64), sum_r.astype(np.uint64), sum_c.astype(np.uint64)

    def frame(self, i):
        self.calls.append("frame")
        return self._data.reshape(-1, *self._data.shape[2:])[i].copy()


def test_encoded_representation_calls_the_payload():
    data, validity, mask = random_case(4, "uint16", scan=(3, 4), det=(16, 14))
    encoded = RecordingEncoded(data)
    acq = Acquisition(
        None,
        {"scan_shape": (3, 4), "detector_shape": (16, 14), "dtype": "uint16"},
        validity,
        "cuda",
        encoded=encoded,
        representation="encoded",
    )
    dense = prepare(make_acquisition(data, validity))
    session = prepare(acq)
    np.testing.assert_array_equal(session.masked_sum(mask), dense.masked_sum(mask))
    np.testing.assert_array_equal(session.mean_dp_exact(), dense.mean_dp_exact())
    np.testing.assert_array_equal(session.frame(5), dense.frame(5))
    np.testing.assert_array_equal(session.center_of_mass().row, dense.center_of_mass().row)
    assert session.bright_field_disk() == dense.bright_field_disk()
    assert sorted(set(encoded.calls)) == ["frame", "masked_sum", "moments", "sum_frames"]

    class Incomplete:
        def masked_sum(self, mask):
            return None

    acq.encoded = Incomplete()
    with pytest.raises(DetectorError, match="lacks sum_frames, moments, frame"):
        prepare(acq)
    acq.encoded = encoded
    del acq.metadata["detector_shape"]
    with pytest.raises(DetectorError, match="metadata lacks"):
        prepare(acq)


def test_cuda_backend_uses_its_kernel_module(monkeypatch):
    data, validity, mask = random_case(5, "uint16")
    calls = []
    fake = types.ModuleType("quantem.stem4d.cuda.detector_kernels")

    def masked_sum(data4d, mask2d):
        calls.append(("masked_sum", type(mask2d), mask2d.dtype))
        return reference_masked_sum(data4d, mask2d)

    fake.masked_sum = masked_sum
    monkeypatch.setitem(sys.modules, "quantem.stem4d.cuda.detector_kernels", fake)
    session = prepare(make_acquisition(data, validity, backend="cuda"))
    np.testing.assert_array_equal(
        session.masked_sum(mask), reference_masked_sum(data, mask & validity)
    )
    assert calls == [("masked_sum", np.ndarray, np.dtype(bool))]

    fake.masked_sum = lambda data4d, mask2d: np.zeros(data4d.shape[:2], dtype=np.uint32)
    with pytest.raises(DetectorError, match="returned uint32"):
        session.masked_sum(mask)

    monkeypatch.setitem(sys.modules, "quantem.stem4d.cuda.detector_kernels", None)
    with pytest.raises(BackendUnavailableError, match="cuda"):
        session.masked_sum(mask)


def test_ring_boundaries_disk_inclusive_annulus_exclusive_inside():
    """A pixel exactly on a radius belongs to the disk and to the annulus's outer edge only."""
    data = np.zeros((1, 3, 12, 11), dtype=np.uint16)
    data[0, 0, 9, 5] = 1  # distance exactly 3 from (6, 5)
    data[0, 1, 6, 10] = 1  # distance exactly 5
    data[0, 2, 6, 5] = 1  # the centre pixel, distance 0
    session = prepare(make_acquisition(data, np.ones((12, 11), dtype=bool)))
    center = (6, 5)
    assert session.bf(3, center=center).tolist() == [[1, 0, 1]]
    assert session.adf(3, 5, center=center).tolist() == [[0, 1, 0]]
    assert session.adf(0, 3, center=center).tolist() == [[1, 0, 0]]
    assert session.bf(5, center=center).tolist() == [[1, 1, 1]]


def test_disk_centre_includes_pixels_at_exactly_half_maximum():
    from quantem.stem4d.detector.masks import estimate_disk

    pattern = np.zeros((11, 11), dtype=np.uint64)
    rows, cols = np.mgrid[:11, :11]
    disk = (rows - 5) ** 2 + (cols - 5) ** 2 <= 4
    pattern[disk] = 10
    pattern[5, 8] = 5  # exactly half the maximum: inside the centre region
    pattern[2, 5] = 4  # below half: outside
    n = int(disk.sum())
    expected_col = float(Fraction(10 * n * 5 + 5 * 8, 10 * n + 5))
    estimate = estimate_disk(pattern)
    assert estimate.center == (5.0, expected_col)
    assert estimate_disk(pattern.astype(np.float32) / 3).center == pytest.approx(
        estimate.center, rel=1e-12
    )
    invalid = np.ones((11, 11), dtype=bool)
    invalid[5, 8] = False  # an invalid pixel never contributes
    assert estimate_disk(pattern, invalid).center == (5.0, 5.0)


@settings(max_examples=40, deadline=None)
@given(
    dtype=st.sampled_from(["uint8", "uint16", "uint32"]),
    scan=st.tuples(st.integers(1, 5), st.integers(1, 5)),
    det=st.tuples(st.integers(1, 9), st.integers(1, 9)),
    seed=st.integers(0, 2**32 - 1),
)
def test_masked_sum_and_moments_property(dtype, scan, det, seed):
    rng = np.random.default_rng(seed)
    data = rng.integers(0, np.iinfo(dtype).max, size=(*scan, *det), dtype=dtype, endpoint=True)
    validity = rng.random(det) > 0.2
    mask = rng.random(det) > 0.5
    session = prepare(make_acquisition(data, validity))
    effective = mask & validity
    np.testing.assert_array_equal(session.masked_sum(mask), reference_masked_sum(data, effective))
    total, sum_r, sum_c = reference_moments(data, effective)
    com = session.center_of_mass(mask)
    for i in range(scan[0]):
        for j in range(scan[1]):
            if total[i, j] == 0:
                assert math.isnan(com.row[i, j])
            else:
                assert com.row[i, j] == pytest.approx(
                    float(Fraction(sum_r[i, j], total[i, j])), rel=1e-14
                )
                assert com.col[i, j] == pytest.approx(
                    float(Fraction(sum_c[i, j], total[i, j])), rel=1e-14
                )
