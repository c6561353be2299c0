"""Unit checks of the rANS codec's arithmetic claims (docs/qem-format.md §11)."""

from __future__ import annotations

import numpy as np

from quantem.stem4d.io.qem import format as fmt


def test_float_reciprocal_division_is_exact_after_one_correction():
    """The encoder divides the state by a frequency through a float64 reciprocal; for
    states below ``f << 20`` (what renormalisation leaves) and ``f <= 4096`` the floor of
    the float quotient is the true quotient or one less, fixed by one integer check."""
    rng = np.random.default_rng(0)
    for f in [*range(1, 300), *range(4000, 4097), *rng.integers(300, 4000, 200).tolist()]:
        upper = f << 20
        k = np.concatenate([np.arange(1, 2000), rng.integers(1, upper // f, 4000)])
        states = np.unique(np.concatenate([k * f, k * f - 1, k * f + f - 1, [upper - 1]]))
        states = states[(states >= 16) & (states < upper) & (states < 2**32)].astype(np.int64)
        quotient = (states * (1.0 / np.float64(f))).astype(np.int64)
        remainder = states - quotient * f
        fix = (remainder >= f).astype(np.int64)
        np.testing.assert_array_equal(quotient + fix, states // f)
        np.testing.assert_array_equal(remainder - fix * f, states % f)


def test_decode_step_never_needs_two_words():
    """After a decode step the state is >= 16 * freq, so one 16-bit word restores it."""
    scale = fmt.PROB_SCALE
    for f in (1, 2, 7, 100, 4095, 4096):
        for state in (fmt.RANS_L, fmt.RANS_L + 12345, 2**32 - 1):
            for bias in (0, f - 1):
                after = f * (state >> fmt.PROB_BITS) + bias
                assert after >= 16 * f
                assert after < 2**32
                if after < fmt.RANS_L:
                    assert (after << 16) >= fmt.RANS_L
    assert scale == 4096
