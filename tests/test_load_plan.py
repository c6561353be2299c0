"""The HDF5 load's plan (host side): batches with a ramp, the staging plans, the cache."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quantem.stem4d.cuda import load_plan as lp
from quantem.stem4d.cuda import staging
from quantem.stem4d.cuda.load_plan import load_plan, plan_span_reads, shard_spans


@dataclass
class Index:
    """What a plan reads of a frame index."""

    frame_shard: np.ndarray
    frame_offset: np.ndarray
    frame_nbytes: np.ndarray


def layout(n: int, shards: int, seed: int = 0, *, frozen: bool = True) -> Index:
    rng = np.random.default_rng(seed)
    nbytes = rng.integers(1, 5000, n).astype(np.int64)
    shard = np.sort(rng.integers(0, shards, n)).astype(np.int32)
    offset = np.zeros(n, dtype=np.int64)
    for s in range(shards):
        here = np.flatnonzero(shard == s)
        gaps = rng.integers(0, 64, here.size)
        offset[here] = np.cumsum(gaps + nbytes[here]) - nbytes[here]
    index = Index(shard, offset, nbytes)
    if frozen:
        for a in (shard, offset, nbytes):
            a.setflags(write=False)
    return index


@pytest.fixture(autouse=True)
def no_kept_plans():
    lp.forget_plans()
    yield
    lp.forget_plans()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 100), min_size=1, max_size=80),
    st.integers(1, 400),
    st.integers(1, 400),
)
def test_a_ramp_covers_every_item_once_and_doubles_to_the_batch_size(sizes, batch, first):
    nbytes = np.asarray(sizes, dtype=np.int64)
    batches = staging.plan_batches(nbytes, batch, first_bytes=first)
    assert batches[0][0] == 0 and batches[-1][1] == nbytes.size
    assert all(b0[1] == b1[0] for b0, b1 in itertools.pairwise(batches))
    limit = min(first, batch)
    for a, b in batches:
        assert b > a
        assert b - a == 1 or int(nbytes[a:b].sum()) <= limit
        limit = min(2 * limit, batch)
    if first >= batch:  # no ramp: as without first_bytes
        assert batches == staging.plan_batches(nbytes, batch)


def test_a_ramp_starts_small_and_reaches_the_batch_size():
    nbytes = np.full(1000, 10, dtype=np.int64)
    batches = staging.plan_batches(nbytes, 1600, first_bytes=100)
    sizes = [int(nbytes[a:b].sum()) for a, b in batches]
    assert sizes[:5] == [100, 200, 400, 800, 1600]
    assert max(sizes) == 1600
    with pytest.raises(ValueError, match="first_bytes"):
        staging.plan_batches(nbytes, 1600, first_bytes=0)


def test_a_load_ramps_only_batches_larger_than_the_first():
    index = layout(4000, 3)
    big = load_plan(index, 0, 4000, batch_bytes=lp.RAMP_FIRST_BYTES * 4)
    small = load_plan(index, 0, 4000, batch_bytes=4096)
    assert small.batches == staging.plan_batches(index.frame_nbytes, 4096)
    ramped = staging.plan_batches(
        index.frame_nbytes, lp.RAMP_FIRST_BYTES * 4, first_bytes=lp.RAMP_FIRST_BYTES
    )
    assert big.batches == ramped


@pytest.mark.parametrize("first,last", [(0, 3000), (517, 2480)])
def test_the_registered_plan_is_the_spans_of_each_batch(first, last):
    index = layout(3000, 5, seed=3)
    plan = load_plan(index, first, last, batch_bytes=300_000)
    got = plan.registered()
    shard = index.frame_shard[first:last]
    offset = index.frame_offset[first:last]
    nbytes = index.frame_nbytes[first:last]
    used, lo, hi = shard_spans(shard, offset, nbytes)
    assert np.array_equal(got.used, used) and np.array_equal(got.lo, lo)
    assert np.array_equal(got.hi, hi)
    slot = 1
    for (a, b), reads in zip(plan.batches, got.reads, strict=True):
        want, starts, data = plan_span_reads(shard[a:b], offset[a:b], nbytes[a:b], 1 << 62)
        assert reads == want
        assert np.array_equal(got.bounds[0, a:b], starts)
        assert np.array_equal(got.bounds[1, a:b], starts + nbytes[a:b])
        slot = max(slot, data)
    assert got.slot_bytes == slot
    assert len(plan.batches) > 3
    for array in (got.used, got.lo, got.hi, got.bounds):
        assert not array.flags.writeable  # shared by every load that keeps the plan


def test_the_pread_plan_is_the_spans_of_each_batch_in_pieces():
    index = layout(3000, 5, seed=4)
    plan = load_plan(index, 0, 3000, batch_bytes=300_000)
    got = plan.pread(4096)
    for (a, b), batch, (at, starts, ends) in zip(
        plan.batches, got.batches, got.bounds, strict=True
    ):
        sl = slice(a, b)
        reads, want_starts, data = plan_span_reads(
            index.frame_shard[sl], index.frame_offset[sl], index.frame_nbytes[sl], 4096
        )
        assert batch.reads == reads and at == -(-data // 8) * 8
        assert batch.copy_bytes == at + 16 * (b - a)
        assert np.array_equal(starts, want_starts)
        assert np.array_equal(ends, want_starts + index.frame_nbytes[sl])
    assert plan.pread(4096) is got
    assert plan.pread(8192) is not got


def test_a_read_only_index_keeps_its_plan_per_range_and_batch_size():
    index = layout(2000, 2)
    plan = load_plan(index, 0, 2000, 100_000)
    assert load_plan(index, 0, 2000, 100_000) is plan
    assert plan.registered() is load_plan(index, 0, 2000, 100_000).registered()
    assert load_plan(index, 0, 1999, 100_000) is not plan
    assert load_plan(index, 0, 2000, 100_001) is not plan
    assert load_plan(index, 0, 2000, 100_000, batch_frames=7) is not plan
    other = layout(2000, 2)  # equal arrays, another index: its own plan
    assert load_plan(other, 0, 2000, 100_000) is not plan


def test_a_writable_index_is_planned_for_each_load():
    index = layout(2000, 2, frozen=False)
    plan = load_plan(index, 0, 2000, 100_000)
    assert load_plan(index, 0, 2000, 100_000) is not plan
    index.frame_nbytes[5] += 10  # what a kept plan would have missed
    assert int(load_plan(index, 0, 2000, 100_000).compressed_bytes) == plan.compressed_bytes + 10
    converted = layout(2000, 2)
    converted.frame_offset = converted.frame_offset.astype(np.int32)  # asarray copies it
    converted.frame_offset.setflags(write=False)
    assert load_plan(converted, 0, 2000, 100_000) is not load_plan(converted, 0, 2000, 100_000)


def test_the_kept_plans_are_bounded_and_follow_their_index():
    indexes = [layout(100, 1, seed=k) for k in range(lp.PLANS_KEPT + 3)]
    plans = [load_plan(ix, 0, 100, 10_000) for ix in indexes]
    assert len(lp._plans) == lp.PLANS_KEPT
    assert load_plan(indexes[-1], 0, 100, 10_000) is plans[-1]
    assert load_plan(indexes[0], 0, 100, 10_000) is not plans[0]  # dropped first


def test_a_plan_names_the_first_chunk_outside_the_limits():
    index = layout(500, 1)
    plan = load_plan(index, 100, 500, 10_000)
    nbytes = index.frame_nbytes[100:500]
    low, high = int(np.sort(nbytes)[3]), int(np.sort(nbytes)[-3])
    bad = np.flatnonzero((nbytes < low) | (nbytes > high))
    assert plan.first_bad_chunk(low, high) == int(bad[0])
    assert plan.first_bad_chunk(0, 1 << 40) == -1


def test_prestart_threads_starts_each_pool_once(monkeypatch):
    started = []

    class Thread:
        def __init__(self, target, name, daemon):
            started.append(name)

        def start(self):
            pass

    monkeypatch.setattr(staging.threading, "Thread", Thread)
    monkeypatch.setattr(staging, "_prestarted", set())
    staging.prestart_threads(3, devices=(0,))
    staging.prestart_threads(3, devices=(0,))
    assert len(started) == 1
    staging.prestart_threads(3, devices=(0, 1))  # another device's readers: started
    staging.prestart_threads(5, devices=(0, 1))  # another pread pool: started
    assert len(started) == 3
