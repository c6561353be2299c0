"""The verified frame-index sidecar is remembered per process while its files keep
their stat, and only then: a rewrite is always read (and checked) again."""

from __future__ import annotations

import hashlib
import time

import numpy as np
import pytest

from quantem.stem4d.errors import FrameIndexWarning
from quantem.stem4d.io import frame_index
from quantem.stem4d.io.arina import load_arina, open_arina
from quantem.stem4d.io.synthetic import make_frames, write_synthetic_arina

SCAN, DET = (3, 4), (16, 12)


@pytest.fixture
def master(tmp_path):
    return write_synthetic_arina(
        tmp_path / "acq", scan_shape=SCAN, detector_shape=DET, frames_per_shard=5, processes=1
    )


@pytest.fixture
def reads(monkeypatch):
    """Counts the sidecar reads (each one hashes and checks the files)."""
    frame_index._VERIFIED.clear()
    calls = []
    real = frame_index._read_sidecar

    def counting(*args):
        calls.append(args[0])
        return real(*args)

    monkeypatch.setattr(frame_index, "_read_sidecar", counting)
    yield calls
    frame_index._VERIFIED.clear()


def _swap_offsets(index_dir):
    npz = next(index_dir.glob("*.npz"))
    with np.load(npz) as arrays:
        swapped = {k: arrays[k].copy() for k in arrays.files}
    for name in ("frame_offset", "frame_nbytes", "chunk_xxh3"):
        swapped[name][[1, 2]] = swapped[name][[2, 1]]
    with open(npz, "wb") as f:  # same size, same inode
        np.savez(f, **swapped)


def test_an_old_sidecar_is_read_once_then_remembered(master, tmp_path, reads, monkeypatch):
    monkeypatch.setattr(frame_index, "_RACY_NS", 50_000_000)
    index_dir = tmp_path / "index"
    first = open_arina(master, index_dir=index_dir)  # builds the sidecar
    reads.clear()
    time.sleep(0.1)
    second = open_arina(master, index_dir=index_dir)
    third = open_arina(master, index_dir=index_dir)
    assert len(reads) == 1, "the second open read the sidecar; the third must not"
    assert third.index is second.index
    np.testing.assert_array_equal(third.index.frame_offset, first.index.frame_offset)
    assert not third.index.frame_offset.flags.writeable  # shared: nobody may edit it
    with load_arina(master, index_dir=index_dir, apply_mask=False) as acq:
        expected = make_frames(0, SCAN[0] * SCAN[1], scan_shape=SCAN, detector_shape=DET)
        np.testing.assert_array_equal(acq.data.reshape(-1, *DET), expected)


def test_a_rewrite_of_a_remembered_sidecar_is_checked_again(master, tmp_path, reads, monkeypatch):
    monkeypatch.setattr(frame_index, "_RACY_NS", 50_000_000)
    index_dir = tmp_path / "index"
    open_arina(master, index_dir=index_dir)
    reads.clear()
    time.sleep(0.1)
    open_arina(master, index_dir=index_dir)  # remembered
    _swap_offsets(index_dir)
    with pytest.warns(FrameIndexWarning, match="arrays fail their checksum"):
        open_arina(master, index_dir=index_dir)
    assert len(reads) == 2


def test_a_young_sidecar_is_not_remembered(master, tmp_path, reads):
    # Written just now: a same-size rewrite within the file clock's tick would keep its
    # stat, so it is read and checked on every open until it is old enough.
    index_dir = tmp_path / "index"
    open_arina(master, index_dir=index_dir)
    reads.clear()
    open_arina(master, index_dir=index_dir)
    _swap_offsets(index_dir)
    with pytest.warns(FrameIndexWarning, match="arrays fail their checksum"):
        open_arina(master, index_dir=index_dir)
    assert len(reads) == 2 and not frame_index._VERIFIED


def test_changed_shards_are_not_served_from_memory(master, tmp_path, reads, monkeypatch):
    monkeypatch.setattr(frame_index, "_RACY_NS", 50_000_000)
    index_dir = tmp_path / "index"
    source = open_arina(master, index_dir=index_dir)
    reads.clear()
    time.sleep(0.1)
    open_arina(master, index_dir=index_dir)
    shard = source.shard_paths[0]
    with open(shard, "ab") as f:  # the shard's size changes: the sidecar is stale
        f.write(b"\0")
    open_arina(master, index_dir=index_dir)
    assert len(reads) == 2


def test_hashes_equal_the_per_shard_definition(master, tmp_path):
    source = open_arina(master, index_dir=tmp_path / "index")
    index = source.index
    n = len(source.shard_paths)

    def by_definition(idx):
        out = []
        for k in range(n):
            rows = np.flatnonzero(idx.frame_shard == k)
            table = np.stack([idx.frame_offset[rows], idx.frame_nbytes[rows]], axis=1)
            out.append(hashlib.sha256(table.astype("<i8").tobytes()).hexdigest())
        return out

    assert frame_index.shard_table_hashes(index, n) == by_definition(index)
    # frames out of shard order: grouped by shard, frame order kept within each
    shuffled = np.random.default_rng(1).permutation(index.frame_shard.size)
    mixed = frame_index.FrameIndex(
        index.frame_shard[shuffled], index.frame_offset[shuffled], index.frame_nbytes[shuffled],
        index.elem_size, index.frame_elems, index.chunk_xxh3[shuffled],
    )  # fmt: skip
    expected = by_definition(mixed)
    assert expected != by_definition(index)
    assert frame_index.shard_table_hashes(mixed, n) == expected


def test_concurrent_opens_of_more_sources_than_are_remembered(tmp_path, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(frame_index, "_RACY_NS", 0)
    frame_index._VERIFIED.clear()
    masters = [
        write_synthetic_arina(
            tmp_path / f"acq{i}",
            scan_shape=SCAN,
            detector_shape=DET,
            frames_per_shard=5,
            processes=1,
            seed=i,
        )
        for i in range(frame_index._VERIFIED_MAX + 4)
    ]
    index_dir = tmp_path / "index"
    expected = [open_arina(m, index_dir=index_dir).index.frame_offset.copy() for m in masters]
    time.sleep(0.05)

    def open_all(k):
        for j in range(len(masters)):
            i = (j + k) % len(masters)
            np.testing.assert_array_equal(
                open_arina(masters[i], index_dir=index_dir).index.frame_offset, expected[i]
            )

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(open_all, range(6)))
    assert len(frame_index._VERIFIED) == frame_index._VERIFIED_MAX
    frame_index._VERIFIED.clear()


def _sidecar_facts(index_dir):
    return frame_index._read_json(next(index_dir.glob("*.json")))


def test_a_remembered_sidecar_gives_the_shard_layout_without_reading_its_json(
    master, tmp_path, reads, monkeypatch
):
    monkeypatch.setattr(frame_index, "_RACY_NS", 50_000_000)
    index_dir = tmp_path / "index"
    open_arina(master, index_dir=index_dir)
    time.sleep(0.1)
    source = open_arina(master, index_dir=index_dir)  # read, checked, remembered
    facts = _sidecar_facts(index_dir)
    json_reads = []
    real = frame_index._read_json
    monkeypatch.setattr(
        frame_index, "_read_json", lambda path: json_reads.append(path) or real(path)
    )
    args = (facts["source_identity"], source.shard_paths, facts["datasets"])
    remembered = frame_index.cached_shard_layout(*args, index_dir=index_dir)
    assert json_reads == []
    again = open_arina(master, index_dir=index_dir)
    assert json_reads == [] and again.index is source.index
    frame_index._VERIFIED.clear()
    from_file = frame_index.cached_shard_layout(*args, index_dir=index_dir)
    assert json_reads, "without the memory the sidecar's JSON is read"
    assert remembered == from_file == ([5, 5, 2], DET, np.dtype(source.dtype))


def test_a_remembered_layout_is_not_used_for_changed_shards(master, tmp_path, reads, monkeypatch):
    monkeypatch.setattr(frame_index, "_RACY_NS", 50_000_000)
    index_dir = tmp_path / "index"
    open_arina(master, index_dir=index_dir)
    time.sleep(0.1)
    source = open_arina(master, index_dir=index_dir)
    facts = _sidecar_facts(index_dir)
    args = (facts["source_identity"], source.shard_paths, facts["datasets"])
    stats = frame_index.shard_stats(source.shard_paths)
    assert frame_index.cached_shard_layout(*args, index_dir=index_dir, stats=stats) is not None
    changed = [list(s) for s in stats]
    changed[0][1] += 1  # another mtime: not the shards the sidecar describes
    assert frame_index.cached_shard_layout(*args, index_dir=index_dir, stats=changed) is None
    other = {**facts["source_identity"], "mtime_ns": facts["source_identity"]["mtime_ns"] + 1}
    assert frame_index.cached_shard_layout(other, *args[1:], index_dir=index_dir) is None
