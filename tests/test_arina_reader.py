"""ARINA reader round trips: what the generator wrote is what load_arina returns, exactly."""

from __future__ import annotations

import json

import h5py
import hdf5plugin
import numpy as np
import pytest
from _arina_helpers import h5py_frames, reference_options
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quantem.stem4d.errors import ScanShapeError
from quantem.stem4d.io import load
from quantem.stem4d.io.arina import iter_frame_batches, load_arina, open_arina, read_compressed
from quantem.stem4d.io.synthetic import SyntheticModel, make_frames, write_synthetic_arina

CASES = [
    # scan, detector, dtype, frames per shard
    ((4, 6), (16, 20), "uint16", 5),
    ((3, 7), (12, 12), "uint8", 4),
    ((5, 2), (9, 13), "uint32", 3),
    ((1, 9), (192, 192), "uint16", 4),
    ((6, 6), (7, 5), "uint8", 36),
]


@pytest.mark.parametrize(("scan", "det", "dtype", "per_shard"), CASES)
@pytest.mark.parametrize("engine", ["bitshuffle", "numba"])
def test_round_trip_equals_generator_and_h5py(tmp_path, scan, det, dtype, per_shard, engine):
    master = write_synthetic_arina(
        tmp_path,
        scan_shape=scan,
        detector_shape=det,
        dtype=dtype,
        frames_per_shard=per_shard,
        seed=7,
        processes=1,
    )
    n = scan[0] * scan[1]
    expected = make_frames(0, n, scan_shape=scan, detector_shape=det, dtype=dtype, seed=7)
    with load_arina(master, engine=engine, apply_mask=False) as acq:
        assert acq.backend == "cpu"
        assert acq.data.shape == (*scan, *det)
        assert acq.data.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(acq.data.reshape(n, *det), expected)
        np.testing.assert_array_equal(acq.data.reshape(n, *det), h5py_frames(master))
        model = SyntheticModel(scan, det, dtype, seed=7)
        np.testing.assert_array_equal(acq.metadata["pixel_mask"], model.pixel_mask)
        np.testing.assert_array_equal(acq.validity, model.pixel_mask == 0)
    assert acq.closed and acq.data is None


def test_io_load_routes_to_the_arina_reader(tmp_path):
    master = write_synthetic_arina(tmp_path, scan_shape=(2, 3), detector_shape=(8, 8), processes=1)
    with load(master, apply_mask=False) as acq:
        np.testing.assert_array_equal(
            acq.data.reshape(6, 8, 8), make_frames(0, 6, scan_shape=(2, 3), detector_shape=(8, 8))
        )


def test_metadata(tmp_path):
    master = write_synthetic_arina(
        tmp_path, scan_shape=(3, 4), detector_shape=(10, 12), frames_per_shard=5, processes=1
    )
    with load_arina(master) as acq:
        md = acq.metadata
    assert md["scan_shape"] == (3, 4) and md["detector_shape"] == (10, 12)
    assert md["dtype"] == "uint16" and md["n_frames"] == 12
    assert md["pixel_mask"].dtype == np.uint32 and md["pixel_mask"].shape == (10, 12)
    assert md["source_files"][0] == str(master)
    assert [p.rsplit("/", 1)[1] for p in md["source_files"][1:]] == [
        "synthetic_data_000001.h5",
        "synthetic_data_000002.h5",
        "synthetic_data_000003.h5",
    ]
    identity = md["source_identity"]
    assert identity["path"] == str(master) and identity["size"] == master.stat().st_size
    import hashlib

    assert identity["master_sha256"] == hashlib.sha256(master.read_bytes()).hexdigest()
    assert md["dwell_time_s"] == pytest.approx(1e-5)
    assert md["ntrigger"] == 12 and md["bit_depth_image"] == 16
    assert md["units"]["x_pixel_size"] == "m"
    json.dumps({k: v for k, v in md.items() if k != "pixel_mask"})  # plain JSON types


@pytest.mark.parametrize("dtype", ["native", "u8", "u16", "u32"])
@pytest.mark.parametrize("apply_mask", [False, True])
@pytest.mark.parametrize("det_bin", [1, 2, 3])
def test_load_options_match_an_independent_reference(tmp_path_factory, dtype, apply_mask, det_bin):
    folder = tmp_path_factory.getbasetemp() / "options-source"
    master = folder / "synthetic_master.h5"
    if not master.exists():
        # High dose so narrowing to u8 really clips; 3 dead pixels at the dtype maximum.
        write_synthetic_arina(
            folder,
            scan_shape=(3, 5),
            detector_shape=(11, 10),
            dose=60000,
            frames_per_shard=4,
            dead_pixels=3,
            processes=1,
        )
    frames = make_frames(
        0, 15, scan_shape=(3, 5), detector_shape=(11, 10), dose=60000, dead_pixels=3
    )
    model = SyntheticModel((3, 5), (11, 10), dose=60000, dead_pixels=3)
    expected, clipped = reference_options(frames, model.pixel_mask, dtype, apply_mask, det_bin)
    with load_arina(master, dtype=dtype, apply_mask=apply_mask, det_bin=det_bin) as acq:
        got = acq.data.reshape(15, *acq.data.shape[2:])
        expected_dtype = (
            "uint32"
            if det_bin > 1
            else (
                "uint16"
                if dtype == "native"
                else {"u8": "uint8", "u16": "uint16", "u32": "uint32"}[dtype]
            )
        )
        assert acq.data.dtype == np.dtype(expected_dtype)
        np.testing.assert_array_equal(got.astype(np.int64), expected)
        assert acq.metadata["clipped_pixels"] == clipped
        assert acq.metadata["detector_shape"] == (11 // det_bin, 10 // det_bin)
        assert acq.metadata["det_bin_dropped"] == (
            [11 % det_bin, 10 % det_bin] if det_bin > 1 else [0, 0]
        )
        assert acq.validity.shape == acq.metadata["detector_shape"]
    if dtype == "u8" and not apply_mask:
        assert clipped > 0  # the case really exercises saturation


def test_scan_shape_resolution_order(tmp_path):
    square = write_synthetic_arina(
        tmp_path / "sq",
        scan_shape=(4, 4),
        detector_shape=(6, 6),
        scan_shape_attr=False,
        processes=1,
    )
    assert open_arina(square).scan_shape == (4, 4)
    assert open_arina(square, scan_shape=(2, 8)).scan_shape == (2, 8)
    with pytest.raises(ScanShapeError, match="holds 15 frames"):
        open_arina(square, scan_shape=(3, 5))
    rect = write_synthetic_arina(
        tmp_path / "rect",
        scan_shape=(3, 5),
        detector_shape=(6, 6),
        scan_shape_attr=False,
        processes=1,
    )
    with pytest.raises(ScanShapeError, match="pass scan_shape"):
        open_arina(rect)
    assert open_arina(rect, scan_shape=(5, 3)).scan_shape == (5, 3)
    attr = write_synthetic_arina(
        tmp_path / "attr", scan_shape=(2, 8), detector_shape=(6, 6), processes=1
    )
    assert open_arina(attr).scan_shape == (2, 8)  # attribute beats the square guess
    assert open_arina(attr, scan_shape=(8, 2)).scan_shape == (8, 2)  # argument beats both


def test_read_compressed_returns_the_stored_chunks(tmp_path):
    master = write_synthetic_arina(
        tmp_path, scan_shape=(3, 4), detector_shape=(16, 16), frames_per_shard=5, processes=1
    )
    source = open_arina(master)
    stored = []
    with h5py.File(master, "r") as f:
        for k in sorted(f["/entry/data"]):
            dset = f["/entry/data"][k]
            stored += [dset.id.read_direct_chunk((i, 0, 0))[1] for i in range(dset.shape[0])]
    buffer, offsets = read_compressed(source, 3, 11, threads=3)
    assert offsets.shape == (9,) and offsets[0] == 0 and offsets[-1] == buffer.size
    for i in range(8):
        assert bytes(buffer[offsets[i] : offsets[i + 1]]) == stored[3 + i]
    big = np.zeros(int(offsets[-1]) + 100, dtype=np.uint8)
    same, _ = read_compressed(source, 3, 11, out=big, threads=1)
    assert same is big
    np.testing.assert_array_equal(big[: offsets[-1]], buffer)
    with pytest.raises(ValueError, match="at least"):
        read_compressed(source, 0, 12, out=np.zeros(10, np.uint8))


def test_iter_frame_batches_in_order(tmp_path):
    master = write_synthetic_arina(
        tmp_path, scan_shape=(3, 7), detector_shape=(8, 8), frames_per_shard=6, processes=1
    )
    source = open_arina(master)
    batches = list(iter_frame_batches(source, batch_frames=4))
    assert [start for start, _ in batches] == [0, 4, 8, 12, 16, 20]
    frames = np.concatenate([b for _, b in batches])
    np.testing.assert_array_equal(
        frames, make_frames(0, 21, scan_shape=(3, 7), detector_shape=(8, 8))
    )


def test_index_sidecar_is_reused_and_fresh_index_rebuilds(tmp_path):
    master = write_synthetic_arina(
        tmp_path / "acq", scan_shape=(2, 5), detector_shape=(8, 8), frames_per_shard=3, processes=1
    )
    index_dir = tmp_path / "idx"
    first = open_arina(master, index_dir=index_dir)
    sidecars = sorted(p.suffix for p in index_dir.iterdir())
    assert sidecars == [".json", ".npz"]
    meta = json.loads(next(index_dir.glob("*.json")).read_text())
    assert meta["source_identity"] == first.source_identity
    # Corrupt the stored offsets: the sidecar fails its checksum, is discarded with a
    # warning and rebuilt, and the load reads the right frames (it used to fail to decode).
    npz = next(index_dir.glob("*.npz"))
    with np.load(npz) as arrays:
        bad = {k: arrays[k].copy() for k in arrays.files}
    bad["frame_offset"] += 1
    with open(npz, "wb") as f:
        np.savez(f, **bad)
    from quantem.stem4d.errors import FrameIndexWarning

    with (
        pytest.warns(FrameIndexWarning, match="discarded and rebuilt"),
        load_arina(master, index_dir=index_dir, apply_mask=False) as acq,
    ):
        np.testing.assert_array_equal(
            acq.data.reshape(10, 8, 8), make_frames(0, 10, scan_shape=(2, 5), detector_shape=(8, 8))
        )
    # ... and fresh_index=True ignores the sidecar, rebuilds it, and reads the right frames.
    with load_arina(master, index_dir=index_dir, fresh_index=True, apply_mask=False) as acq:
        np.testing.assert_array_equal(
            acq.data.reshape(10, 8, 8), make_frames(0, 10, scan_shape=(2, 5), detector_shape=(8, 8))
        )
    with load_arina(master, index_dir=index_dir) as acq:  # the rebuilt sidecar is good
        assert acq.data.shape == (2, 5, 8, 8)


def test_unchanged_shards_are_not_reopened_while_their_index_matches(tmp_path, monkeypatch):
    import os

    from quantem.stem4d.io import arina

    master = write_synthetic_arina(
        tmp_path / "acq", scan_shape=(3, 4), detector_shape=(8, 8), frames_per_shard=5, processes=1
    )
    index_dir = tmp_path / "idx"
    first = open_arina(master, index_dir=index_dir)
    opened = []
    real = arina._inspect_shard
    monkeypatch.setattr(arina, "_inspect_shard", lambda *a: opened.append(a[1].path) or real(*a))
    again = open_arina(master, index_dir=index_dir)
    assert opened == []  # everything came from the sidecar
    assert again.shard_frames == first.shard_frames == [5, 5, 2]
    assert again.detector_shape == first.detector_shape and again.dtype == first.dtype
    np.testing.assert_array_equal(again.index.frame_offset, first.index.frame_offset)
    # a shard modified since (here: only its mtime) makes every shard be checked again
    shard = first.shard_paths[1]
    st = os.stat(shard)
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    open_arina(master, index_dir=index_dir)
    assert opened == first.shard_paths
    opened.clear()
    open_arina(master, index_dir=index_dir)  # the rebuilt sidecar matches again
    assert opened == []
    open_arina(master, index_dir=index_dir, fresh_index=True)
    assert opened == first.shard_paths
    # a missing shard is still named
    from quantem.stem4d.errors import SourceNotFoundError

    os.remove(first.shard_paths[2])
    with pytest.raises(SourceNotFoundError, match="data_000003"):
        open_arina(master, index_dir=index_dir)


def test_rewritten_source_gets_a_new_index(tmp_path):
    index_dir = tmp_path / "idx"
    kw = dict(scan_shape=(2, 2), detector_shape=(8, 8), processes=1)
    master = write_synthetic_arina(tmp_path / "acq", seed=1, **kw)
    load_arina(master, index_dir=index_dir).close()
    master = write_synthetic_arina(tmp_path / "acq", seed=2, dose=5000, overwrite=True, **kw)
    with load_arina(master, index_dir=index_dir, apply_mask=False) as acq:
        np.testing.assert_array_equal(
            acq.data.reshape(4, 8, 8),
            make_frames(0, 4, seed=2, dose=5000, scan_shape=(2, 2), detector_shape=(8, 8)),
        )


def test_unwritable_index_dir_still_loads(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    master = write_synthetic_arina(
        tmp_path / "acq", scan_shape=(2, 2), detector_shape=(8, 8), processes=1
    )
    with load_arina(master, index_dir=blocker / "idx") as acq:
        assert acq.data.shape == (2, 2, 8, 8)


def test_shared_fixture_documented_values(arina_small, arina_known):
    known = arina_known["fixture_master.h5"]
    with load_arina(arina_small / "fixture_master.h5", apply_mask=False) as acq:
        assert acq.data.shape == (1, 1, 64, 64) and acq.data.dtype == np.uint16
        assert int(acq.data.sum(dtype=np.uint64)) == known["sum"] == 522360
        r, c = np.indices((64, 64))
        np.testing.assert_array_equal(acq.data[0, 0], (r * 64 + c) % 257)
        assert acq.metadata["pixel_mask"][3, 4] == 1
        assert int(acq.metadata["pixel_mask"].sum()) == 1
        assert not acq.validity[3, 4] and acq.validity.sum() == 64 * 64 - 1
        assert acq.metadata["detector_distance"] == pytest.approx(0.1)
        assert acq.metadata["units"]["x_pixel_size"] == "um"
        assert acq.metadata["data_collection_date"] == "2026-08-15T10:00:00Z"
    with load_arina(arina_small / "fixture_master.h5") as acq:  # masked by default
        assert int(acq.data.sum(dtype=np.uint64)) == known["masked_sum"] == 522164
        assert acq.data[0, 0, 3, 4] == 0


@pytest.mark.parametrize("engine", ["bitshuffle", "numba"])
def test_shared_u8_fixture_chunk_with_partial_block(arina_small, engine):
    from quantem.stem4d.io.cpu_decode import decode_chunk_bytes

    path = arina_small / "fixture_u8_data_000001.h5"
    with h5py.File(path, "r") as f:
        dset = f["/entry/data/data"]
        _, chunk = dset.id.read_direct_chunk((0, 0, 0))
        via_h5py = dset[0]
    # The frame is 36,864 bytes: four 8 KiB blocks plus a 4,096-byte partial block.
    assert int.from_bytes(chunk[:8], "big") == 36864
    assert int.from_bytes(chunk[8:12], "big") == 8192
    frame = decode_chunk_bytes(chunk, (192, 192), "uint8", path=path, engine=engine)
    assert int(frame.sum(dtype=np.uint64)) == 294876
    r, c = np.indices((192, 192))
    np.testing.assert_array_equal(frame, (r * 192 + c) % 17)
    np.testing.assert_array_equal(frame, via_h5py)


@pytest.mark.slow
def test_arina_sized_acquisition_written_by_processes(tmp_path):
    scan, det = (12, 16), (192, 192)
    master = write_synthetic_arina(
        tmp_path, scan_shape=scan, detector_shape=det, frames_per_shard=50, processes=2
    )
    expected = make_frames(0, 192, scan_shape=scan, detector_shape=det)
    with load_arina(master, batch_frames=37, apply_mask=False) as acq:
        np.testing.assert_array_equal(acq.data.reshape(192, *det), expected)
        np.testing.assert_array_equal(acq.data.reshape(192, *det), h5py_frames(master))
    with load_arina(master, dtype="u8", apply_mask=True, det_bin=5) as acq:
        reference, clipped = reference_options(
            expected, SyntheticModel(scan, det).pixel_mask, "u8", True, 5
        )
        np.testing.assert_array_equal(acq.data.reshape(192, 38, 38), reference)
        assert acq.metadata["clipped_pixels"] == clipped


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    scan=st.tuples(st.integers(1, 5), st.integers(1, 5)),
    det=st.tuples(st.integers(1, 21), st.integers(1, 21)),
    stored=st.sampled_from(["uint8", "uint16", "uint32"]),
    per_shard=st.integers(1, 9),
    option_dtype=st.sampled_from(["native", "u8", "u16", "u32"]),
    apply_mask=st.booleans(),
    det_bin=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_round_trip_property(
    tmp_path_factory, scan, det, stored, per_shard, option_dtype, apply_mask, det_bin, seed
):
    det_bin = min(det_bin, *det)
    folder = tmp_path_factory.mktemp("prop")
    dead = min(2, det[0] * det[1])
    master = write_synthetic_arina(
        folder,
        scan_shape=scan,
        detector_shape=det,
        dtype=stored,
        frames_per_shard=per_shard,
        dose=float(det[0] * det[1] * 40),
        seed=seed,
        dead_pixels=dead,
        processes=1,
        scan_shape_attr=scan[0] != scan[1],
    )
    n = scan[0] * scan[1]
    frames = make_frames(
        0,
        n,
        scan_shape=scan,
        detector_shape=det,
        dtype=stored,
        dose=float(det[0] * det[1] * 40),
        seed=seed,
        dead_pixels=dead,
    )
    mask = SyntheticModel(scan, det, stored, seed=seed, dead_pixels=dead).pixel_mask
    expected, clipped = reference_options(frames, mask, option_dtype, apply_mask, det_bin)
    with load_arina(
        master,
        dtype=option_dtype,
        apply_mask=apply_mask,
        det_bin=det_bin,
        index_dir=folder / "index",
    ) as acq:
        assert acq.data.shape[:2] == scan
        np.testing.assert_array_equal(acq.data.reshape(expected.shape).astype(np.int64), expected)
        assert acq.metadata["clipped_pixels"] == clipped


@pytest.mark.parametrize("max_read", [1, 700, 1 << 20])
def test_reads_split_and_out_of_order_chunks(tmp_path, monkeypatch, max_read):
    """Chunks stored in reverse frame order, read with small and large coalescing limits."""
    from quantem.stem4d.io import arina
    from quantem.stem4d.io.synthetic import encode_chunk

    scan, det = (3, 4), (10, 9)
    master = write_synthetic_arina(
        tmp_path, scan_shape=scan, detector_shape=det, frames_per_shard=7, processes=1
    )
    frames = make_frames(0, 12, scan_shape=scan, detector_shape=det)
    shard = tmp_path / "synthetic_data_000001.h5"
    shard.unlink()
    with h5py.File(shard, "w") as f:
        dset = f.create_dataset(
            "/entry/data/data",
            shape=(7, *det),
            dtype=frames.dtype,
            chunks=(1, *det),
            **hdf5plugin.Bitshuffle(cname="lz4"),
        )
        for i in reversed(range(7)):
            dset.id.write_direct_chunk((i, 0, 0), encode_chunk(frames[i]))
    monkeypatch.setattr(arina, "MAX_READ_BYTES", max_read)
    source = open_arina(master)
    assert (np.diff(source.index.frame_offset[:7]) < 0).all()  # really out of order
    with load_arina(master, batch_frames=5, apply_mask=False) as acq:
        np.testing.assert_array_equal(acq.data.reshape(12, *det), frames)
