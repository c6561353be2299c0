"""``quantem/stem4d/ssb/sideband.cu`` run on the host by the SIMT emulator (no GPU needed).

The fused kernel's region test, phase polynomial, rotation and tree reduction are checked
against the array-module reference on CPU-prepared data; the same kernel runs on the GPU in
tests/hardware/test_cuda_ssb.py. A 32-thread block keeps the emulation quick (the kernel
takes any power-of-two BLOCK; 256 on the device).
"""

from __future__ import annotations

import ctypes
import math
from importlib import resources

import numpy as np
import pytest
from _ssb_helpers import simulate
from cuda_simt import build, pointer

from quantem.stem4d.ssb import Aberrations, prepare, sideband_sums
from quantem.stem4d.ssb.cuda import KERNEL_FILE

PRELUDE = r"""
#include <cmath>
struct float2 { float x, y; };
static inline float2 make_float2(float a, float b) { return float2{a, b}; }
"""

DRIVER = r"""
extern "C" void run(const float2* G, const float* qx, const float* qy, const float* kx,
                    const float* ky, const float* chi_k, const float* c, float alpha2,
                    int n_pix, float2* sums, int grid) {
    simt_launch(grid, BLOCK, [&] {
        ssb_sideband_sums(G, qx, qy, kx, ky, chi_k, c[0], c[1], c[2], c[3], c[4], c[5], c[6],
                          c[7], c[8], alpha2, n_pix, sums);
    });
}
"""

POLAR = {
    "C10": 40.0,
    "C12": 15.0,
    "phi12": 0.3,
    "C21": 700.0,
    "phi21": 1.2,
    "C23": 300.0,
    "phi23": 0.5,
    "C30": 2.0e4,
}


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    source = resources.files("quantem.stem4d.ssb").joinpath(KERNEL_FILE).read_text(encoding="utf-8")
    lib = build(tmp_path_factory.mktemp("simt_ssb"), "ssb", {"BLOCK": 32}, PRELUDE + source, DRIVER)
    lib.run.restype = None
    return lib


def emulated_sums(lib, prepared, aberrations):
    from quantem.stem4d.ssb.aberrations import chi

    a = aberrations
    coef = np.array(
        (
            a.C10,
            a.C12a,
            a.C12b,
            a.C21a,
            a.C21b,
            a.C23a,
            a.C23b,
            a.C30,
            2 * math.pi / prepared.wavelength_a,
        ),
        dtype=np.float32,
    )
    chi_k = np.ascontiguousarray(chi(prepared.kx, prepared.ky, a, prepared.wavelength_a, np))
    G = np.ascontiguousarray(prepared.G)
    sums = np.zeros(G.shape[0], dtype=np.complex64)
    lib.run(
        pointer(G),
        pointer(prepared.qx),
        pointer(prepared.qy),
        pointer(prepared.kx),
        pointer(prepared.ky),
        pointer(chi_k),
        pointer(coef),
        ctypes.c_float(np.float32(prepared.alpha) ** 2),
        ctypes.c_int(G.shape[1]),
        pointer(sums),
        ctypes.c_int(G.shape[0]),
    )
    return sums


def test_fused_kernel_matches_the_array_reference(kernel):
    data, calibration, _ = simulate(polar=POLAR, scan=16, detector_half=12, dose=5000)
    prepared = prepare(data, calibration)
    aberrations = Aberrations.from_polar(**POLAR)
    reference = sideband_sums(prepared, aberrations)
    fused = emulated_sums(kernel, prepared, aberrations)
    assert np.abs(fused - reference).max() <= 1e-4 * np.abs(reference).max()
    # Every frequency with a region got a nonzero sum (no region dropped by the test).
    assert np.count_nonzero(fused) == np.count_nonzero(reference)
    again = emulated_sums(kernel, prepared, aberrations)
    assert again.tobytes() == fused.tobytes()
