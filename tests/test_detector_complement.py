"""Masked sums of large detectors taken as frame total minus the complement
(``quantem.stem4d.detector.session._Prepared.masked_sum``): exact for integer data, so every
result must equal a direct per-frame sum bit for bit, and the reads must be the small ones."""

from __future__ import annotations

import numpy as np
import pytest

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.detector import prepare
from quantem.stem4d.detector.masks import annulus_mask
from quantem.stem4d.detector.session import _Prepared


def acquisition(dtype: str, seed: int = 0, scan=(6, 5), det=(16, 14)):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "u":
        data = rng.integers(0, min(np.iinfo(dtype).max, 60000), size=(*scan, *det), dtype=dtype)
        dead = np.iinfo(dtype).max
    else:
        data = (rng.random((*scan, *det)) * 1000).astype(dtype)
        dead = np.float32(3.0e38)
    validity = rng.random(det) > 0.1
    data[..., ~validity] = dead  # invalid pixels hold the maximum: they must never count
    metadata = {"scan_shape": scan, "detector_shape": det, "dtype": dtype,
                "n_frames": scan[0] * scan[1]}  # fmt: skip
    return Acquisition(data, metadata, validity, "cpu"), data, validity


def direct(data, mask, validity):
    """Per-frame sums with Python integers (independent of the kernels)."""
    keep = mask & validity
    out = np.zeros(data.shape[:2], dtype=np.uint64)
    for i in range(data.shape[0]):
        for j in range(data.shape[1]):
            out[i, j] = sum(int(v) for v in data[i, j][keep])
    return out


@pytest.fixture
def reads(monkeypatch):
    """The masks each masked-sum kernel call reads (pixels per call)."""
    seen: list[int] = []
    original = _Prepared.call

    def spy(self, name, *args):
        if name == "masked_sum":
            seen.append(int(np.count_nonzero(args[0])))
        return original(self, name, *args)

    monkeypatch.setattr(_Prepared, "call", spy)
    return seen


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32"])
def test_large_masks_equal_direct_sums(dtype, reads):
    acq, data, validity = acquisition(dtype)
    session = prepare(acq)
    n_valid = int(validity.sum())
    rng = np.random.default_rng(3)
    annulus = annulus_mask(data.shape[2:], (7.5, 6.5), 2.0, None)
    masks = [annulus, rng.random(data.shape[2:]) > 0.1, rng.random(data.shape[2:]) > 0.4,
             np.ones(data.shape[2:], dtype=bool), np.zeros(data.shape[2:], dtype=bool)]  # fmt: skip
    for mask in masks:
        got = session.masked_sum(mask)
        assert got.dtype == np.uint64
        np.testing.assert_array_equal(got, direct(data, mask, validity))
    # The first large mask read every valid pixel once (the totals) then its complement;
    # afterwards every mask larger than its complement reads only the complement.
    assert reads[0] == n_valid
    assert reads[1] == n_valid - int((annulus & validity).sum())
    assert max(reads[1:]) <= n_valid // 2


def test_totals_come_from_the_centre_of_mass(reads):
    acq, data, validity = acquisition("uint16", seed=4)
    session = prepare(acq)
    session.center_of_mass()  # over all valid pixels: its denominators are the totals
    mask = np.random.default_rng(1).random(data.shape[2:]) > 0.35  # ~65%: below 3/4
    np.testing.assert_array_equal(session.masked_sum(mask), direct(data, mask, validity))
    assert reads == [int((validity & ~mask).sum())]


def test_without_totals_a_middle_sized_mask_is_read_directly(reads):
    acq, data, validity = acquisition("uint16", seed=5)
    mask = np.random.default_rng(2).random(data.shape[2:]) > 0.35
    np.testing.assert_array_equal(prepare(acq).masked_sum(mask), direct(data, mask, validity))
    assert reads == [int((mask & validity).sum())]


def test_results_are_fresh_arrays():
    acq, data, validity = acquisition("uint16", seed=6)
    session = prepare(acq)
    full = np.ones(data.shape[2:], dtype=bool)
    first = session.masked_sum(full)
    first[...] = 0  # the caller's array: the cached totals must not change
    np.testing.assert_array_equal(session.masked_sum(full), direct(data, full, validity))


def test_float_data_are_summed_directly(reads):
    acq, data, validity = acquisition("float32", seed=7)
    session = prepare(acq)
    mask = annulus_mask(data.shape[2:], (7.5, 6.5), 2.0, None)
    got = session.masked_sum(mask)
    assert got.dtype == np.float64
    assert reads == [int((mask & validity).sum())]
