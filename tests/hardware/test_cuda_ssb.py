"""SSB on CUDA against the CPU reference, and the fused kernel against the array path.

Tolerances (complex64 on both backends; cuFFT and pocketfft round differently, and the
fused kernel sums in a different order from CuPy's reduction):

* prepared G: ``max |G_cuda - G_cpu| <= 1e-5 * max |G_cpu|``;
* sideband sums, fused kernel vs array path on the same device: ``<= 1e-4 * max |S|``;
* complex object CPU vs CUDA: ``max |psi_cuda - psi_cpu| <= 1e-4`` (psi is about 1);
  phase within ``1e-4`` rad; loss within ``1e-5``;
* fitted C10 and C12 (200 trials + Nelder-Mead, same seed) within 1 Angstrom CPU vs CUDA.

Same device, same seed: bit-identical object and trajectory (hashes compared).
"""

from __future__ import annotations

import hashlib
import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _ssb_abtem import calibration, focus_at_mid_plane, load, potential
from _ssb_helpers import pearson, simulate

from quantem.stem4d.ssb import Aberrations, fit_aberrations, loss, prepare, reconstruct
from quantem.stem4d.ssb.reconstruct import select_sums, sideband_sums

POLAR = {
    "C10": 50.0,
    "C12": 20.0,
    "phi12": math.radians(30.0),
    "C21": 600.0,
    "phi21": 1.0,
    "C30": 2.0e4,
}
TRUE = Aberrations.from_polar(**POLAR)


@pytest.fixture(scope="module")
def pair():
    import cupy

    data, cal, truth = simulate(polar=POLAR, dose=20000, seed=5)
    return prepare(data, cal), prepare(cupy.asarray(data), cal), truth


def test_prepared_data_agree(pair):
    cpu, gpu, _ = pair
    assert gpu.xp.__name__ == "cupy"
    G = gpu.G.get()
    assert G.shape == cpu.G.shape and G.dtype == cpu.G.dtype
    assert np.abs(G - cpu.G).max() <= 1e-5 * np.abs(cpu.G).max()
    assert np.array_equal(gpu.q_index.get(), cpu.q_index)
    assert np.array_equal(gpu.region_pixels.get(), cpu.region_pixels)


def test_fused_kernel_matches_the_array_path(pair):
    _, gpu, _ = pair
    assert select_sums(gpu) is select_sums(gpu, "fused")
    fused = select_sums(gpu, "fused")(gpu, TRUE).get()
    array = sideband_sums(gpu, TRUE).get()
    assert np.abs(fused - array).max() <= 1e-4 * np.abs(array).max()
    again = select_sums(gpu, "fused")(gpu, TRUE).get()
    assert again.tobytes() == fused.tobytes()


def test_object_phase_and_loss_agree_with_the_cpu(pair):
    cpu, gpu, truth = pair
    a = reconstruct(cpu, TRUE)
    b = reconstruct(gpu, TRUE)
    assert np.abs(b.object.get() - a.object).max() <= 1e-4
    assert np.abs(b.phase.get() - a.phase).max() <= 1e-4
    assert abs(b.loss - a.loss) <= 1e-5
    assert pearson(b.phase.get(), truth) > 0.95


def test_complex128_on_cuda_uses_the_array_path():
    import cupy

    data, cal, _ = simulate(polar=POLAR, scan=16)
    wide = prepare(cupy.asarray(data), cal, dtype="complex128")
    assert select_sums(wide) is sideband_sums
    with pytest.raises(TypeError, match="complex64"):
        select_sums(wide, "fused")(wide, TRUE)
    narrow = prepare(data, cal)
    assert abs(loss(wide, TRUE) - loss(narrow, TRUE)) < 1e-5


def _fit_hashes(prepared):
    result = fit_aberrations(prepared, n_trials=200, seed=0)
    obj = reconstruct(prepared, result.aberrations).object
    host = obj.get() if hasattr(obj, "get") else obj
    return result, result.trajectory_sha256(), hashlib.sha256(host.tobytes()).hexdigest()


def test_fit_repeats_on_cuda_and_agrees_with_the_cpu():
    import cupy

    data = load("thin", "high")
    cal = calibration("thin")
    gpu_runs = [_fit_hashes(prepare(cupy.asarray(data), cal)) for _ in range(2)]
    assert gpu_runs[0][1:] == gpu_runs[1][1:]
    cpu_fit = _fit_hashes(prepare(data, cal))[0].aberrations.to_polar()
    gpu_fit = gpu_runs[0][0].aberrations.to_polar()
    assert abs(gpu_fit["C10"] - cpu_fit["C10"]) < 1.0
    assert abs(gpu_fit["C12"] - cpu_fit["C12"]) < 1.0
    mid = focus_at_mid_plane("thin").to_polar()
    assert abs(gpu_fit["C10"] - mid["C10"]) < 20.0
    gpu_prepared = prepare(cupy.asarray(data), cal)
    phase = reconstruct(gpu_prepared, gpu_runs[0][0].aberrations).phase.get()
    assert pearson(phase, potential("thin", cal)) >= 0.9
