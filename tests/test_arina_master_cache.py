"""The process's cache of parsed ARINA masters: keyed by the master's bytes, never stale.

A warm re-open of an unchanged master skips h5py (``quantem.stem4d.io.arina._parsed_master``);
a master whose bytes changed, even with its size and modification time kept, is parsed
again; callers cannot change what the cache holds.
"""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

from quantem.stem4d.io import arina
from quantem.stem4d.io import arina_layout as layout
from quantem.stem4d.io.synthetic import write_synthetic_arina


@pytest.fixture()
def master(tmp_path):
    return write_synthetic_arina(
        tmp_path, scan_shape=(4, 4), detector_shape=(16, 16), frames_per_shard=8,
        dead_pixels=[(1, 2)], progress=False,
    )  # fmt: skip


def test_a_second_open_of_the_same_bytes_reads_no_hdf5(master, monkeypatch):
    first = arina.open_arina(master)
    reads = []
    real = arina._read_master
    monkeypatch.setattr(arina, "_read_master", lambda m: reads.append(m) or real(m))
    second = arina.open_arina(master)
    assert reads == []  # served from the cache
    assert second.metadata["source_identity"] == first.metadata["source_identity"]
    assert second.shard_paths == first.shard_paths
    np.testing.assert_array_equal(second.validity, first.validity)
    # a caller that changes what it got does not change the next open's
    second.metadata["pixel_mask"][:] = 7
    third = arina.open_arina(master)
    np.testing.assert_array_equal(third.metadata["pixel_mask"], first.metadata["pixel_mask"])


def test_a_master_with_other_bytes_is_parsed_again(master):
    before = arina.open_arina(master)
    assert before.metadata["invalid_pixels"] == 1
    stat = os.stat(master)
    with h5py.File(master, "r+") as f:
        mask = f[layout.DETECTOR_SPECIFIC_GROUP][layout.PIXEL_MASK]
        values = mask[()]
        values[3, 4] = 1  # one more dead pixel, same dataset size
        mask[...] = values
    os.utime(master, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the same mtime
    after = arina.open_arina(master)
    assert after.metadata["invalid_pixels"] == 2
    assert not after.validity[3, 4]


def test_a_master_rewritten_while_parsed_is_not_cached(master, monkeypatch):
    real = arina._read_master

    def rewritten(m):
        parsed = real(m)
        with open(m, "ab") as f:  # the bytes change after they were hashed
            f.write(b"\0")
        return parsed

    arina._MASTER_CACHE.clear()
    monkeypatch.setattr(arina, "_read_master", rewritten)
    arina._parsed_master(master, arina._sha256_file(os.fspath(master)))
    assert not arina._MASTER_CACHE


def test_shard_links_come_from_the_cache_of_the_same_bytes(master, monkeypatch):
    opened = arina.open_arina(master)
    reads = []
    real = arina._read_master
    monkeypatch.setattr(arina, "_read_master", lambda m: reads.append(m) or real(m))
    links = arina.read_shard_links(master)
    assert reads == []  # the open's parse is reused, not read again with h5py
    assert [link.path for link in links] == opened.shard_paths
