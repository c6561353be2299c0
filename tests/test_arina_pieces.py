"""The CPU load's read-and-decode workers: pieces, batches, threads, shard edges, errors.

:func:`quantem.stem4d.io.arina.load_arina` (no load options) has each thread read a piece of
frames into its own staging buffer and decode it; these tests shrink the pieces so that
several threads, shard boundaries and reused buffers all take part, and compare with an
independent h5py + hdf5plugin read. :func:`~quantem.stem4d.io.arina.iter_frame_batches`
(what load options, conversion and streaming use) reads the next batch while one is
decoded; its batches, ranges, threads and errors are checked the same way.
"""

from __future__ import annotations

import os

import h5py
import hdf5plugin  # noqa: F401  (registers the bitshuffle filter for h5py)
import numpy as np
import pytest
from _arina_helpers import h5py_frames

from quantem.stem4d.errors import ArinaFormatError, ChunkDecodeError
from quantem.stem4d.io import arina, cpu_decode, library_decode
from quantem.stem4d.io.arina import iter_frame_batches, load_arina, open_arina
from quantem.stem4d.io.cpu_decode import BITSHUFFLE_C_AVAILABLE, decode_chunks
from quantem.stem4d.io.synthetic import SyntheticModel, encode_chunk, write_synthetic_arina

ENGINES = ["numba", "library", "bitshuffle"] if BITSHUFFLE_C_AVAILABLE else ["numba", "library"]


def _shard(master, i):
    return master.parent / f"synthetic_data_{i:06d}.h5"


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("per_task", [1, 3, 64])
def test_pieces_across_shards_match_h5py(tmp_path, monkeypatch, engine, threads, per_task):
    master = write_synthetic_arina(
        tmp_path / "acq",
        scan_shape=(3, 5),
        detector_shape=(20, 13),
        frames_per_shard=4,
        processes=1,
    )
    monkeypatch.setattr(cpu_decode, "FRAMES_PER_TASK", per_task)
    monkeypatch.setattr(library_decode, "FRAMES_PER_TASK", per_task)
    with load_arina(master, threads=threads, engine=engine, apply_mask=False) as acq:
        np.testing.assert_array_equal(acq.data.reshape(15, 20, 13), h5py_frames(master))


@pytest.mark.parametrize("engine", ENGINES)
def test_first_corrupt_frame_is_named_when_several_pieces_fail(tmp_path, monkeypatch, engine):
    master = write_synthetic_arina(
        tmp_path / "acq",
        scan_shape=(3, 4),
        detector_shape=(16, 16),
        frames_per_shard=5,
        processes=1,
    )
    # Frames 7 and 11 (shards 2 and 3) claim a wrong uncompressed size.
    for shard, frame in ((2, 2), (3, 1)):
        with h5py.File(_shard(master, shard), "r") as f:
            offset = f["/entry/data/data"].id.get_chunk_info(frame).byte_offset
        with open(_shard(master, shard), "r+b") as f:
            f.seek(offset)
            f.write((12345).to_bytes(8, "big"))
    monkeypatch.setattr(cpu_decode, "FRAMES_PER_TASK", 2)
    monkeypatch.setattr(library_decode, "FRAMES_PER_TASK", 2)
    with pytest.raises(ChunkDecodeError, match="uncompressed size") as info:
        load_arina(master, threads=2, engine=engine)
    assert info.value.path == str(_shard(master, 2))
    assert info.value.fields["frame"] == 7
    assert info.value.fields["corrupt_frames"] == 2


def test_shard_truncated_after_indexing_fails_in_a_worker(tmp_path, monkeypatch):
    master = write_synthetic_arina(
        tmp_path / "acq",
        scan_shape=(4, 4),
        detector_shape=(16, 16),
        frames_per_shard=6,
        processes=1,
    )
    load_arina(master).close()  # builds the index sidecar
    shard = _shard(master, 2)
    with h5py.File(shard, "r") as f:
        offset = f["/entry/data/data"].id.get_chunk_info(3).byte_offset
    with open(shard, "r+b") as f:
        f.truncate(offset + 5)
    monkeypatch.setattr(cpu_decode, "FRAMES_PER_TASK", 2)
    monkeypatch.setattr(library_decode, "FRAMES_PER_TASK", 2)
    with pytest.raises(ArinaFormatError, match="truncated") as info:
        load_arina(master, threads=2)
    assert info.value.path == str(shard)


@pytest.mark.parametrize("engine", ENGINES)
def test_decode_chunks_reuses_scratch_and_fills_only_its_frames(engine):
    model = SyntheticModel((3, 3), (64, 64), "uint16", dose=2000)
    frames = model.make_frames(0, 9)
    chunks = [encode_chunk(f) for f in frames]
    frame_bytes = frames[0].nbytes
    scratch = np.empty(frame_bytes * 2, dtype=np.uint8)
    for first, last in ((0, 4), (4, 9), (2, 3)):
        buffer = np.frombuffer(b"".join(chunks[first:last]), np.uint8)
        offsets = np.concatenate([[0], np.cumsum([len(c) for c in chunks[first:last]])])
        out = np.full((last - first + 1) * frame_bytes, 0xAB, dtype=np.uint8)
        errors = np.full(last - first, -1, dtype=np.int32)
        decode_chunks(buffer, offsets, out, frame_bytes, 2, errors, engine, scratch)
        assert (errors == 0).all()
        decoded = out[: (last - first) * frame_bytes].view(np.uint16).reshape(-1, 64, 64)
        np.testing.assert_array_equal(decoded, frames[first:last])
        assert (out[(last - first) * frame_bytes :] == 0xAB).all()  # nothing past the frames


@pytest.fixture
def twelve(tmp_path):
    """12 frames of 8x8 uint16 in shards of 5, 5 and 2 frames."""
    return write_synthetic_arina(
        tmp_path / "acq", scan_shape=(3, 4), detector_shape=(8, 8), frames_per_shard=5,
        processes=1,
    )  # fmt: skip


def _batches(source, *args, **kwargs):
    got = list(iter_frame_batches(source, *args, **kwargs))
    return [first for first, _ in got], np.concatenate([frames for _, frames in got])


def test_batches_match_h5py_over_every_range(twelve):
    """Defaults (all frames, every batch read ahead of its decode), single frames, a range
    inside the acquisition: each batch holds its own frames, the last one included."""
    source = open_arina(twelve)
    truth = h5py_frames(twelve)
    firsts, frames = _batches(source, 5)
    assert firsts == [0, 5, 10]
    np.testing.assert_array_equal(frames, truth)
    firsts, frames = _batches(source, 1)
    assert firsts == list(range(12))
    np.testing.assert_array_equal(frames, truth)
    firsts, frames = _batches(source, 3, start=2, stop=9)
    assert firsts == [2, 5, 8]
    np.testing.assert_array_equal(frames, truth[2:9])
    assert list(iter_frame_batches(source, 4, start=6, stop=6)) == []


def test_batches_read_and_decode_with_the_given_threads(twelve, monkeypatch):
    source = open_arina(twelve)
    calls = []
    real_read, real_decode = arina.read_compressed, cpu_decode.decode_frames

    def read(*args, **kwargs):
        calls.append(("read", args[3:], kwargs))
        return real_read(*args, **kwargs)

    def decode(*args, **kwargs):
        calls.append(("decode", kwargs["threads"], kwargs["engine"]))
        return real_decode(*args, **kwargs)

    monkeypatch.setattr(arina, "read_compressed", read)
    monkeypatch.setattr(cpu_decode, "decode_frames", decode)
    _, frames = _batches(source, 5, threads=3, engine="numba")
    np.testing.assert_array_equal(frames, h5py_frames(twelve))
    assert (
        sorted(calls, key=lambda c: c[0])
        == [("decode", 3, "numba")] * 3 + [("read", (None, 3), {})] * 3
    )
    with pytest.raises(ValueError, match="engine must be 'auto'"):
        list(iter_frame_batches(source, 5, engine="lz4"))


@pytest.mark.parametrize("engine", ENGINES)
def test_a_corrupt_chunk_in_a_later_batch_names_its_frame_and_shard(twelve, engine):
    """Frame 7 (the third of shard 2, in the second batch) claims a wrong uncompressed
    size: the error names that frame and file, not the batch's third frame or shard 1."""
    source = open_arina(twelve)
    path = _shard(twelve, 2)
    with h5py.File(path, "r") as f:
        offset = f["/entry/data/data"].id.get_chunk_info(2).byte_offset
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write((12345).to_bytes(8, "big"))
    with pytest.raises(ChunkDecodeError, match="uncompressed size") as info:
        list(iter_frame_batches(source, 5, engine=engine))
    assert info.value.path == str(path)
    assert info.value.fields["frame"] == 7


def test_read_compressed_threads(twelve, monkeypatch):
    """``threads`` readers when given, else up to 8 (fewer on a smaller machine), never
    more than the runs; one reader reads in the calling thread."""
    source = open_arina(twelve)
    expected = arina.read_compressed(source)
    pools = []

    class Pool(arina.ThreadPoolExecutor):
        def __init__(self, max_workers=None, *args, **kwargs):
            pools.append(max_workers)
            super().__init__(max_workers, *args, **kwargs)

    monkeypatch.setattr(arina, "ThreadPoolExecutor", Pool)
    monkeypatch.setattr(arina, "MAX_READ_BYTES", 1)  # one run a frame: 12 runs
    for cpus, threads, workers in ((16, None, [8]), (4, None, [4]), (None, None, []),
                                   (16, 2, [2]), (16, 1, []), (2, 20, [12])):  # fmt: skip
        monkeypatch.setattr(os, "cpu_count", lambda cpus=cpus: cpus)
        pools.clear()
        buffer, offsets = arina.read_compressed(source, threads=threads)
        assert pools == workers, (cpus, threads)
        np.testing.assert_array_equal(buffer, expected[0])
        np.testing.assert_array_equal(offsets, expected[1])
