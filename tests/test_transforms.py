"""Load options: parse_load_options validation and finish_frames semantics."""

from __future__ import annotations

import numpy as np
import pytest

from quantem.stem4d.errors import UnsupportedDtypeError
from quantem.stem4d.io.transforms import (
    LOAD_METADATA_KEYS,
    FrameFinisher,
    LoadOptions,
    finish_frames,
    parse_load_options,
)


def test_parse_accepts_aliases_and_rejects_the_rest():
    # apply_mask defaults to True (wave 2, as in the upstream quantem.gpu API)
    assert parse_load_options() == LoadOptions("native", True, 1) == LoadOptions()
    assert parse_load_options("u8", True, 4) == LoadOptions("uint8", True, 4)
    assert parse_load_options(np.uint16).dtype == "uint16"
    assert parse_load_options(np.dtype("uint32")).dtype == "uint32"
    assert parse_load_options("U16").dtype == "uint16"
    for bad in ("float32", "i8", None, 3):
        with pytest.raises(UnsupportedDtypeError):
            parse_load_options(bad)
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="det_bin"):
            parse_load_options("native", False, bad)
    with pytest.raises(ValueError, match="apply_mask"):
        parse_load_options("native", 1, 1)


def test_identity_returns_input_unchanged():
    frames = np.arange(2 * 3 * 4, dtype=np.uint16).reshape(2, 3, 4)
    out, info = finish_frames(frames, np.ones((3, 4), bool), apply_mask=False)
    assert out is frames
    assert info == {"clipped_pixels": 0, "bin_saturated_pixels": 0, "det_bin_dropped": [0, 0]}


def test_default_masks_and_overwrite_masks_in_place():
    frames = np.arange(2 * 3 * 4, dtype=np.uint16).reshape(2, 3, 4) + 1
    validity = np.ones((3, 4), bool)
    validity[1, 2] = False
    out, _ = finish_frames(frames, validity)
    assert out is not frames and frames.all()  # the input is not modified
    assert (out[:, 1, 2] == 0).all() and np.count_nonzero(out == 0) == 2
    options = LoadOptions()
    owned = frames.copy()
    again, info = options.finish(owned, validity, overwrite=True)
    assert again is owned  # masked in place: no second array
    np.testing.assert_array_equal(again, out)
    assert info == {"clipped_pixels": 0, "bin_saturated_pixels": 0, "det_bin_dropped": [0, 0]}
    # a change of dtype or shape needs a new array even with overwrite
    narrowed, _ = LoadOptions("uint8").finish(owned, validity, overwrite=True)
    assert narrowed is not owned and narrowed.dtype == np.uint8


def test_frame_finisher_equals_one_finish_and_metadata_keys():
    rng = np.random.default_rng(3)
    frames = rng.integers(0, 70000, size=(9, 7, 6), dtype=np.uint32)
    validity = rng.random((7, 6)) > 0.2
    options = LoadOptions("uint16", True, 2)
    whole, info = options.finish(frames, validity)
    finisher = FrameFinisher(options, 9, frames.dtype, (7, 6), validity)
    for start in range(0, 9, 4):
        finisher(start, min(start + 4, 9), frames[start : start + 4])
    np.testing.assert_array_equal(finisher.out, whole)
    assert finisher.info == info and info["clipped_pixels"] > 0
    md = options.metadata(info, stored_dtype=np.uint32, stored_detector_shape=(7, 6))
    assert tuple(md) == LOAD_METADATA_KEYS
    assert md["dtype"] == "uint32" and md["detector_shape"] == (3, 3)
    assert md["stored_detector_shape"] == (7, 6) and md["det_bin_dropped"] == [1, 0]
    assert md["load_options"] == {"dtype": "uint16", "apply_mask": True, "det_bin": 2}
    validity_out = options.finish_validity(validity)
    assert validity_out.shape == (3, 3)
    assert validity_out[0, 0] == validity[:2, :2].all()


def test_mask_happens_before_narrowing_and_binning():
    frames = np.full((1, 4, 4), 300, dtype=np.uint16)
    frames[0, 0, 0] = 60000
    validity = np.ones((4, 4), bool)
    validity[0, 0] = False
    original = frames.copy()
    out, info = finish_frames(frames, validity, dtype="u8", apply_mask=True, det_bin=2)
    np.testing.assert_array_equal(frames, original)  # input not modified
    # Masked pixel is 0 before saturation: 15 pixels of 300 clip to 255.
    assert info["clipped_pixels"] == 15
    assert out.dtype == np.uint32
    np.testing.assert_array_equal(out[0], [[3 * 255, 4 * 255], [4 * 255, 4 * 255]])
    out, info = finish_frames(frames, validity, dtype="u8", apply_mask=False)
    assert info["clipped_pixels"] == 16 and out.dtype == np.uint8 and out.max() == 255


def test_widening_and_same_type():
    frames = np.array([[[0, 255]]], dtype=np.uint8)
    out, info = finish_frames(frames, np.ones((1, 2), bool), dtype="u32")
    assert out.dtype == np.uint32 and info["clipped_pixels"] == 0
    np.testing.assert_array_equal(out, frames)
    out, _ = finish_frames(frames, np.ones((1, 2), bool), dtype="u8")
    np.testing.assert_array_equal(out, frames)


def test_bin_drops_the_remainder_and_widens():
    frames = np.arange(2 * 5 * 7, dtype=np.uint8).reshape(2, 5, 7)
    out, info = finish_frames(frames, np.ones((5, 7), bool), det_bin=2)
    assert out.shape == (2, 2, 3) and out.dtype == np.uint32
    assert info["det_bin_dropped"] == [1, 1]
    expected = np.array(
        [
            [
                [frames[n, 2 * i : 2 * i + 2, 2 * j : 2 * j + 2].sum() for j in range(3)]
                for i in range(2)
            ]
            for n in range(2)
        ]
    )
    np.testing.assert_array_equal(out, expected)
    with pytest.raises(ValueError, match="larger than"):
        finish_frames(frames, np.ones((5, 7), bool), det_bin=6)


def test_bin_saturates_uint32_sums_and_counts_them():
    frames = np.full((1, 2, 2), 2**32 - 1, dtype=np.uint32)
    frames[0, 1, 1] = 0
    out, info = finish_frames(frames, np.ones((2, 2), bool), det_bin=2)
    assert out[0, 0, 0] == 2**32 - 1 and info["bin_saturated_pixels"] == 1
    small = np.ones((1, 2, 2), dtype=np.uint32)
    out, info = finish_frames(small, np.ones((2, 2), bool), det_bin=2)
    assert out[0, 0, 0] == 4 and info["bin_saturated_pixels"] == 0


def test_scan_dimensions_pass_through():
    frames = np.ones((2, 3, 4, 4), dtype=np.uint16)
    out, _ = finish_frames(frames, np.ones((4, 4), bool), det_bin=2, apply_mask=True)
    assert out.shape == (2, 3, 2, 2)
    assert (out == 4).all()


def test_bad_validity_shape_and_dtype():
    frames = np.ones((1, 4, 4), dtype=np.uint16)
    with pytest.raises(ValueError, match="validity shape"):
        finish_frames(frames, np.ones((4, 3), bool), apply_mask=True)
    with pytest.raises(UnsupportedDtypeError):
        finish_frames(frames.astype(np.float32), np.ones((4, 4), bool))


class _Namespace:
    """An array module that forwards to numpy and marks the calls it makes as allowed."""

    allowed = 0

    def __getattr__(self, name):
        target = getattr(np, name)
        if not callable(target) or isinstance(target, type):
            return target

        def call(*args, **kwargs):
            _Namespace.allowed += 1
            try:
                return target(*args, **kwargs)
            finally:
                _Namespace.allowed -= 1

        return call


class _GuardedArray(np.ndarray):
    """Raises when a numpy function is applied to it other than through ``_Namespace``."""

    def __array_function__(self, func, types, args, kwargs):
        if not _Namespace.allowed:
            raise AssertionError(f"numpy.{func.__name__} called directly, not through xp")
        return super().__array_function__(func, types, args, kwargs)


@pytest.mark.parametrize(
    "options",
    [
        dict(dtype="u8", apply_mask=True, det_bin=2),
        dict(dtype="u16", apply_mask=False, det_bin=3),
        dict(dtype="native", apply_mask=True, det_bin=1),
    ],
)
def test_finish_frames_uses_only_the_array_module(options):
    """What the CUDA loader relies on: every array operation goes through ``xp``."""
    rng = np.random.default_rng(0)
    plain = rng.integers(0, 70000, size=(3, 7, 6), dtype=np.uint32)
    validity = rng.random((7, 6)) > 0.2
    guarded = plain.view(_GuardedArray)
    got, info = finish_frames(guarded, validity.view(_GuardedArray), xp=_Namespace(), **options)
    expected, expected_info = finish_frames(plain, validity, **options)
    np.testing.assert_array_equal(np.asarray(got), expected)
    assert info == expected_info
