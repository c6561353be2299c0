"""Mapped staging's host side: range planning, bounds checks, mappings (no GPU needed).

The GPU side (registration, DMA, decode) is in ``tests/hardware/test_cuda_hdf5.py``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quantem.stem4d.cuda.hdf5_pipeline import _plan_mapped, plan_mapped_ranges
from quantem.stem4d.cuda.staging import OpenFiles
from quantem.stem4d.errors import ArinaFormatError
from quantem.stem4d.io.page_cache import PAGE_SIZE, ReadOnlyMapping, resident_pages


def _layout(sizes, shards, gap=0, start=100):
    """Chunks laid out one after another per shard (``gap`` bytes between them)."""
    offsets, at = [], {}
    for size, s in zip(sizes, shards):
        pos = at.get(s, start)
        offsets.append(pos)
        at[s] = pos + size + gap
    return np.array(offsets, np.int64)


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(12, 20000), min_size=1, max_size=60),
    per_shard=st.integers(1, 17),
    gap=st.integers(0, 3000),
    batch_bytes=st.integers(1, 200_000),
)
def test_ranges_cover_every_chunk_once_page_aligned_and_bounded(sizes, per_shard, gap, batch_bytes):
    nbytes = np.array(sizes, np.int64)
    shard = np.arange(nbytes.size) // per_shard
    offset = _layout(nbytes, shard, gap)
    planned = plan_mapped_ranges(shard, offset, nbytes, batch_bytes)
    covered = []
    for a, b, r in planned:
        covered.extend(range(a, b))
        assert r.offset % PAGE_SIZE == 0
        assert set(shard[a:b].tolist()) == {r.file}
        assert offset[a:b].min() >= r.offset
        assert (offset[a:b] + nbytes[a:b]).max() == r.offset + r.length
        assert b - a == 1 or r.length <= batch_bytes  # only a lone chunk may exceed it
    assert covered == list(range(nbytes.size))


def test_a_range_past_the_end_of_its_file_names_the_shard(tmp_path):
    paths = []
    for k in range(2):
        path = tmp_path / f"x_data_{k:06d}.h5"
        path.write_bytes(bytes(5000))
        paths.append(str(path))
    shard = np.array([0, 0, 1, 1])
    offset = np.array([0, 1000, 0, 4000], np.int64)
    nbytes = np.array([1000, 1000, 1000, 1500], np.int64)  # the last one ends at 5500

    def describe(frame):
        return paths[int(shard[frame])], {}

    def short(path, detail):
        return ArinaFormatError(path, detail)

    with OpenFiles(paths, short) as files:
        with pytest.raises(ArinaFormatError, match=r"x_data_000001\.h5.*500 bytes missing"):
            _plan_mapped(files, shard, offset, nbytes, 1 << 20, describe, 0)
        batches, ranges = _plan_mapped(
            files, shard[:3], offset[:3], nbytes[:3], 1 << 20, describe, 0
        )
    assert batches == [(0, 2), (2, 3)]
    assert [(r.file, r.offset, r.length) for r in ranges] == [(0, 0, 2000), (1, 0, 1000)]


def test_read_only_mapping_reports_residency_without_reading(tmp_path):
    path = tmp_path / "blob"
    path.write_bytes(os.urandom(5 * PAGE_SIZE + 17))
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        with ReadOnlyMapping(fd, PAGE_SIZE, size - PAGE_SIZE) as mapping:
            assert mapping.pages == 5
            assert 0 <= mapping.resident_pages() <= 5
        assert mapping.address is None
        mapping.close()  # idempotent
        with pytest.raises(ValueError, match="closed"):
            mapping.resident_pages()
        assert 0 <= resident_pages(fd, size) <= 6
        assert resident_pages(fd, 0) == 0
        with pytest.raises(ValueError, match="page-aligned"):
            ReadOnlyMapping(fd, 1, 10)
    finally:
        os.close(fd)
