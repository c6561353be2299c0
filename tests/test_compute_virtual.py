"""Virtual detectors and the frames provider: dense, scan region, streamed, mrad geometry."""

from __future__ import annotations

import numpy as np
import pytest

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.detector import prepare
from quantem.stem4d.errors import CalibrationError, ComputeError
from quantem.stem4d.io import synthetic
from quantem.stem4d.virtual import Annulus, Calibration, Disk, df, open_frames, virtual_images
from quantem.stem4d.virtual.calibration import electron_wavelength_angstrom

SCAN, DETECTOR = (7, 10), (36, 30)


def make_acquisition(seed: int = 3) -> tuple[Acquisition, synthetic.SyntheticModel]:
    model = synthetic.SyntheticModel(SCAN, DETECTOR, "uint16", dose=20000.0, seed=seed)
    data = model.make_frames(0, model.n_frames).reshape(*SCAN, *DETECTOR)
    metadata = {"scan_shape": SCAN, "detector_shape": DETECTOR, "dtype": "uint16"}
    return Acquisition(data, metadata, model.pixel_mask == 0, "cpu"), model


def reference_sum(acq: Acquisition, mask: np.ndarray) -> np.ndarray:
    """Independent reference: int64 numpy over mask & validity."""
    keep = mask & acq.validity
    return (acq.data.astype(np.int64) * keep).sum(axis=(2, 3)).astype(np.uint64)


def test_df_annulus_and_mask_are_exact():
    acq, _ = make_acquisition()
    disk = prepare(acq).bright_field_disk()
    rows, cols = np.mgrid[: DETECTOR[0], : DETECTOR[1]]
    d2 = (rows - disk.center[0]) ** 2 + (cols - disk.center[1]) ** 2
    annulus = (d2 > 4.0**2) & (d2 <= 11.0**2)
    got = df(acq, inner=4.0, outer=11.0)
    assert got.dtype == np.uint64
    np.testing.assert_array_equal(got, reference_sum(acq, annulus))
    wedge = (rows > disk.center[0]) & (cols < 10)
    np.testing.assert_array_equal(df(acq, wedge), reference_sum(acq, wedge))
    with pytest.raises(ComputeError, match="either a mask or an annulus"):
        df(acq, wedge, inner=3.0)


def test_mrad_geometry_converts_with_the_calibration():
    acq, _model = make_acquisition()
    px = virtual_images(acq, {"bf": Disk(3.0), "adf": Annulus(3.0, 9.0)})
    # 2 mrad per pixel: 6 mrad is 3 pixels.
    calibration = Calibration(mrad_per_pixel=2.0)
    mrad = virtual_images(
        acq,
        {"bf": Disk(6.0, unit="mrad"), "adf": Annulus(6.0, 18.0, unit="mrad")},
        calibration=calibration,
    )
    for name in px:
        np.testing.assert_array_equal(px[name], mrad[name])
    # From the convergence angle, the radius is the automatic disk estimate.
    radius = prepare(acq).bright_field_disk().radius
    by_convergence = virtual_images(
        acq, {"bf": Disk(10.0, unit="mrad")}, calibration=Calibration(convergence_mrad=10.0)
    )
    np.testing.assert_array_equal(by_convergence["bf"], prepare(acq).bf(radius))
    with pytest.raises(CalibrationError, match="angular pixel size"):
        Calibration().detector_mrad_per_pixel  # noqa: B018


def test_calibration_validation_and_wavelength():
    assert electron_wavelength_angstrom(200e3) == pytest.approx(0.025079, rel=1e-4)
    assert electron_wavelength_angstrom(300e3) == pytest.approx(0.019687, rel=1e-4)
    with pytest.raises(CalibrationError, match="positive"):
        Calibration(energy_ev=-1)
    assert Calibration(scan_step_angstrom=0.5).scan_step == (0.5, 0.5)


def test_scan_region_of_a_dense_acquisition():
    acq, _ = make_acquisition()
    mask = np.zeros(DETECTOR, dtype=bool)
    mask[10:20, 5:25] = True
    full = df(acq, mask)
    region = df(acq, mask, scan_region=(2, 6, 3, 9))
    np.testing.assert_array_equal(region, full[2:6, 3:9])
    with pytest.raises(ValueError, match="outside the scan"):
        df(acq, mask, scan_region=(0, 99, 0, 2))


@pytest.mark.parametrize("batch_frames", [1, 13, 512])
def test_streamed_products_equal_dense_bit_for_bit(tmp_path, batch_frames):
    acq, _ = make_acquisition(seed=5)
    master = synthetic.write_synthetic_arina(
        tmp_path,
        "s",
        SCAN,
        DETECTOR,
        "uint16",
        frames_per_shard=17,
        dose=20000.0,
        seed=5,
        processes=1,
    )
    dense = open_frames(acq)
    stream = open_frames(master, batch_frames=batch_frames)
    assert stream.kind == "stream" and stream.scan_shape == SCAN
    np.testing.assert_array_equal(stream.pattern_sum(), dense.pattern_sum())
    assert stream.disk() == dense.disk()
    mask = np.zeros(DETECTOR, dtype=bool)
    mask[8:30, 4:20] = True
    np.testing.assert_array_equal(stream.masked_sums([mask])[0], dense.masked_sums([mask])[0])
    for a, b in zip(stream.center_of_mass(), dense.center_of_mass()):
        np.testing.assert_array_equal(a, b)
    rows, cols = np.array([3, 17, 20]), np.array([2, 15, 29])
    np.testing.assert_array_equal(stream.pixel_stack(rows, cols), dense.pixel_stack(rows, cols))
    # A region, streamed: the same as the dense region.
    region = open_frames(master, batch_frames=batch_frames, scan_region=(1, 5, 2, 8))
    np.testing.assert_array_equal(
        region.masked_sums([mask])[0], dense.masked_sums([mask])[0][1:5, 2:8]
    )


def test_bad_source_is_refused():
    with pytest.raises(ComputeError, match="cannot compute from a int"):
        open_frames(3)


def test_stream_backend_is_checked(tmp_path):
    acq, _ = make_acquisition()
    with pytest.raises(ComputeError, match="backend must be 'cpu' or 'cuda'"):
        open_frames(acq, backend="gpu")
    with pytest.raises(ComputeError, match="the acquisition is on 'cpu', not 'cuda'"):
        open_frames(acq, backend="cuda")
    assert open_frames(acq, backend="cpu").backend == "cpu"
    master = synthetic.write_synthetic_arina(
        tmp_path, "b", SCAN, DETECTOR, "uint16", frames_per_shard=17, processes=1
    )
    assert open_frames(master, backend="cpu").batch_frames == 512
    try:
        import cupy  # noqa: F401
    except ImportError:
        from quantem.stem4d.errors import BackendUnavailableError

        with pytest.raises(BackendUnavailableError):
            open_frames(master, backend="cuda")
