"""Compute workloads on CUDA against the CPU reference, with the tolerances of docs/compute.md.

Integer products (virtual images) and the CoM (exact moments, one correctly rounded
division) are bit-identical across backends. Float64 pipelines (FFTs by cuFFT vs
pocketfft, reductions in a different order) agree to ~1e-10 relative; float32 on CUDA to
~1e-4. On one backend every output is bit-identical run to run.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy (not installed here)")

from quantem.stem4d.acquisition import Acquisition  # noqa: E402
from quantem.stem4d.arrays import array_digest, to_numpy  # noqa: E402
from quantem.stem4d.dpc import dpc  # noqa: E402
from quantem.stem4d.io import load  # noqa: E402
from quantem.stem4d.parallax import parallax  # noqa: E402
from quantem.stem4d.virtual import Annulus, Calibration, Disk, virtual_images  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "srtio3"
TRUTH = json.loads((DATA / "srtio3_truth.json").read_text())

#: Documented CPU-vs-CUDA tolerances (relative to the output's largest magnitude).
FLOAT64_RELATIVE = 1e-9
FLOAT32_RELATIVE = 2e-4


def pair(name: str) -> tuple[Acquisition, Acquisition, Calibration]:
    info = TRUTH["datasets"][name]
    with load(DATA / info["files"]["high"]) as acq:
        data = np.array(acq.data)
        validity = np.array(acq.validity)
        meta = dict(acq.metadata)
    cpu = Acquisition(data, meta, validity, "cpu")
    gpu = Acquisition(cupy.asarray(data), meta, validity, "cuda")
    cal = Calibration(
        energy_ev=TRUTH["energy_ev"],
        mrad_per_pixel=info["mrad_per_pixel"],
        scan_step_angstrom=info["scan_step_angstrom"],
    )
    return cpu, gpu, cal


def close(a, b, relative):
    a, b = to_numpy(a), to_numpy(b)
    scale = max(float(np.abs(a).max()), 1e-300)
    assert float(np.abs(a - b).max()) <= relative * scale


def test_virtual_images_are_identical_across_backends():
    cpu, gpu, cal = pair("focus")
    detectors = {"bf": Disk(), "adf": Annulus(), "df": Annulus(10.0, 30.0, unit="mrad")}
    a = virtual_images(cpu, detectors, calibration=cal)
    b = virtual_images(gpu, detectors, calibration=cal)
    for name in detectors:
        assert isinstance(b[name], cupy.ndarray)
        np.testing.assert_array_equal(a[name], b[name].get())


def test_dpc_cpu_vs_cuda_and_determinism():
    cpu, gpu, cal = pair("focus")
    ref = dpc(cpu, calibration=cal)
    got = dpc(gpu, calibration=cal)
    np.testing.assert_array_equal(ref.com_row, got.com_row.get())  # exact moments
    np.testing.assert_array_equal(ref.com_col, got.com_col.get())
    assert abs(ref.rotation_deg - got.rotation_deg) < 1e-8
    for name in ("gradient_row", "gradient_col", "phase", "divergence"):
        close(ref.outputs()[name], got.outputs()[name], FLOAT64_RELATIVE)
    again = dpc(gpu, calibration=cal)
    for name, array in got.outputs().items():
        assert array_digest(array) == array_digest(again.outputs()[name]), name
    single = dpc(gpu, calibration=cal, dtype="float32")
    assert single.phase.dtype == np.float32
    assert abs(single.rotation_deg - ref.rotation_deg) < 0.01
    close(ref.phase, single.phase, FLOAT32_RELATIVE)


def test_parallax_cpu_vs_cuda_and_determinism():
    cpu, gpu, cal = pair("defocus")
    options = dict(calibration=cal, max_shift=3.0, correct_aberrations=True)
    ref = parallax(cpu, **options)
    got = parallax(gpu, **options)
    close(ref.alignment.shifts, got.alignment.shifts, FLOAT64_RELATIVE)
    assert got.fit.c10_angstrom == pytest.approx(ref.fit.c10_angstrom, rel=FLOAT64_RELATIVE)
    assert got.fit.rotation_deg == pytest.approx(ref.fit.rotation_deg, abs=1e-8)
    close(ref.image, got.image, FLOAT64_RELATIVE)
    close(ref.image_corrected, got.image_corrected, FLOAT64_RELATIVE)
    again = parallax(gpu, **options)
    for name, array in got.outputs().items():
        assert array_digest(array) == array_digest(again.outputs()[name]), name
