"""SSB preparation streamed in scan-row blocks (quantem/stem4d/ssb/stream.py) against the in-memory one.

For integer counts every streamed product (mean pattern, centre of mass, the BF-disk
pixels, hence G) is the same number as in memory, so the prepared data must be equal
bit for bit, whatever the block size; and the streamed preparation must hold less.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import h5py
import numpy as np
import pytest
from _ssb_abtem import calibration as abtem_calibration
from _ssb_abtem import load as abtem_load
from _ssb_abtem import master as abtem_master
from _ssb_helpers import simulate

import quantem.stem4d.io
from quantem.stem4d.ssb import (
    Aberrations,
    BrightFieldDisk,
    Calibration,
    fit_aberrations,
    prepare,
    reconstruct,
)

POLAR = {"C10": 50.0, "C12": 20.0, "phi12": 0.5}
SRTIO3 = Path(__file__).parent / "data" / "srtio3"


def assert_same_prepared(a, b) -> None:
    """Every prepared array the same bytes on the same device (numpy, or CuPy via .get())."""
    for name in ("G", "q_index", "qx", "qy", "kx", "ky", "region_pixels", "energy"):
        x, y = getattr(a, name), getattr(b, name)
        assert type(x) is type(y), name
        assert x.dtype == y.dtype and x.shape == y.shape, name
        host = [v.get() if hasattr(v, "get") else v for v in (x, y)]
        assert host[0].tobytes() == host[1].tobytes(), name
    assert a.energy_total == b.energy_total
    assert a.disk == b.disk
    assert a.rotation == b.rotation
    assert a.calibration == b.calibration


#: Streaming options against the in-memory preparation (also run on CUDA, tests/hardware).
STREAMED_OPTIONS = [
    {"scan_block_rows": 1},
    {"scan_block_rows": 5},
    {"scan_block_rows": 5, "detector_bin": 2},
    {"scan_block_rows": 7, "scan_region": (3, 19, 2, 22)},
    {"memory_budget_bytes": 40 * 2**20},
    {"scan_block_rows": 4, "dtype": "complex128"},
]


def simulated_counts():
    """The synthetic counts the streaming tests use (also on CUDA, tests/hardware)."""
    data, cal, _ = simulate(polar=POLAR, dose=20000, seed=3, scan=24)
    return data, cal


@pytest.fixture(scope="module")
def counts():
    return simulated_counts()


@pytest.mark.parametrize("options", STREAMED_OPTIONS)
def test_streamed_preparation_is_bit_identical(counts, options):
    data, cal = counts
    in_memory_options = {
        k: v for k, v in options.items() if k in ("detector_bin", "scan_region", "dtype")
    }
    reference = prepare(data, cal, **in_memory_options)
    streamed = prepare(data, cal, **options)
    assert streamed.memory["mode"] == "stream" and reference.memory["mode"] == "in_memory"
    assert_same_prepared(streamed, reference)


def test_streamed_rotation_estimate_and_disk_are_the_in_memory_ones():
    """The compute issue's abTEM fixture (full detector, turned by 12 degrees): no disk,
    no sampling and no rotation given, so all three come from the streamed reductions."""
    truth = json.loads((SRTIO3 / "srtio3_truth.json").read_text())
    master = SRTIO3 / truth["datasets"]["defocus"]["files"]["high"]
    free = Calibration(
        energy_ev=truth["energy_ev"],
        semiangle_mrad=truth["semiangle_mrad"],
        scan_step_a=truth["datasets"]["defocus"]["scan_step_angstrom"],
    )
    with quantem.stem4d.io.load(master) as acq:
        reference = prepare(np.asarray(acq.array).copy(), free)
    assert reference.rotation.source == "dpc"
    assert_same_prepared(prepare(str(master), free, scan_block_rows=5), reference)


def test_streamed_fit_repeats_the_in_memory_fit(counts):
    data, cal = counts
    fits = [
        fit_aberrations(prepare(data, cal, **o), n_trials=10, seed=2, refine_max_evaluations=20)
        for o in ({}, {"scan_block_rows": 4})
    ]
    assert fits[0].trajectory_sha256() == fits[1].trajectory_sha256()


def test_an_arina_file_streams_to_the_loaded_result():
    path = abtem_master("thin", "high")
    reference = prepare(abtem_load("thin", "high"), abtem_calibration("thin"))
    streamed = prepare(str(path), abtem_calibration("thin"), scan_block_rows=5)
    assert streamed.memory["scan_block_rows"] == 5
    assert_same_prepared(streamed, reference)


def test_an_hdf5_dataset_streams(tmp_path, counts):
    data, cal = counts
    path = tmp_path / "scan.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=data, chunks=(1, *data.shape[1:]))
    with h5py.File(path, "r") as f:
        streamed = prepare(f["data"], cal, scan_block_rows=6, detector_bin=2)
    assert_same_prepared(streamed, prepare(data, cal, detector_bin=2))


def test_a_budget_too_small_is_refused_with_the_figure(counts):
    data, cal = counts
    with pytest.raises(ValueError, match=r"too small.*take [0-9]+ bytes"):
        prepare(data, cal, memory_budget_bytes=100_000)
    with pytest.raises(ValueError, match="scan_block_rows"):
        prepare(data, cal, scan_block_rows=0)
    with pytest.raises(ValueError, match="4D"):
        prepare(data[0], cal, scan_block_rows=2)
    # backend picks the device of a streamed source; resident data keep their own.
    with pytest.raises(ValueError, match="on cpu, not 'cuda'"):
        prepare(data, cal, backend="cuda")
    with pytest.raises(ValueError, match="backend must be"):
        prepare(data, cal, scan_block_rows=2, backend="gpu")
    assert prepare(data, cal, scan_block_rows=6, backend="cpu").memory["mode"] == "stream"


def traced_peak(function) -> tuple[int, object]:
    """Peak bytes traced by ``tracemalloc`` (numpy's buffers are traced) while it runs."""
    tracemalloc.start()
    try:
        result = function()
        return tracemalloc.get_traced_memory()[1], result
    finally:
        tracemalloc.stop()


def test_streaming_holds_less_than_the_4d_array(tmp_path):
    """Peak traced allocation of preparation from an HDF5 file: streamed vs loaded whole."""
    rng = np.random.default_rng(0)
    scan, det = 32, 96
    rows = np.arange(det) - 47.5
    pattern = (rows[:, None] ** 2 + rows[None, :] ** 2 < 64).astype(np.float64)
    path = tmp_path / "scan.h5"
    with h5py.File(path, "w") as f:
        dset = f.create_dataset(
            "data", (scan, scan, det, det), dtype=np.uint16, chunks=(1, scan, det, det)
        )
        for i in range(scan):
            dset[i] = rng.poisson(200 * pattern, size=(scan, det, det)).astype(np.uint16)
    four_d = scan * scan * det * det * 2
    cal = Calibration(energy_ev=200e3, semiangle_mrad=25.0, scan_step_a=0.25, rotation_deg=0.0)
    disk = BrightFieldDisk(center=(47.5, 47.5), radius=8.0)
    with h5py.File(path, "r") as f:
        loaded, reference = traced_peak(lambda: prepare(np.asarray(f["data"][...]), cal, disk=disk))
        budget = 4 * reference.nbytes
        streamed, result = traced_peak(
            lambda: prepare(f["data"], cal, disk=disk, memory_budget_bytes=budget)
        )
    assert loaded > four_d  # the whole 4D array was held
    assert streamed <= budget, (streamed, budget)
    assert streamed < loaded / 3, (streamed, loaded)
    assert result.G.tobytes() == reference.G.tobytes()


def test_reconstruction_from_a_stream_matches(counts):
    data, cal = counts
    truth = Aberrations.from_polar(**POLAR)
    a = reconstruct(prepare(data, cal), truth)
    b = reconstruct(prepare(data, cal, scan_block_rows=2), truth)
    assert a.object.tobytes() == b.object.tobytes() and a.loss == b.loss
