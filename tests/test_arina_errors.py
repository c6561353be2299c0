"""Bad ARINA input: each problem raises a quantem error naming the file and the problem."""

from __future__ import annotations

import os
import subprocess
import sys

import h5py
import hdf5plugin
import numpy as np
import pytest

from quantem.stem4d.errors import (
    ArinaFormatError,
    ChunkDecodeError,
    QuantemError,
    SourceNotFoundError,
    UnsupportedDtypeError,
)
from quantem.stem4d.io.arina import load_arina, open_arina
from quantem.stem4d.io.synthetic import write_synthetic_arina


@pytest.fixture
def acquisition(tmp_path):
    return write_synthetic_arina(
        tmp_path / "acq",
        scan_shape=(3, 4),
        detector_shape=(16, 16),
        frames_per_shard=5,
        processes=1,
    )


def _shard(master, i):
    return master.parent / f"synthetic_data_{i:06d}.h5"


def test_missing_master(tmp_path):
    with pytest.raises(SourceNotFoundError, match="master file does not exist") as info:
        load_arina(tmp_path / "nope_master.h5")
    assert info.value.path.endswith("nope_master.h5")


def test_missing_shard(acquisition):
    _shard(acquisition, 2).unlink()
    with pytest.raises(SourceNotFoundError, match="missing") as info:
        load_arina(acquisition)
    assert info.value.path == str(_shard(acquisition, 2))


def test_truncated_shard(acquisition):
    shard = _shard(acquisition, 3)
    size = shard.stat().st_size
    with open(shard, "r+b") as f:
        f.truncate(size - 200)
    with pytest.raises(ArinaFormatError) as info:
        load_arina(acquisition)
    assert info.value.path == str(shard)


def test_truncated_after_indexing(acquisition):
    load_arina(acquisition).close()  # index built and stored
    shard = _shard(acquisition, 1)
    with open(shard, "r+b") as f:
        f.truncate(shard.stat().st_size // 2)
    with pytest.raises(ArinaFormatError) as info:
        load_arina(acquisition)
    assert info.value.path == str(shard)


def test_frame_count_mismatch(acquisition):
    with h5py.File(acquisition, "r+") as f:
        spec = f["/entry/instrument/detector/detectorSpecific"]
        del spec["ntrigger"]
        spec["ntrigger"] = np.uint64(13)
    with pytest.raises(ArinaFormatError, match=r"frame count mismatch.*12.*13") as info:
        open_arina(acquisition)
    assert info.value.path == str(acquisition)


def test_pixel_mask_shape_mismatch(acquisition):
    with h5py.File(acquisition, "r+") as f:
        spec = f["/entry/instrument/detector/detectorSpecific"]
        del spec["pixel_mask"]
        spec["pixel_mask"] = np.zeros((16, 15), np.uint32)
    with pytest.raises(ArinaFormatError, match="pixel_mask shape") as info:
        open_arina(acquisition)
    assert info.value.path == str(acquisition)


def test_non_arina_hdf5(tmp_path):
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as f:
        f["/some/data"] = np.zeros((4, 4))
    with pytest.raises(ArinaFormatError, match="not an ARINA master") as info:
        open_arina(path)
    assert info.value.path == str(path)
    with h5py.File(path, "a") as f:
        f["/entry/data/data_000001"] = np.zeros((1, 4, 4), np.uint16)
    with pytest.raises(ArinaFormatError, match=r"chunks|bitshuffle|ntrigger"):
        open_arina(path)


def test_not_hdf5_at_all(tmp_path):
    path = tmp_path / "text_master.h5"
    path.write_text("hello")
    with pytest.raises(ArinaFormatError, match="not a readable HDF5 file"):
        open_arina(path)


def test_unsupported_stored_dtype(tmp_path, acquisition):
    shard = _shard(acquisition, 1)
    shard.unlink()
    with h5py.File(shard, "w") as f:
        f.create_dataset(
            "/entry/data/data",
            data=np.zeros((5, 16, 16), np.float32),
            chunks=(1, 16, 16),
            **hdf5plugin.Bitshuffle(cname="lz4"),
        )
    with pytest.raises(UnsupportedDtypeError, match="float32") as info:
        open_arina(acquisition)
    assert str(shard) in str(info.value)


def test_unsupported_load_dtype(acquisition):
    with pytest.raises(UnsupportedDtypeError, match="float32"):
        load_arina(acquisition, dtype="float32")
    with pytest.raises(ValueError, match="det_bin"):
        load_arina(acquisition, det_bin=0)


def _first_chunk_location(master, shard_index):
    with h5py.File(_shard(master, shard_index), "r") as f:
        info = f["/entry/data/data"].id.get_chunk_info(1)
    return info.byte_offset, info.size


@pytest.mark.parametrize("engine", ["bitshuffle", "numba"])
def test_corrupt_chunk_names_file_and_frame(acquisition, engine):
    offset, _size = _first_chunk_location(acquisition, 2)
    shard = _shard(acquisition, 2)
    with open(shard, "r+b") as f:
        f.seek(offset + 12)  # first block's length field: claim more bytes than exist
        f.write((10**6).to_bytes(4, "big"))
    with pytest.raises(ChunkDecodeError, match="past the end of the chunk") as info:
        load_arina(acquisition, engine=engine)
    assert info.value.path == str(shard)
    assert info.value.fields["frame"] == 6  # second frame of the second shard


def _harness(*argv):
    return subprocess.run(
        [sys.executable, "-m", "harness", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )


def test_cli_info_prints_a_summary(acquisition):
    proc = _harness("data", "info", acquisition)
    assert proc.returncode == 0, proc.stderr
    assert "(3, 4, 16, 16) uint16" in proc.stdout
    assert "12 in 3 shard(s)" in proc.stdout


@pytest.mark.parametrize("breakage", ["missing_shard", "count", "not_hdf5"])
def test_cli_reports_bad_input_in_one_line_exit_1(acquisition, breakage):
    if breakage == "missing_shard":
        _shard(acquisition, 3).unlink()
        expected = "synthetic_data_000003.h5"
    elif breakage == "count":
        with h5py.File(acquisition, "r+") as f:
            spec = f["/entry/instrument/detector/detectorSpecific"]
            spec["nimages"][...] = 2
        expected = "frame count mismatch"
    else:
        acquisition.write_bytes(b"not hdf5")
        expected = "not a readable HDF5 file"
    proc = _harness("data", "info", acquisition)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert expected in lines[0]
    assert "Traceback" not in proc.stderr


def test_errors_are_quantem_errors():
    assert issubclass(ArinaFormatError, QuantemError)
    assert issubclass(ChunkDecodeError, ValueError)


def _rewrite_shard(master, index, frames, *, skip=(), raw=()):
    """Replace shard ``index`` with ``frames``, leaving out or storing unfiltered some chunks."""
    from quantem.stem4d.io.synthetic import encode_chunk

    shard = _shard(master, index)
    shard.unlink()
    with h5py.File(shard, "w") as f:
        dset = f.create_dataset(
            "/entry/data/data",
            shape=frames.shape,
            dtype=frames.dtype,
            chunks=(1, *frames.shape[1:]),
            **hdf5plugin.Bitshuffle(cname="lz4"),
        )
        for i, frame in enumerate(frames):
            if i in skip:
                continue
            if i in raw:  # filter_mask bit 0 set: stored without the bitshuffle filter
                dset.id.write_direct_chunk((i, 0, 0), frame.tobytes(), filter_mask=1)
            else:
                dset.id.write_direct_chunk((i, 0, 0), encode_chunk(frame))
    return shard


def test_unwritten_chunk_is_reported(acquisition):
    from quantem.stem4d.io.synthetic import make_frames

    frames = make_frames(5, 10, scan_shape=(3, 4), detector_shape=(16, 16))
    shard = _rewrite_shard(acquisition, 2, frames, skip={3})
    with pytest.raises(ArinaFormatError, match="no stored chunk") as info:
        open_arina(acquisition)
    assert info.value.path == str(shard) and info.value.fields["frame"] == 8


def test_unfiltered_chunk_is_reported(acquisition):
    from quantem.stem4d.io.synthetic import make_frames

    frames = make_frames(5, 10, scan_shape=(3, 4), detector_shape=(16, 16))
    shard = _rewrite_shard(acquisition, 2, frames, raw={1})
    with pytest.raises(ArinaFormatError, match="without the bitshuffle filter") as info:
        open_arina(acquisition)
    assert info.value.path == str(shard) and info.value.fields["frame"] == 6
    # Control: the same rewrite with every chunk filtered loads the right frames.
    _rewrite_shard(acquisition, 2, frames)
    with load_arina(acquisition, apply_mask=False) as acq:
        np.testing.assert_array_equal(acq.data.reshape(12, 16, 16)[5:10], frames)
