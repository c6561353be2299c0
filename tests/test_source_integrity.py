"""Source integrity of ARINA acquisitions: chunk checksums and a checked frame index.

Each test fails on the code before frame-index version 3: a flipped bit inside a
bitshuffle-LZ4 chunk loaded as wrong data with no error, and a sidecar with two offsets
swapped returned frames in the wrong order, silently.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import h5py
import numpy as np
import pytest
import xxhash

from quantem.stem4d.errors import FrameIndexWarning, SourceIntegrityError
from quantem.stem4d.io import load
from quantem.stem4d.io.arina import (
    expected_chunk_hashes,
    iter_frame_batches,
    load_arina,
    open_arina,
)
from quantem.stem4d.io.frame_index import INDEX_VERSION
from quantem.stem4d.io.synthetic import make_frames, write_synthetic_arina

SCAN, DET = (3, 4), (16, 12)


@pytest.fixture
def master(tmp_path):
    return write_synthetic_arina(
        tmp_path / "acq", scan_shape=SCAN, detector_shape=DET, frames_per_shard=5, processes=1
    )


def _frames():
    return make_frames(0, SCAN[0] * SCAN[1], scan_shape=SCAN, detector_shape=DET)


def _flip_literal_bit(source, frame: int, keep_mtime: bool) -> None:
    """Flip one bit in the middle of ``frame``'s chunk (inside its LZ4 data); with
    ``keep_mtime`` as bit rot does (the sidecar still matches the shard's stats), else
    as an edit does (the sidecar is rebuilt, keeping the first observation's checksums)."""
    shard = source.shard_paths[int(source.index.frame_shard[frame])]
    offset = int(source.index.frame_offset[frame]) + int(source.index.frame_nbytes[frame]) // 2
    stat = os.stat(shard)
    with open(shard, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x10]))
    if keep_mtime:
        os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_index_records_one_xxh3_per_raw_chunk(master):
    source = open_arina(master)
    hashes = expected_chunk_hashes(source)
    assert hashes.dtype == np.uint64 and hashes.shape == (source.n_frames,)
    with h5py.File(source.shard_paths[1], "r") as f:  # frames 5..9, by h5py
        _, chunk = f["/entry/data/data"].id.read_direct_chunk((2, 0, 0))
    assert int(hashes[7]) == xxhash.xxh3_64_intdigest(chunk)


@pytest.mark.parametrize("keep_mtime", [True, False])
@pytest.mark.parametrize("options", [{}, {"dtype": "u8", "det_bin": 2}])
def test_changed_chunk_is_an_error_naming_shard_and_frame(master, options, keep_mtime):
    source = open_arina(master)  # the first observation records the checksums
    with load_arina(master, verify_source=True, **options) as acq:  # unchanged: loads
        assert acq.data.shape[:2] == SCAN
    _flip_literal_bit(source, 7, keep_mtime)
    with pytest.raises(SourceIntegrityError) as info:
        load_arina(master, verify_source=True, **options)
    error = info.value
    assert error.path == source.shard_paths[1] and "data_000002" in str(error)
    assert error.fields == {"frame": 7, "shard_frame": 2}
    # through io.load too, and only when asked: off by default
    with pytest.raises(SourceIntegrityError, match="frame 7"):
        load(master, verify_source=True)


def test_flipped_bits_never_load_as_data_with_verify_source(tmp_path):
    """Without verification most flips inside LZ4 literals decode to wrong counts with no
    error (the format has no checksum); with it, every flip is refused."""
    rng = np.random.default_rng(1)
    master = write_synthetic_arina(
        tmp_path / "acq", scan_shape=(2, 2), detector_shape=(24, 24), processes=1
    )
    reference = _frames_of(master)
    source = open_arina(master)
    shard = source.shard_paths[0]
    original = Path(shard).read_bytes()
    silent = 0
    for _ in range(12):
        frame = int(rng.integers(source.n_frames))
        start = int(source.index.frame_offset[frame])
        position = start + 16 + int(rng.integers(int(source.index.frame_nbytes[frame]) - 16))
        damaged = bytearray(original)
        damaged[position] ^= 1 << int(rng.integers(8))
        with open(shard, "r+b") as f:
            f.write(damaged)
        try:
            with load_arina(master, apply_mask=False, verify_source=False) as acq:
                silent += not np.array_equal(acq.data.reshape(reference.shape), reference)
        except ValueError:
            pass  # a structural error the decoder itself catches
        with pytest.raises(SourceIntegrityError):
            load_arina(master, verify_source=True)
        with pytest.raises(SourceIntegrityError):  # the default (issue 39, defect 2)
            load_arina(master)
    with open(shard, "r+b") as f:
        f.write(original)
    assert silent > 0, "the unverified path caught every flip: this test proves nothing"


def _frames_of(master):
    with load_arina(master, apply_mask=False) as acq:
        return acq.data.copy()


def test_swapped_offsets_in_the_sidecar_are_detected_and_rebuilt(master, tmp_path):
    index_dir = tmp_path / "index"
    open_arina(master, index_dir=index_dir)
    npz = next(index_dir.glob("*.npz"))
    with np.load(npz) as arrays:
        swapped = {k: arrays[k].copy() for k in arrays.files}
    for name in ("frame_offset", "frame_nbytes", "chunk_xxh3"):  # a consistent swap
        swapped[name][[1, 2]] = swapped[name][[2, 1]]
    with open(npz, "wb") as f:
        np.savez(f, **swapped)
    with (
        pytest.warns(FrameIndexWarning, match="arrays fail their checksum"),
        load_arina(master, index_dir=index_dir, apply_mask=False) as acq,
    ):
        np.testing.assert_array_equal(acq.data.reshape(-1, *DET), _frames())
    # the rebuilt sidecar is trusted again, without a warning
    with load_arina(master, index_dir=index_dir, apply_mask=False) as acq:
        np.testing.assert_array_equal(acq.data.reshape(-1, *DET), _frames())


def test_sidecar_json_edits_and_shard_tables_are_checked(master, tmp_path):
    index_dir = tmp_path / "index"
    first = open_arina(master, index_dir=index_dir)
    json_path = next(index_dir.glob("*.json"))
    document = json.loads(json_path.read_text())
    assert document["version"] == INDEX_VERSION == 3
    assert len(document["shard_tables"]) == len(first.shard_paths)
    # an edited field that still "matches" the files: the JSON fails its checksum
    document["elem_size"] = 2
    document["frames_per_shard"] = document["frames_per_shard"]
    edited = dict(document, shard_tables=[document["shard_tables"][0]] * 3)
    json_path.write_text(json.dumps(edited))
    with pytest.warns(FrameIndexWarning, match="JSON fails its checksum"):
        again = open_arina(master, index_dir=index_dir)
    np.testing.assert_array_equal(again.index.frame_offset, first.index.frame_offset)
    # garbage instead of the JSON: discarded with a warning, not trusted, not fatal
    json_path.write_text("{not json")
    with pytest.warns(FrameIndexWarning, match="cannot be read"):
        open_arina(master, index_dir=index_dir)
    # garbage instead of the arrays
    next(index_dir.glob("*.npz")).write_bytes(b"\0" * 100)
    with pytest.warns(FrameIndexWarning, match="arrays fail their checksum"):
        open_arina(master, index_dir=index_dir)


def test_version_2_sidecars_are_read_but_cannot_verify(master, tmp_path):
    index_dir = tmp_path / "index"
    first = open_arina(master, index_dir=index_dir)
    json_path = next(index_dir.glob("*.json"))
    npz = next(index_dir.glob("*.npz"))
    document = json.loads(json_path.read_text())
    for key in ("checksum", "arrays_sha256", "shard_tables"):
        del document[key]
    document["version"] = 2
    json_path.write_text(json.dumps(document, sort_keys=True, separators=(",", ":")))
    with np.load(npz) as arrays:
        old = {k: arrays[k] for k in ("frame_shard", "frame_offset", "frame_nbytes")}
    with open(npz, "wb") as f:
        np.savez(f, **old)
    before = json_path.read_bytes()
    with (
        pytest.warns(FrameIndexWarning, match="cannot verify its chunks"),
        load_arina(master, index_dir=index_dir, apply_mask=False) as acq,
    ):
        np.testing.assert_array_equal(acq.data.reshape(-1, *DET), _frames())
    assert json_path.read_bytes() == before  # read, never rewritten
    source = open_arina(master, index_dir=index_dir)
    assert source.index.chunk_xxh3 is None
    np.testing.assert_array_equal(source.index.frame_offset, first.index.frame_offset)
    with pytest.raises(SourceIntegrityError, match="fresh_index=True"):
        load_arina(master, index_dir=index_dir, verify_source=True)
    with load_arina(master, index_dir=index_dir, verify_source=True, fresh_index=True):
        pass
    assert json.loads(json_path.read_text())["version"] == 3


def test_truncated_shard_during_hashing_is_named(master, tmp_path):
    source = open_arina(master, index_dir=tmp_path / "first")
    shard = source.shard_paths[2]
    size = os.path.getsize(shard)
    last = int(source.index.frame_offset[-1])
    os.truncate(shard, last + 1)
    assert os.path.getsize(shard) < size
    with pytest.raises(ValueError, match="data_000003"):
        open_arina(master, index_dir=tmp_path / "second")


def test_frame_batches_verify_only_when_asked(master):
    """``iter_frame_batches`` (whose callers choose) reads an index without checksums by
    default; ``verify_source=True`` refuses it before reading."""
    source = open_arina(master)
    source.index = dataclasses.replace(source.index, chunk_xxh3=None)
    frames = np.concatenate([f for _, f in iter_frame_batches(source, 5)])
    np.testing.assert_array_equal(frames, _frames())
    with pytest.raises(SourceIntegrityError, match="has no chunk checksums"):
        next(iter_frame_batches(source, 5, verify_source=True))
