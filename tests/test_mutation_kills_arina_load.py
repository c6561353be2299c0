"""``load_arina``'s options, paths and messages: kills survivors of the mutmut run over
the ARINA reader (tests/mutation/arina-survivors.md names each mutant a test here kills).
Expected frames come from the synthetic generator (``make_frames``), not from the reader."""

from __future__ import annotations

import dataclasses
import os
import types
import warnings

import numpy as np
import pytest

from quantem.stem4d.errors import (
    ArinaFormatError,
    ChunkDecodeError,
    FrameIndexWarning,
    ScanShapeError,
    SourceIntegrityError,
    SourceIsDirectoryError,
    SourceNotFoundError,
)
from quantem.stem4d.io import arina, library_decode
from quantem.stem4d.io.arina import load_arina, open_arina
from quantem.stem4d.io.synthetic import make_frames, write_synthetic_arina

SCAN, DET = (3, 4), (16, 12)
N = SCAN[0] * SCAN[1]


@pytest.fixture
def master(tmp_path):
    return write_synthetic_arina(
        tmp_path / "acq", scan_shape=SCAN, detector_shape=DET, frames_per_shard=5, processes=1
    )


def _frames(dtype: str = "uint16") -> np.ndarray:
    return make_frames(0, N, scan_shape=SCAN, detector_shape=DET, dtype=dtype)


def test_one_frame_batches_are_allowed_and_zero_refused(master):
    with load_arina(master, dtype="u8", apply_mask=False, batch_frames=1) as acq:
        expected = np.minimum(_frames(), 255).astype(np.uint8)
        np.testing.assert_array_equal(acq.data.reshape(N, *DET), expected)
    with pytest.raises(ValueError, match="batch_frames must be >= 1, got 0"):
        load_arina(master, batch_frames=0)


@pytest.mark.parametrize("batch_frames", [5, 7])
def test_a_narrowed_load_puts_each_batch_in_its_place(master, batch_frames):
    # 12 frames in batches of 5 or 7: batches that start past frame 0 and end before the end
    with load_arina(master, dtype="u8", apply_mask=False, batch_frames=batch_frames) as acq:
        assert acq.data.dtype == np.uint8 and acq.data.shape == (*SCAN, *DET)
        expected = np.minimum(_frames(), 255).astype(np.uint8)
        np.testing.assert_array_equal(acq.data.reshape(N, *DET), expected)


def test_the_scan_shape_given_overrides_the_files(master):
    with load_arina(master, scan_shape=(4, 3), apply_mask=False) as acq:
        assert acq.data.shape == (4, 3, *DET)
        np.testing.assert_array_equal(acq.data.reshape(N, *DET), _frames())


def test_an_index_without_checksums_is_loaded_unverified_with_the_full_warning(master, monkeypatch):
    real_open = arina.open_arina

    def older_sidecar(*args, **kwargs):
        source = real_open(*args, **kwargs)
        source.index = dataclasses.replace(source.index, chunk_xxh3=None)
        return source

    monkeypatch.setattr(arina, "open_arina", older_sidecar)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        acq = load_arina(master, apply_mask=False)
    (warning,) = [w for w in caught if issubclass(w.category, FrameIndexWarning)]
    assert str(warning.message) == (
        f"{open_arina(master).master_path}: the frame index has no chunk checksums (built by "
        "an older quantem), so this load cannot verify its chunks; load once with "
        "fresh_index=True to record them"
    )
    assert warning.filename == __file__  # attributed to the caller of load_arina
    np.testing.assert_array_equal(acq.data.reshape(N, *DET), _frames())


def test_a_narrowed_load_decodes_with_the_engine_it_names(master, monkeypatch):
    def no_library(*args, **kwargs):
        raise AssertionError("the library engine was used")

    monkeypatch.setattr(library_decode, "decode_chunks", no_library)
    with load_arina(master, dtype="u8", apply_mask=False, engine="numba") as acq:
        np.testing.assert_array_equal(
            acq.data.reshape(N, *DET), np.minimum(_frames(), 255).astype(np.uint8)
        )


def test_a_load_that_keeps_the_stored_dtype_decodes_straight_into_the_result(tmp_path, monkeypatch):
    """A uint8 acquisition loaded as ``u8``: its layout is unchanged, so the frames are
    decoded in place, never through the batch finisher."""
    master = write_synthetic_arina(tmp_path / "u8", scan_shape=SCAN, detector_shape=DET,
                                   dtype="uint8", frames_per_shard=5, processes=1)  # fmt: skip

    def no_batches(*args, **kwargs):
        raise AssertionError("the batch path was taken")

    monkeypatch.setattr(arina, "iter_frame_batches", no_batches)
    with load_arina(master, dtype="u8", apply_mask=False) as acq:
        np.testing.assert_array_equal(acq.data.reshape(N, *DET), _frames("uint8"))


def test_a_bad_chunk_at_a_shards_end_names_that_shard(master):
    """Frame 4 is the last of shard 1 (5 frames a shard): the direct load's error names
    ``data_000001``, not the shard of the frame after it."""
    source = open_arina(master)
    shard = source.shard_paths[int(source.index.frame_shard[4])]
    assert os.path.basename(shard).endswith("data_000001.h5")
    offset = int(source.index.frame_offset[4])
    with open(shard, "r+b") as f:
        f.seek(offset + 8)  # the chunk's block size field
        f.write(b"\xff\xff\xff\xff")
    with pytest.raises(ChunkDecodeError) as info:
        load_arina(master, apply_mask=False, verify_source=False)
    assert info.value.path == os.fspath(shard)
    assert info.value.fields["frame"] == 4


def test_an_index_without_checksums_cannot_give_expected_hashes(master):
    source = open_arina(master)
    source.index = dataclasses.replace(source.index, chunk_xxh3=None)
    with pytest.raises(SourceIntegrityError) as info:
        arina.expected_chunk_hashes(source)
    assert info.value.path == os.fspath(source.master_path)
    assert info.value.detail == (
        "the frame index has no chunk checksums (built by an older quantem); "
        "load once with fresh_index=True to record them from the current files"
    )


def test_engine_names_resolve_by_what_the_library_exports(monkeypatch):
    assert library_decode.library_function() is not None  # the test environment has it
    assert library_decode.resolve_engine("auto") == "library"
    assert library_decode.resolve_engine("numba") == "numba"
    with pytest.raises(ValueError) as info:
        library_decode.resolve_engine("fast")
    assert (
        str(info.value) == "engine must be 'auto', 'library', 'bitshuffle' or 'numba', got 'fast'"
    )
    monkeypatch.setattr(library_decode, "library_function", lambda: None)
    assert library_decode.resolve_engine("auto") == "numba"
    assert library_decode.resolve_engine("numba") == "numba"
    with pytest.raises(RuntimeError) as info:
        library_decode.resolve_engine("library")
    assert str(info.value) == "no bitshuffle library exports bshuf_decompress_lz4"


def test_the_bitshuffle_engine_needs_the_block_functions(monkeypatch):
    monkeypatch.setattr(library_decode, "bitshuffle_block_functions", lambda: None)
    assert library_decode.resolve_engine("library") == "library"
    assert library_decode.resolve_engine("numba") == "numba"
    with pytest.raises(RuntimeError) as info:
        library_decode.resolve_engine("bitshuffle")
    assert str(info.value) == (
        "the bitshuffle library does not export LZ4_decompress_safe and bshuf_untrans_bit_elem"
    )


def _runs(shard, offset, nbytes):
    index = types.SimpleNamespace(
        frame_shard=np.array(shard, np.int64),
        frame_offset=np.array(offset, np.int64),
        frame_nbytes=np.array(nbytes, np.int64),
    )
    return arina._read_runs(types.SimpleNamespace(index=index), 0, len(shard))


def test_contiguous_chunks_of_one_shard_are_read_in_one_run(monkeypatch):
    # (shard, file offset, buffer offset, length) per run, worked out by hand
    assert _runs([0, 0], [100, 110], [10, 20]) == [(0, 100, 0, 30)]
    assert _runs([3], [7], [5]) == [(3, 7, 0, 5)]
    assert _runs([0, 0, 0, 1, 1, 1], [100, 110, 130, 50, 55, 61], [10, 20, 30, 5, 6, 7]) == [
        (0, 100, 0, 60),
        (1, 50, 60, 18),
    ]
    # a gap in the file (131, not 130) and a shard that comes back start new runs
    assert _runs([0, 0, 0, 1, 0], [100, 110, 131, 0, 161], [10, 20, 30, 4, 2]) == [
        (0, 100, 0, 30),
        (0, 131, 30, 30),
        (1, 0, 60, 4),
        (0, 161, 64, 2),
    ]
    # a run stops before it would pass the read size limit
    monkeypatch.setattr(arina, "MAX_READ_BYTES", 30)
    assert _runs([0, 0, 0], [0, 10, 30], [10, 20, 5]) == [(0, 0, 0, 30), (0, 30, 30, 5)]
    # the limit counts from each run's own start
    assert _runs([0, 0, 0, 0], [0, 10, 30, 35], [10, 20, 5, 5]) == [
        (0, 0, 0, 30),
        (0, 30, 30, 10),
    ]


def test_short_reads_are_continued_where_they_stopped(master, monkeypatch):
    """``preadv`` may return fewer bytes than asked (POSIX allows it): the read goes on
    from where it stopped, into the right place of the buffer."""
    source = open_arina(master)
    expected_buffer, expected_offsets = arina.read_compressed(source, threads=1)
    real = os.preadv

    def seven_bytes_at_most(fd, buffers, offset):
        (view,) = buffers
        return real(fd, [view[:7]], offset)

    monkeypatch.setattr(os, "preadv", seven_bytes_at_most)
    buffer, offsets = arina.read_compressed(source, threads=1)
    np.testing.assert_array_equal(offsets, expected_offsets)
    np.testing.assert_array_equal(buffer[: offsets[-1]], expected_buffer[: offsets[-1]])


def test_a_folder_or_a_missing_master_is_named_with_what_is_wrong(tmp_path):
    with pytest.raises(SourceIsDirectoryError) as info:
        open_arina(tmp_path)
    assert info.value.path == os.fspath(tmp_path.absolute())
    assert info.value.detail == "is a directory; expected an ARINA *_master.h5 file"
    missing = tmp_path / "gone_master.h5"
    with pytest.raises(SourceNotFoundError) as info:
        open_arina(missing)
    assert info.value.path == os.fspath(missing.absolute())
    assert info.value.detail == "master file does not exist"


def test_frame_numbers_stored_as_one_element_arrays_are_read(master):
    """``image_nr_low``/``image_nr_high`` written as arrays of one value (not scalars)
    still give the shard's frame numbers; wrong ones are still refused."""
    import h5py

    shard = open_arina(master).shard_paths[1]  # frames 6-10
    with h5py.File(shard, "r+") as f:
        f["/entry/data/data"].attrs["image_nr_low"] = np.array([6], np.uint64)
        f["/entry/data/data"].attrs["image_nr_high"] = np.array([10], np.uint64)
    assert open_arina(master, fresh_index=True).n_frames == N
    with h5py.File(shard, "r+") as f:
        f["/entry/data/data"].attrs["image_nr_low"] = np.array([1], np.uint64)
        f["/entry/data/data"].attrs["image_nr_high"] = np.array([5], np.uint64)
    with pytest.raises(ArinaFormatError, match="holds frames 1-5"):
        open_arina(master, fresh_index=True)


def test_a_scan_shape_is_read_flat():
    assert arina.resolve_scan_shape(12, [[4, 3]], None, "m.h5") == ((4, 3), "argument")
    assert arina.resolve_scan_shape(12, None, np.array([[3], [4]]), "m.h5") == (
        (3, 4),
        "attribute",
    )
    with pytest.raises(ScanShapeError) as info:
        arina.resolve_scan_shape(12, 12, None, "m.h5")
    assert str(info.value) == "m.h5: scan_shape argument (12,) is not two positive integers"


def test_the_metadata_of_an_opened_acquisition(master):
    source = open_arina(master)
    assert source.master_path == os.fspath(master.absolute())
    meta = source.metadata
    assert meta["scan_shape_origin"] == "attribute" and meta["scan_shape"] == SCAN
    assert meta["detector_shape"] == DET and meta["dtype"] == "uint16"
    assert meta["source_format"] == "arina-hdf5"
    sizes = [os.path.getsize(p) for p in source.shard_paths]
    # every byte of every chunk, less than the shards themselves (their HDF5 structure)
    assert meta["compressed_bytes"] == int(source.index.frame_nbytes.sum()) < sum(sizes)
    assert open_arina(master, scan_shape=(4, 3)).metadata["scan_shape_origin"] == "argument"


def test_a_master_without_a_pixel_mask_has_every_pixel_valid(master):
    import h5py

    with h5py.File(master, "r+") as f:
        del f["/entry/instrument/detector/detectorSpecific/pixel_mask"]
    source = open_arina(master)
    assert source.pixel_mask.dtype == np.uint32 and source.pixel_mask.shape == DET
    assert not source.pixel_mask.any() and source.validity.all()
    assert source.metadata["invalid_pixels"] == 0
    with load_arina(master) as acq:
        np.testing.assert_array_equal(acq.data.reshape(N, *DET), _frames())


@pytest.mark.parametrize(("units", "dwell"), [("s", 1e-5), (None, 1e-5), ("ms", None)])
def test_the_dwell_time_is_the_frame_time_in_seconds(master, units, dwell):
    """The synthetic master stores frame_time 1e-5 with units "s"; a frame time without
    units is read as seconds, one in other units is not converted (no dwell time)."""
    import h5py

    with h5py.File(master, "r+") as f:
        frame_time = f["/entry/instrument/detector/frame_time"]
        if units is None:
            del frame_time.attrs["units"]
        else:
            frame_time.attrs["units"] = units
    assert open_arina(master).metadata.get("dwell_time_s") == dwell


def test_a_shard_linked_at_another_dataset_path_is_indexed_there(master):
    import h5py

    first = open_arina(master)
    assert first.index.frame_elems == DET[0] * DET[1]  # what the index records of a frame
    shard = first.shard_paths[1]
    with h5py.File(shard, "r+") as f:
        f.move("/entry/data/data", "/entry/data/frames")
    with h5py.File(master, "r+") as f:
        del f["/entry/data/data_000002"]
        f["/entry/data/data_000002"] = h5py.ExternalLink(
            os.path.basename(shard), "/entry/data/frames"
        )
    with load_arina(master, fresh_index=True, apply_mask=False) as acq:
        np.testing.assert_array_equal(acq.data.reshape(N, *DET), _frames())


def test_the_master_cache_holds_at_most_its_size(tmp_path, monkeypatch):
    monkeypatch.setattr(arina, "_MASTER_CACHE_SIZE", 2)
    monkeypatch.setattr(arina, "_MASTER_CACHE", {})
    masters = [
        write_synthetic_arina(
            tmp_path / str(i), scan_shape=(1, 2), detector_shape=(4, 4), seed=i, processes=1
        )
        for i in range(3)
    ]
    for master in masters:
        open_arina(master, index_dir=tmp_path / "index")
    # the oldest parse is dropped first
    assert [key[0] for key in arina._MASTER_CACHE] == [os.fspath(m.absolute()) for m in masters[1:]]


def test_string_fields_lose_trailing_nuls_only_and_keep_bad_bytes_replaced():
    assert arina._scalar(b"EIGER\x00\x00") == "EIGER"
    assert arina._scalar(np.bytes_(b"\x00ab \x00")) == "\x00ab "
    assert arina._scalar(b"boX\x00") == "boX"
    assert arina._scalar(b"\xffok") == "\ufffdok"
    assert arina._scalar(np.float64(2.5)) == 2.5 and type(arina._scalar(np.int32(3))) is int


@pytest.mark.parametrize("first", ["soft link", "text"])
def test_a_field_that_is_not_a_number_is_skipped_not_the_rest(master, first):
    """Fields are read in name order; a link or a variable-length string listed first in
    the detector group is skipped, and the fields after it are still read."""
    import h5py

    with h5py.File(master, "r+") as f:
        det = f["/entry/instrument/detector"]
        if first == "soft link":
            det["aaa"] = h5py.SoftLink("/entry/instrument/detector/frame_time")
        else:
            det.create_dataset("aaa", data="free text", dtype=h5py.string_dtype())
    meta = open_arina(master).metadata
    assert "aaa" not in meta
    assert meta["frame_time"] == 1e-5 and meta["dwell_time_s"] == 1e-5


def test_two_links_to_one_dataset_spelled_with_and_without_a_leading_slash(master):
    import h5py

    source = open_arina(master)
    first = os.path.basename(source.shard_paths[0])
    with h5py.File(master, "r+") as f:
        del f["/entry/data/data_000002"]
        f["/entry/data/data_000002"] = h5py.ExternalLink(first, "entry/data/data")
    with pytest.raises(ArinaFormatError) as info:
        open_arina(master, fresh_index=True)
    assert str(info.value) == (
        f"{source.master_path}: /entry/data/data_000002 and /entry/data/data_000001 both link "
        f"to entry/data/data in {source.shard_paths[0]}; each data_NNNNNN must name its own "
        "frames"
    )


def test_frames_stored_in_the_master_itself_are_a_link_of_their_own(master):
    """A ``data_NNNNNN`` that is a dataset of the master (a hard link) names the master and
    its own place, as an external link names its file."""
    import h5py

    with h5py.File(master, "r+") as f:
        f["/entry/data/data_000004"] = np.zeros((1, 2), np.uint16)
    links = arina.read_shard_links(master)
    assert links[-1] == arina.ShardLink(
        "data_000004", os.fspath(master.absolute()), "/entry/data/data_000004"
    )
    assert [link.name for link in links] == [f"data_00000{i}" for i in range(1, 5)]


def test_a_master_that_is_not_hdf5_is_named(tmp_path):
    master = tmp_path / "x_master.h5"
    master.write_bytes(b"not hdf5 at all")
    with pytest.raises(ArinaFormatError) as info:
        open_arina(master)
    assert info.value.path == os.fspath(master.absolute())
    assert info.value.detail.startswith("not a readable HDF5 file (")
