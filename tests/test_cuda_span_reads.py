"""Span planning of the pread staging (host side): every chunk lands where its start says."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from quantem.stem4d.cuda.hdf5_pipeline import plan_span_reads


@st.composite
def layouts(draw):
    n = draw(st.integers(1, 60))
    shards = np.sort(np.asarray(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))))
    nbytes = np.asarray(draw(st.lists(st.integers(1, 50), min_size=n, max_size=n)), np.int64)
    gaps = np.asarray(draw(st.lists(st.integers(0, 40), min_size=n, max_size=n)), np.int64)
    offset = np.cumsum(gaps + nbytes) - nbytes
    if draw(st.booleans()):  # some chunks out of file order
        k = draw(st.integers(0, n - 1))
        offset[k] = draw(st.integers(0, int(offset.max())))
    return shards.astype(np.int32), offset.astype(np.int64), nbytes


@settings(max_examples=200, deadline=None)
@given(layouts(), st.integers(1, 64), st.integers(0, 30))
def test_every_chunk_is_read_to_its_start(layout, piece, gap):
    shard, offset, nbytes = layout
    rng = np.random.default_rng(0)
    size = int((offset + nbytes).max()) + 1
    files = [rng.integers(0, 256, size, dtype=np.uint8) for _ in range(4)]
    reads, starts, data = plan_span_reads(shard, offset, nbytes, piece, gap)
    buf = np.zeros(data, dtype=np.uint8)
    covered = np.zeros(data, dtype=bool)
    for file, file_offset, at, length in reads:
        assert 0 < length <= piece
        assert not covered[at : at + length].any()  # no read overlaps another
        buf[at : at + length] = files[file][file_offset : file_offset + length]
        covered[at : at + length] = True
    assert covered.all()
    for i in range(shard.size):
        chunk = files[shard[i]][offset[i] : offset[i] + nbytes[i]]
        assert np.array_equal(buf[starts[i] : starts[i] + nbytes[i]], chunk)
    # gaps wider than the limit are never read
    assert data <= int(nbytes.sum()) + gap * shard.size


def test_adjacent_chunks_make_one_span_split_in_pieces():
    shard = np.zeros(4, np.int32)
    nbytes = np.array([10, 10, 10, 10], np.int64)
    offset = np.array([100, 110, 125, 135], np.int64)  # a 5-byte gap after chunk 1
    reads, starts, data = plan_span_reads(shard, offset, nbytes, piece_bytes=16, gap_bytes=8)
    assert data == 45 and starts.tolist() == [0, 10, 25, 35]
    assert reads == [(0, 100, 0, 16), (0, 116, 16, 16), (0, 132, 32, 13)]
    reads, starts, data = plan_span_reads(shard, offset, nbytes, piece_bytes=64, gap_bytes=4)
    assert data == 40 and starts.tolist() == [0, 10, 20, 30]
    assert reads == [(0, 100, 0, 20), (0, 125, 20, 20)]


def test_plan_stage_starts_every_batch_buffer_at_zero():
    from quantem.stem4d.cuda.qem_pipeline import plan_stage

    extents = np.array([16, 32, 48, 16, 64, 16], np.int64)
    ids = np.array([5, 0, 1, 2, 4], np.int64)
    batches, starts = plan_stage(ids, extents, batch_bytes=64)
    assert batches == [(0, 3), (3, 4), (4, 5)]
    assert starts.tolist() == [0, 16, 32, 0, 0]
