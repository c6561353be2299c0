"""The fused CUDA Fourier integration (quantem.stem4d.cuda.integrate) against the numpy path."""

from __future__ import annotations

import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy (not installed here)")

from quantem.stem4d.arrays import array_digest  # noqa: E402
from quantem.stem4d.dpc.integrate import CACHED_GRID_POINTS, clear_cache, integrate_gradient  # noqa: E402


def smooth_gradient(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    rows, cols = np.mgrid[: shape[0], : shape[1]]
    phase = sum(
        rng.random() * np.sin(2 * np.pi * (rng.random() * rows / 9 + rng.random() * cols / 7))
        for _ in range(5)
    )
    g_r, g_c = np.gradient(phase)
    return g_r.astype(dtype), g_c.astype(dtype)


@pytest.mark.parametrize("boundary", ["mirror", "periodic"])
@pytest.mark.parametrize("shape", [(64, 64), (37, 52), (512, 512)])
@pytest.mark.parametrize("dtype, relative", [(np.float64, 1e-9), (np.float32, 2e-4)])
def test_cuda_integration_matches_numpy_and_is_deterministic(boundary, shape, dtype, relative):
    g_r, g_c = smooth_gradient(shape, dtype, seed=shape[0])
    step = (0.5, 0.75)
    cpu = integrate_gradient(g_r.astype(np.float64), g_c.astype(np.float64), step=step,
                             boundary=boundary)  # fmt: skip
    gpu = integrate_gradient(cupy.asarray(g_r), cupy.asarray(g_c), step=step, boundary=boundary)
    assert isinstance(gpu, cupy.ndarray) and gpu.dtype == dtype and gpu.shape == shape
    scale = float(np.abs(cpu).max())
    assert float(np.abs(gpu.get() - cpu).max()) <= relative * scale
    again = integrate_gradient(cupy.asarray(g_r), cupy.asarray(g_c), step=step, boundary=boundary)
    assert array_digest(gpu) == array_digest(again)
    clear_cache()  # a rebuilt grid gives the same bits
    third = integrate_gradient(cupy.asarray(g_r), cupy.asarray(g_c), step=step, boundary=boundary)
    assert array_digest(gpu) == array_digest(third)


def test_large_grids_are_not_cached_and_still_agree():
    side = int(np.sqrt(CACHED_GRID_POINTS)) // 2 + 8  # its mirror grid exceeds the cache limit
    g_r, g_c = smooth_gradient((side, side), np.float64, seed=3)
    cpu = integrate_gradient(g_r, g_c)
    gpu = integrate_gradient(cupy.asarray(g_r), cupy.asarray(g_c))
    assert float(np.abs(gpu.get() - cpu).max()) <= 1e-9 * float(np.abs(cpu).max())
