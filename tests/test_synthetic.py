"""The synthetic ARINA writer: layout, exact content, determinism, compression."""

from __future__ import annotations

import h5py
import hdf5plugin  # noqa: F401  (registers the bitshuffle filter with h5py)
import numpy as np
import pytest

from quantem.stem4d.io import arina_layout as layout
from quantem.stem4d.io.synthetic import (
    SyntheticModel,
    encode_chunk,
    make_frames,
    write_synthetic_arina,
)


def _read_all_with_h5py(master):
    """Frames through the master's external links, decoded by HDF5's own filter."""
    with h5py.File(master, "r") as f:
        group = f[layout.DATA_GROUP]
        names = sorted(k for k in group if layout.SHARD_LINK_PATTERN.match(k))
        return np.concatenate([group[k][()] for k in names])


@pytest.mark.parametrize(
    ("scan", "det", "dtype", "per_shard"),
    [
        ((4, 6), (16, 20), "uint16", 5),
        ((3, 3), (12, 12), "uint8", 4),
        ((2, 5), (9, 7), "uint32", 10),
    ],
)
def test_written_frames_read_back_with_h5py_equal_make_frames(
    tmp_path, scan, det, dtype, per_shard
):
    master = write_synthetic_arina(
        tmp_path,
        scan_shape=scan,
        detector_shape=det,
        dtype=dtype,
        frames_per_shard=per_shard,
        seed=3,
        processes=1,
    )
    assert master == tmp_path / "synthetic_master.h5"
    n = scan[0] * scan[1]
    got = _read_all_with_h5py(master)
    expected = make_frames(0, n, scan_shape=scan, detector_shape=det, dtype=dtype, seed=3)
    assert got.dtype == np.dtype(dtype)
    assert got.shape == (n, *det)
    np.testing.assert_array_equal(got, expected)
    shards = sorted(p.name for p in tmp_path.glob("synthetic_data_*.h5"))
    assert len(shards) == -(-n // per_shard)
    assert not list(tmp_path.glob(".*tmp*"))


def test_master_layout_fields(tmp_path):
    master = write_synthetic_arina(
        tmp_path,
        name="acq",
        scan_shape=(3, 4),
        detector_shape=(10, 8),
        dtype="uint16",
        frames_per_shard=5,
        dead_pixels=[(1, 2), (9, 7)],
        processes=1,
    )
    with h5py.File(master, "r") as f:
        data = f[layout.DATA_GROUP]
        assert list(data.attrs[layout.SCAN_SHAPE_ATTR]) == [3, 4]
        links = {k: data.get(k, getlink=True) for k in data}
        assert sorted(links) == ["data_000001", "data_000002", "data_000003"]
        assert all(isinstance(v, h5py.ExternalLink) for v in links.values())
        assert links["data_000002"].filename == "acq_data_000002.h5"
        assert links["data_000002"].path == layout.SHARD_DATASET
        spec = f[layout.DETECTOR_SPECIFIC_GROUP]
        assert spec[layout.NTRIGGER][()] == 12
        assert spec[layout.NIMAGES][()] == 1
        assert spec[layout.X_PIXELS][()] == 8 and spec[layout.Y_PIXELS][()] == 10
        mask = spec[layout.PIXEL_MASK][()]
        assert mask.dtype == np.uint32 and mask.shape == (10, 8)
        assert sorted(zip(*np.nonzero(mask))) == [(1, 2), (9, 7)]
        det = f[layout.DETECTOR_GROUP]
        assert det[layout.BIT_DEPTH_IMAGE][()] == 16
        assert det[layout.SATURATION_VALUE][()] == 65534
        for key in (layout.X_PIXEL_SIZE, layout.Y_PIXEL_SIZE, layout.DETECTOR_DISTANCE):
            assert det[key][()] > 0
        assert b"ARINA" in det[layout.DESCRIPTION][()]
        shard = f["/entry/data/data_000003"]
        assert shard.shape == (2, 10, 8) and shard.chunks == (1, 10, 8)
        assert layout.BSHUF_FILTER_ID in [int(k) for k in shard._filters]
    frames = _read_all_with_h5py(master)
    assert (frames[:, 1, 2] == 65535).all() and (frames[:, 9, 7] == 65535).all()
    live = np.ones((10, 8), bool)
    live[1, 2] = live[9, 7] = False
    assert frames[:, live].max() <= 65534


def test_no_scan_shape_attribute_when_not_asked(tmp_path):
    master = write_synthetic_arina(
        tmp_path, scan_shape=(2, 2), detector_shape=(8, 8), scan_shape_attr=False, processes=1
    )
    with h5py.File(master, "r") as f:
        assert layout.SCAN_SHAPE_ATTR not in f[layout.DATA_GROUP].attrs


def test_frames_do_not_depend_on_range_or_seed_reuse():
    kw = dict(scan_shape=(5, 5), detector_shape=(16, 16), seed=11)
    whole = make_frames(0, 25, **kw)
    parts = np.concatenate([make_frames(0, 7, **kw), make_frames(7, 25, **kw)])
    np.testing.assert_array_equal(whole, parts)
    other = make_frames(0, 25, scan_shape=(5, 5), detector_shape=(16, 16), seed=12)
    assert not np.array_equal(whole, other)


def test_processes_write_the_same_bytes_of_data(tmp_path):
    kw = dict(scan_shape=(4, 4), detector_shape=(12, 12), frames_per_shard=3, seed=5)
    a = write_synthetic_arina(tmp_path / "a", processes=1, **kw)
    b = write_synthetic_arina(tmp_path / "b", processes=2, **kw)
    np.testing.assert_array_equal(_read_all_with_h5py(a), _read_all_with_h5py(b))


def test_content_is_physically_plausible():
    model = SyntheticModel(
        scan_shape=(12, 12), detector_shape=(64, 64), dose=20000, seed=1, dead_pixels=0
    )
    frames = model.make_frames(0, 144).astype(np.int64)
    totals = frames.sum(axis=(1, 2))
    # Poisson total of ~dose counts per frame.
    assert abs(totals.mean() - 20000) < 0.01 * 20000
    mean = frames.mean(axis=0)
    cr, cc = model.bf_center
    rr, cc_ = np.indices((64, 64))
    dist = np.hypot(rr - cr, cc_ - cc)
    r = model.bf_radius
    # Bright disk brighter than the DF ring just outside, which is brighter than the corners.
    assert mean[dist < r - 2].mean() > 2 * mean[(dist > r + 2) & (dist < r + 6)].mean()
    assert mean[(dist > r + 2) & (dist < r + 6)].mean() > 2 * mean[dist > 1.3 * 32].mean()
    # The disk moves with the sample: centre of mass varies across the scan.
    com_r = (frames * rr).sum(axis=(1, 2)) / totals
    assert com_r.std() > 0.05
    # Frames differ from each other (noise and sample contrast).
    assert len({f.tobytes() for f in frames.astype(np.uint16)}) == 144


def test_default_dose_compresses_like_arina_data():
    model = SyntheticModel(scan_shape=(32, 32), detector_shape=(192, 192), dtype="uint16")
    frames = np.concatenate([model.make_frames(i, i + 1) for i in range(0, 1024, 97)])
    compressed = sum(len(encode_chunk(f)) for f in frames)
    ratio = frames.nbytes / compressed
    live = frames[:, model.pixel_mask == 0].astype(np.int64)
    bits_per_count = compressed * 8 / live.sum()
    assert 5.0 < ratio < 7.5, ratio
    assert 1.8 < bits_per_count < 3.0, bits_per_count


def test_bad_parameters_raise(tmp_path):
    from quantem.stem4d.errors import UnsupportedDtypeError

    with pytest.raises(UnsupportedDtypeError):
        write_synthetic_arina(tmp_path, dtype="float32")
    with pytest.raises(ValueError, match="scan_shape"):
        write_synthetic_arina(tmp_path, scan_shape=(0, 3))
    with pytest.raises(ValueError, match="frames_per_shard"):
        write_synthetic_arina(tmp_path, frames_per_shard=0)
    write_synthetic_arina(tmp_path, scan_shape=(2, 2), detector_shape=(4, 4), processes=1)
    with pytest.raises(FileExistsError):
        write_synthetic_arina(tmp_path, scan_shape=(2, 2), detector_shape=(4, 4), processes=1)


def test_same_parameters_write_byte_identical_files(tmp_path):
    kw = dict(scan_shape=(3, 3), detector_shape=(8, 8), frames_per_shard=4, seed=2, processes=1)
    a = write_synthetic_arina(tmp_path / "a", **kw)
    b = write_synthetic_arina(tmp_path / "b", **kw)
    names = sorted(p.name for p in a.parent.iterdir())
    assert names == sorted(p.name for p in b.parent.iterdir())
    for name in names:
        assert (a.parent / name).read_bytes() == (b.parent / name).read_bytes(), name
