"""Streaming on CUDA: an ARINA file decoded onto the GPU batch by batch gives the dense
CUDA acquisition's products bit for bit (virtual images, CoM, summed pattern, pixel
images), and the DPC and parallax workloads' outputs with the same SHA-256."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy (not installed here)")

from quantem.stem4d.acquisition import Acquisition  # noqa: E402
from quantem.stem4d.arrays import array_digest, to_numpy  # noqa: E402
from quantem.stem4d.dpc import dpc  # noqa: E402
from quantem.stem4d.io import load, synthetic  # noqa: E402
from quantem.stem4d.parallax import parallax  # noqa: E402
from quantem.stem4d.virtual import Calibration, open_frames  # noqa: E402

SCAN, DETECTOR = (7, 10), (36, 30)
DATA = Path(__file__).resolve().parents[1] / "data" / "srtio3"
TRUTH = json.loads((DATA / "srtio3_truth.json").read_text())


@pytest.fixture(scope="module")
def master(tmp_path_factory):
    return synthetic.write_synthetic_arina(
        tmp_path_factory.mktemp("stream"), "s", SCAN, DETECTOR, "uint16",
        frames_per_shard=17, dose=20000.0, seed=5, processes=1,
    )  # fmt: skip


def dense_on_gpu(seed: int = 5) -> Acquisition:
    model = synthetic.SyntheticModel(SCAN, DETECTOR, "uint16", dose=20000.0, seed=seed)
    data = model.make_frames(0, model.n_frames).reshape(*SCAN, *DETECTOR)
    metadata = {"scan_shape": SCAN, "detector_shape": DETECTOR, "dtype": "uint16"}
    return Acquisition(cupy.asarray(data), metadata, model.pixel_mask == 0, "cuda")


@pytest.mark.parametrize("batch_frames", [1, 13, 31, 8192])
def test_streamed_products_on_cuda_equal_dense_bit_for_bit(master, batch_frames):
    dense = open_frames(dense_on_gpu())
    stream = open_frames(master, batch_frames=batch_frames, backend="cuda")
    assert (stream.kind, stream.backend, stream.scan_shape) == ("stream", "cuda", SCAN)
    np.testing.assert_array_equal(stream.pattern_sum(), to_numpy(dense.pattern_sum()))
    assert stream.disk() == dense.disk()
    mask = np.zeros(DETECTOR, dtype=bool)
    mask[8:30, 4:20] = True
    ring = np.zeros(DETECTOR, dtype=bool)
    ring[2:34, 1:29] = True
    ring[10:26, 8:22] = False
    got = stream.masked_sums([mask, ring])
    want = dense.masked_sums([mask, ring])
    for g, w in zip(got, want):
        assert isinstance(g, cupy.ndarray) and g.dtype == w.dtype == np.uint64
        np.testing.assert_array_equal(g.get(), w.get())
    for g, w in zip(stream.center_of_mass(), dense.center_of_mass()):
        assert isinstance(g, cupy.ndarray)
        np.testing.assert_array_equal(g.get(), w.get())
    for g, w in zip(stream.center_of_mass(mask), dense.center_of_mass(mask)):
        np.testing.assert_array_equal(g.get(), w.get())
    rows, cols = np.array([3, 17, 20]), np.array([2, 15, 29])
    got_stack = stream.pixel_stack(rows, cols)
    assert isinstance(got_stack, cupy.ndarray)
    np.testing.assert_array_equal(got_stack.get(), dense.pixel_stack(rows, cols).get())
    # A region, streamed on the GPU: the dense region's products.
    region = open_frames(
        master, batch_frames=batch_frames, scan_region=(1, 5, 2, 8), backend="cuda"
    )
    assert region.scan_shape == (4, 6)
    np.testing.assert_array_equal(
        region.masked_sums([mask])[0].get(), dense.masked_sums([mask])[0].get()[1:5, 2:8]
    )
    np.testing.assert_array_equal(
        region.pixel_stack(rows, cols).get(), dense.pixel_stack(rows, cols).get()[:, 1:5, 2:8]
    )
    dense_region = open_frames(dense_on_gpu(), scan_region=(1, 5, 2, 8))
    np.testing.assert_array_equal(region.pattern_sum(), to_numpy(dense_region.pattern_sum()))
    for g, w in zip(region.center_of_mass(mask), dense_region.center_of_mass(mask)):
        np.testing.assert_array_equal(g.get(), w.get())


def test_each_streamed_product_is_one_pipeline_run(master):
    """The batches go through the pipeline's consume hook: one decode run per product,
    however many batches (31 frames a batch: 3 runs of 70 frames, not 3 x 3 batches)."""
    stream = open_frames(master, batch_frames=31, backend="cuda")
    mask = np.ones(DETECTOR, dtype=bool)
    stream.masked_sums([mask, ~mask])
    assert stream.pipeline_runs == 1
    stream.center_of_mass()
    stream.pixel_stack(np.array([1]), np.array([1]))
    assert stream.pipeline_runs == 3


def test_streamed_cpu_and_cuda_products_are_identical(master):
    mask = np.zeros(DETECTOR, dtype=bool)
    mask[5:20, 5:25] = True
    cpu = open_frames(master, batch_frames=13)
    gpu = open_frames(master, batch_frames=13, backend="cuda")
    np.testing.assert_array_equal(cpu.masked_sums([mask])[0], gpu.masked_sums([mask])[0].get())
    for a, b in zip(cpu.center_of_mass(), gpu.center_of_mass()):
        np.testing.assert_array_equal(a, b.get())


def _fixture(name):
    info = TRUTH["datasets"][name]
    cal = Calibration(
        energy_ev=TRUTH["energy_ev"],
        mrad_per_pixel=info["mrad_per_pixel"],
        scan_step_angstrom=info["scan_step_angstrom"],
    )
    return DATA / info["files"]["high"], cal


def test_streamed_dpc_on_cuda_has_the_dense_hashes():
    path, cal = _fixture("focus")
    with load(path, backend="cuda", apply_mask=False) as acq:
        dense = dpc(acq, calibration=cal)
    streamed = dpc(open_frames(path, batch_frames=100, backend="cuda"), calibration=cal)
    assert set(streamed.outputs()) == set(dense.outputs())
    for name, array in dense.outputs().items():
        assert array_digest(streamed.outputs()[name]) == array_digest(array), name


def test_streamed_parallax_on_cuda_has_the_dense_hashes():
    path, cal = _fixture("defocus")
    options = dict(calibration=cal, max_shift=3.0, correct_aberrations=True)
    with load(path, backend="cuda", apply_mask=False) as acq:
        dense = parallax(acq, **options)
    streamed = parallax(open_frames(path, batch_frames=100, backend="cuda"), **options)
    for name, array in dense.outputs().items():
        assert array_digest(streamed.outputs()[name]) == array_digest(array), name
