"""Detector products on ARINA data: synthetic (in memory and through io.load) and the foreign fixture."""

from __future__ import annotations

import numpy as np
import pytest

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.detector import prepare
from quantem.stem4d.io import synthetic

SCAN, DETECTOR = (6, 9), (40, 34)


def synthetic_acquisition(dtype: str, seed: int) -> tuple[Acquisition, object]:
    model = synthetic.SyntheticModel(SCAN, DETECTOR, dtype, dose=20000.0, seed=seed)
    frames = synthetic.make_frames(
        0,
        model.n_frames,
        scan_shape=SCAN,
        detector_shape=DETECTOR,
        dtype=dtype,
        seed=seed,
        dose=20000.0,
    )
    data = frames.reshape(*SCAN, *DETECTOR)
    validity = model.pixel_mask == 0
    metadata = {"scan_shape": SCAN, "detector_shape": DETECTOR, "dtype": dtype}
    return Acquisition(data, metadata, validity, "cpu"), model


@pytest.mark.parametrize(("dtype", "seed"), [("uint8", 0), ("uint16", 1), ("uint32", 2)])
def test_products_on_synthetic_frames(dtype, seed):
    acq, model = synthetic_acquisition(dtype, seed)
    validity = acq.validity
    assert not validity.all()  # the model places dead pixels, which must not contribute
    data = acq.data.astype(np.int64)  # independent reference: plain numpy in int64
    session = prepare(acq)

    np.testing.assert_array_equal(
        session.mean_dp_exact(), np.where(validity, data.sum(axis=(0, 1)), 0).astype(np.uint64)
    )
    disk = session.bright_field_disk()
    assert abs(disk.center[0] - model.bf_center[0]) < 0.25
    assert abs(disk.center[1] - model.bf_center[1]) < 0.25
    assert abs(disk.radius - model.bf_radius) < 0.3

    rows, cols = np.mgrid[: DETECTOR[0], : DETECTOR[1]]
    d2 = (rows - disk.center[0]) ** 2 + (cols - disk.center[1]) ** 2
    bf_mask = (d2 <= disk.radius**2) & validity
    adf_mask = (d2 > disk.radius**2) & validity
    np.testing.assert_array_equal(session.bf(), (data * bf_mask).sum(axis=(2, 3)))
    np.testing.assert_array_equal(session.adf(), (data * adf_mask).sum(axis=(2, 3)))

    weights = data * validity
    total = weights.sum(axis=(2, 3))
    com = session.center_of_mass()
    np.testing.assert_allclose(com.row, (weights * rows).sum(axis=(2, 3)) / total, rtol=1e-14)
    np.testing.assert_allclose(com.col, (weights * cols).sum(axis=(2, 3)) / total, rtol=1e-14)
    # The sample shifts the disk: the centre of mass must vary across the scan.
    assert np.ptp(com.row) > 0.05 and np.ptp(com.col) > 0.05


def test_products_through_io_load(tmp_path):
    from quantem.stem4d.io import load

    master = synthetic.write_synthetic_arina(
        tmp_path,
        scan_shape=SCAN,
        detector_shape=DETECTOR,
        dtype="uint16",
        seed=1,
        dose=20000.0,
        frames_per_shard=20,
        processes=1,
        progress=False,
    )
    expected, _ = synthetic_acquisition("uint16", 1)
    with load(master) as acq:
        session = prepare(acq)
        reference = prepare(expected)
        np.testing.assert_array_equal(acq.validity, expected.validity)
        np.testing.assert_array_equal(session.mean_dp_exact(), reference.mean_dp_exact())
        np.testing.assert_array_equal(session.bf(), reference.bf())
        np.testing.assert_array_equal(session.center_of_mass().row, reference.center_of_mass().row)


def test_products_on_the_foreign_arina_fixture(arina_small):
    """Files written by another project: the README's documented sums, validity applied."""
    from quantem.stem4d.io import load

    with load(arina_small / "fixture_master.h5", apply_mask=False) as acq:
        raw = prepare(acq)
        assert int(raw.frame(0).astype(np.int64).sum()) == 522360  # raw counts
        assert raw.masked_sum_exact(np.ones((64, 64), dtype=bool)).tolist() == [[522164]]
    with load(arina_small / "fixture_master.h5") as acq:  # masked by default
        session = prepare(acq)
        everything = np.ones((64, 64), dtype=bool)
        assert session.masked_sum_exact(everything).tolist() == [[522164]]
        assert int(session.frame(0).astype(np.int64).sum()) == 522164
        summed = session.mean_dp_exact()
        assert summed.dtype == np.uint64 and int(summed.sum()) == 522164 and summed[3, 4] == 0
        rows, cols = np.mgrid[:64, :64]
        values = (rows * 64 + cols) % 257
        values[3, 4] = 0
        com = session.center_of_mass()
        assert com.row[0, 0] == pytest.approx((values * rows).sum() / values.sum(), rel=1e-15)
        assert com.col[0, 0] == pytest.approx((values * cols).sum() / values.sum(), rel=1e-15)


def test_products_on_det_binned_uint32_load(tmp_path):
    from quantem.stem4d.io import load

    master = synthetic.write_synthetic_arina(
        tmp_path,
        scan_shape=SCAN,
        detector_shape=DETECTOR,
        dtype="uint16",
        seed=4,
        dose=20000.0,
        processes=1,
        progress=False,
    )
    source, _ = synthetic_acquisition("uint16", 4)
    # Independent binning: 2x2 block sums; a block is valid only if all four pixels are.
    binned = source.data.astype(np.int64).reshape(*SCAN, 20, 2, 17, 2).sum(axis=(3, 5))
    valid = source.validity.reshape(20, 2, 17, 2).all(axis=(1, 3))
    with load(master, det_bin=2) as acq:
        assert acq.data.dtype == np.uint32 and acq.data.shape == (*SCAN, 20, 17)
        np.testing.assert_array_equal(acq.validity, valid)
        session = prepare(acq)
        np.testing.assert_array_equal(
            session.masked_sum_exact(np.ones((20, 17), dtype=bool)),
            (binned * valid).sum(axis=(2, 3)),
        )
        np.testing.assert_array_equal(
            session.mean_dp_exact(), np.where(valid, binned.sum(axis=(0, 1)), 0)
        )
        disk = session.bright_field_disk()
        assert abs(disk.radius - 0.12 * min(DETECTOR) / 2) < 0.5


def test_frame_documentation_matches_the_default_load(arina_small):
    """docs/detector.md and the docstring state what frame(i) returns at invalid pixels."""
    from pathlib import Path

    from quantem.stem4d.detector.session import DetectorSession
    from quantem.stem4d.io import load

    with load(arina_small / "fixture_master.h5") as acq:
        invalid = ~acq.validity
        assert invalid.any() and np.all(prepare(acq).frame(0)[invalid] == 0)
    with load(arina_small / "fixture_master.h5", apply_mask=False) as acq:
        assert np.all(prepare(acq).frame(0)[invalid] != 0)
    docs = (Path(__file__).resolve().parents[1] / "docs" / "detector.md").read_text()
    row = next(line for line in docs.splitlines() if line.startswith("| `frame(i)`"))
    assert "read 0 under the default `apply_mask=True`" in row
    assert "as stored" not in row and "raw counts" not in row
    assert "0 under the default" in DetectorSession.frame.__doc__.replace("\n", " ")
