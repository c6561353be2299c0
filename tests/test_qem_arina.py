"""Converting ARINA HDF5 acquisitions to .qem."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from quantem.stem4d.io import arina, synthetic
from quantem.stem4d.io.qem.reader import QemFile, load_qem
from quantem.stem4d.io.qem.writer import save_qem

SyntheticModel = synthetic.SyntheticModel
make_frames = synthetic.make_frames
write_synthetic_arina = synthetic.write_synthetic_arina

SCAN = (6, 5)
DET = (24, 20)


@pytest.fixture(scope="module")
def master(tmp_path_factory):
    out = tmp_path_factory.mktemp("arina")
    return write_synthetic_arina(
        out, scan_shape=SCAN, detector_shape=DET, frames_per_shard=7, dose=900.0, processes=1
    )


def test_convert_master_path_exactly(master, tmp_path):
    path = save_qem(master, tmp_path / "a.qem", verify=True, source_hashes=True)
    expected = make_frames(0, SCAN[0] * SCAN[1], scan_shape=SCAN, detector_shape=DET, dose=900.0)
    acq = load_qem(path, apply_mask=False)
    np.testing.assert_array_equal(acq.data.reshape(-1, *DET), expected)
    model = SyntheticModel(SCAN, DET, "uint16", 900.0)
    np.testing.assert_array_equal(acq.metadata["pixel_mask"], model.pixel_mask)
    with QemFile(path) as qem:
        source = qem.metadata["source"]
        assert source["kind"] == "arina-hdf5"
        files = sorted(master.parent.glob("*.h5"))
        assert sorted(source["files"]) == sorted(f.name for f in files)
        for f in files:
            assert source["sha256"][f.name] == hashlib.sha256(f.read_bytes()).hexdigest()


def test_convert_open_source_and_metadata_keys(master, tmp_path):
    source = arina.open_arina(master)
    path = save_qem(source, tmp_path / "b.qem")
    qem_acq = load_qem(path)
    hdf5_acq = arina.load_arina(master)
    np.testing.assert_array_equal(qem_acq.data, hdf5_acq.data)
    missing = set(hdf5_acq.metadata) - set(qem_acq.metadata)
    assert not missing, f"metadata keys the HDF5 reader has but .qem lacks: {sorted(missing)}"
    for key in ("scan_shape", "detector_shape", "n_frames"):
        assert tuple(np.atleast_1d(qem_acq.metadata[key])) == tuple(
            np.atleast_1d(hdf5_acq.metadata[key])
        )
    np.testing.assert_array_equal(qem_acq.validity, hdf5_acq.validity)
    # a second conversion gives the same bytes
    again = save_qem(arina.open_arina(master), tmp_path / "c.qem")
    assert again.read_bytes() == path.read_bytes()
