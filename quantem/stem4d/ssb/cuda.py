"""The fused CUDA sideband sums (``sideband.cu``), for complex64 data prepared on CuPy.

One pass over the prepared ``G``: the region test, ``chi(k - Q)``, the phase rotation and
the sum over k happen in registers, and only the pixels of each frequency's region are
read. :func:`quantem.stem4d.ssb.reconstruct.sideband_sums` (the array-module version) is the
reference it is tested against (tests/hardware/test_cuda_ssb.py).
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

import numpy as np

from quantem.stem4d.ssb.aberrations import Aberrations, chi
from quantem.stem4d.ssb.prepare import Prepared

BLOCK = 256
KERNEL_FILE = "sideband.cu"
#: The kernel's dynamic shared memory: one float per thread for each of re and im.
SHARED_BYTES = 2 * BLOCK * 4


@functools.cache
def _kernel(device_id: int) -> Any:
    import cupy

    from quantem.stem4d.cuda.module_loader import COMPILE_OPTIONS, render_defines

    source = resources.files("quantem.stem4d.ssb").joinpath(KERNEL_FILE).read_text(encoding="utf-8")
    with cupy.cuda.Device(device_id):
        module = cupy.RawModule(
            code=render_defines({"BLOCK": BLOCK}) + source, options=COMPILE_OPTIONS
        )
        module.compile()
    return module.get_function("ssb_sideband_sums")


def _coefficients(aberrations: Aberrations, wavelength_a: float) -> np.ndarray:
    a = aberrations
    values = (
        a.C10,
        a.C12a,
        a.C12b,
        a.C21a,
        a.C21b,
        a.C23a,
        a.C23b,
        a.C30,
        2 * np.pi / wavelength_a,
    )
    # The kernel's nine coefficient arguments, in order.
    return np.array(values, dtype=np.float32)


def fused_sideband_sums(
    prepared: Prepared, aberrations: Aberrations, *, block_bytes: int | None = None
) -> Any:
    """``S(Q)`` for complex64 CuPy-prepared data, in one kernel launch (``block_bytes``
    is accepted for the signature of the reference and unused: nothing is staged)."""
    if prepared.xp.__name__ != "cupy":
        raise TypeError("fused_sideband_sums needs data prepared on CuPy (backend cuda)")
    import cupy

    if prepared.G.dtype != np.complex64:
        raise TypeError(f"the fused kernel works on complex64, got {prepared.G.dtype}")
    G = cupy.ascontiguousarray(prepared.G)
    n_freq, n_pix = G.shape
    chi_k = cupy.ascontiguousarray(
        chi(prepared.kx, prepared.ky, aberrations, prepared.wavelength_a, cupy)
    )
    sums = cupy.empty(n_freq, dtype=cupy.complex64)
    coef = _coefficients(aberrations, prepared.wavelength_a)
    kernel = _kernel(cupy.cuda.Device().id)
    kernel(
        (n_freq,),
        (BLOCK,),
        (
            G,
            prepared.qx,
            prepared.qy,
            prepared.kx,
            prepared.ky,
            chi_k,
            *(np.float32(v) for v in coef),
            np.float32(prepared.alpha**2),
            np.int32(n_pix),
            sums,
        ),
        shared_mem=SHARED_BYTES,
    )
    return sums


__all__ = ["BLOCK", "fused_sideband_sums"]
