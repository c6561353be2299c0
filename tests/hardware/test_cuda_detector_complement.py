"""Large detectors on CUDA taken as frame total minus the complement: the same uint64
sums as the CPU session's direct ones, bit for bit (integer data, invalid pixels at the
dtype's maximum never counting)."""

from __future__ import annotations

import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy (not installed here)")

from quantem.stem4d.acquisition import Acquisition  # noqa: E402
from quantem.stem4d.detector import prepare  # noqa: E402
from quantem.stem4d.detector.masks import annulus_mask  # noqa: E402


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32"])
def test_complement_sums_on_cuda_equal_the_cpu_direct_sums(dtype):
    rng = np.random.default_rng(11)
    scan, det = (33, 29), (64, 48)
    data = rng.integers(0, min(np.iinfo(dtype).max, 60000), size=(*scan, *det), dtype=dtype)
    validity = rng.random(det) > 0.05
    data[..., ~validity] = np.iinfo(dtype).max
    meta = {"scan_shape": scan, "detector_shape": det, "dtype": dtype, "n_frames": 33 * 29}
    gpu = prepare(Acquisition(cupy.asarray(data), meta, validity, "cuda"))
    masks = [
        annulus_mask(det, (31.5, 23.5), 6.0, None),
        rng.random(det) > 0.2,
        np.ones(det, dtype=bool),
    ]
    for mask in masks:
        # The reference: numpy's direct uint64 sums over mask & validity (exact).
        want = data.astype(np.uint64)[..., mask & validity].sum(axis=-1)
        got = gpu.masked_sum(mask)
        assert isinstance(got, cupy.ndarray) and got.dtype == np.uint64
        np.testing.assert_array_equal(got.get(), want)
    # After a CoM over all valid pixels a fresh session also has its totals.
    fresh = prepare(Acquisition(cupy.asarray(data), meta, validity, "cuda"))
    fresh.center_of_mass()
    mask = rng.random(det) > 0.4
    keep = mask & validity
    np.testing.assert_array_equal(
        fresh.masked_sum(mask).get(), data.astype(np.uint64)[..., keep].sum(axis=-1)
    )
