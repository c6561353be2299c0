"""Registered staging on the GPU: registrations kept across loads give the products of
pread staging and of the cpu backend, and follow the files (rewritten, truncated,
evicted, changed during a load, over the budget)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy (not installed here)")

from harness.run.demo import demo_parent  # noqa: E402
from harness.run.environment import filesystem_type  # noqa: E402
from quantem.stem4d import io  # noqa: E402
from quantem.stem4d.cuda import registered_files as rf  # noqa: E402
from quantem.stem4d.errors import QuantemError  # noqa: E402
from quantem.stem4d.io.arina import open_arina  # noqa: E402
from quantem.stem4d.io.synthetic import write_synthetic_arina  # noqa: E402


def block_backed_parent() -> str | None:
    """A folder where eviction works (``/var/tmp`` when ``/tmp`` is tmpfs)."""
    parent = demo_parent()
    return None if parent is None else str(parent)


def write(folder, name="s", scan=(8, 9), det=(40, 36), dtype="uint16", dose=3000.0, seed=0):
    return write_synthetic_arina(
        folder, name=name, scan_shape=scan, detector_shape=det, dtype=dtype,
        frames_per_shard=10, processes=1, dose=dose, seed=seed,
    )  # fmt: skip


def age_past_the_racy_window() -> None:
    """Files written less than RACY_NS ago are registered for one load only."""
    time.sleep(rf.RACY_NS / 1e9 + 0.2)


@pytest.fixture(autouse=True)
def _fresh_cache():
    cache = rf.registered_files()
    cache.release()
    cache.forget_loads()
    budget, register_from = cache.budget, cache.register_from
    cache.set_register_from(1)  # the registration mechanics; the default policy has its test
    yield cache
    cache.set_budget(budget)
    cache.set_register_from(register_from)
    cache.release()
    cache.forget_loads()


@pytest.fixture(scope="module")
def aged(tmp_path_factory):
    """Acquisitions written once and aged past the racy window."""
    root = tmp_path_factory.mktemp("registered")
    masters = {
        "u16": write(root / "u16"),
        "u8": write(root / "u8", det=(64, 64), dtype="uint8"),
        "u32_tail": write(root / "u32", scan=(4, 6), det=(7, 13), dtype="uint32"),
    }
    age_past_the_racy_window()
    return masters


def shards_of(master):
    return list(open_arina(master).shard_paths)


@pytest.mark.parametrize("name", ["u16", "u8", "u32_tail"])
@pytest.mark.parametrize(
    "opts", [{}, {"apply_mask": False}, {"det_bin": 2}, {"dtype": "u8"}, {"batch_bytes": 4096}]
)
def test_registered_equals_pread_and_cpu_and_is_kept(aged, name, opts, _fresh_cache):
    master = aged[name]
    cpu = io.load(master, **{k: v for k, v in opts.items() if k != "batch_bytes"})
    with io.load(master, backend="cuda", staging="pread", **opts) as pread:
        reference = pread.data.get()
    np.testing.assert_array_equal(reference, cpu.data)
    with io.load(master, backend="cuda", staging="registered", **opts) as first:
        stats = first.metadata["load_stats"]
        assert stats["staging"] == "registered", stats
        assert stats["registered_bytes"] > 0
        np.testing.assert_array_equal(first.data.get(), reference)
    assert sorted(_fresh_cache.paths()) == sorted(shards_of(master))
    with io.load(master, backend="cuda", staging="registered", **opts) as second:
        stats = second.metadata["load_stats"]
        assert stats["staging"] == "registered" and stats["registered_bytes"] == 0, stats
        np.testing.assert_array_equal(second.data.get(), reference)


def test_default_staging_is_registered(aged):
    with io.load(aged["u16"], backend="cuda") as acq:
        assert acq.metadata["load_stats"]["staging"] == "registered"


def test_by_default_files_are_registered_from_their_first_load(aged, _fresh_cache):
    _fresh_cache.set_register_from(rf.default_register_from())
    assert _fresh_cache.register_from == rf.DEFAULT_REGISTER_FROM == 1
    master = aged["u16"]
    cpu = io.load(master)
    seen = []
    for _ in range(2):
        with io.load(master, backend="cuda") as acq:
            stats = acq.metadata["load_stats"]
            seen.append((stats["staging"], stats.get("registered_bytes", 0) > 0))
            np.testing.assert_array_equal(acq.data.get(), cpu.data)
    assert seen == [("registered", True), ("registered", False)]
    assert sorted(_fresh_cache.paths()) == sorted(shards_of(master))


def test_files_are_registered_from_their_second_load_when_asked(aged, _fresh_cache):
    _fresh_cache.set_register_from(2)
    master = aged["u16"]
    cpu = io.load(master)
    seen = []
    for _ in range(3):
        with io.load(master, backend="cuda") as acq:
            stats = acq.metadata["load_stats"]
            seen.append((stats["staging"], stats.get("registered_bytes", 0) > 0))
            np.testing.assert_array_equal(acq.data.get(), cpu.data)
            if len(seen) == 1:
                assert "registered from load 2" in stats["staging_fallback"], stats
    assert seen == [("pread", False), ("registered", True), ("registered", False)]
    assert sorted(_fresh_cache.paths()) == sorted(shards_of(master))


def test_verify_source_with_registered_staging(aged):
    master = aged["u16"]
    cpu = io.load(master)
    for _ in range(2):
        with io.load(master, backend="cuda", staging="registered", verify_source=True) as acq:
            assert acq.metadata["load_stats"]["staging"] == "registered"
            np.testing.assert_array_equal(acq.data.get(), cpu.data)


def test_a_file_rewritten_between_loads_is_registered_again(tmp_path, _fresh_cache):
    master = write(tmp_path / "a", dose=3000.0, seed=1)
    other = write(tmp_path / "b", dose=20000.0, seed=2)
    age_past_the_racy_window()
    with io.load(master, backend="cuda", staging="registered") as before:
        old = before.data.get()
    kept = {r.path: r for r in _fresh_cache._entries.values()}
    assert kept
    # The other acquisition written over this one, in place (same inodes). Its master too:
    # shards changed under an unchanged master are refused as corrupt (verify_source).
    for mine, theirs in zip([master, *shards_of(master)], [other, *shards_of(other)]):
        shutil.copyfile(theirs, mine)
    cpu = io.load(master)
    with io.load(master, backend="cuda", staging="registered") as after:
        assert after.metadata["load_stats"]["staging"] == "registered"
        assert after.metadata["load_stats"]["registered_bytes"] > 0
        new = after.data.get()
    np.testing.assert_array_equal(new, cpu.data)
    assert not np.array_equal(new, old)
    assert all(r.released for r in kept.values())


def test_a_file_written_just_now_is_registered_for_one_load_only(tmp_path, _fresh_cache):
    master = write(tmp_path / "a")
    with io.load(master, backend="cuda", staging="registered") as acq:
        assert acq.metadata["load_stats"]["staging"] == "registered"
        np.testing.assert_array_equal(acq.data.get(), io.load(master).data)
    assert _fresh_cache.paths() == [] and _fresh_cache.registered_bytes() == 0


def test_a_truncated_shard_fails_clearly(tmp_path, _fresh_cache):
    master = write(tmp_path / "a")
    age_past_the_racy_window()
    with io.load(master, backend="cuda", staging="registered") as acq:
        assert acq.metadata["load_stats"]["staging"] == "registered"
    shard = shards_of(master)[1]
    os.truncate(shard, os.path.getsize(shard) // 2)
    with pytest.raises(QuantemError) as info:
        io.load(master, backend="cuda", staging="registered")
    assert os.path.basename(shard) in str(info.value) or "shard" in str(info.value)
    assert shard not in _fresh_cache.paths()


def test_a_file_changed_during_the_load_falls_back_to_pread(aged, monkeypatch, _fresh_cache):
    master = aged["u16"]
    with io.load(master, backend="cuda", staging="registered") as acq:
        reference = acq.data.get()
    monkeypatch.setattr(rf.RegisteredFiles, "still_current", lambda self, entry, fd: False)
    with io.load(master, backend="cuda", staging="registered") as acq:
        stats = acq.metadata["load_stats"]
        assert (
            stats["staging"] == "pread" and "changed during the load" in stats["staging_fallback"]
        )
        np.testing.assert_array_equal(acq.data.get(), reference)
    assert _fresh_cache.paths() == []


def test_over_the_budget_falls_back_and_lru_makes_room(aged, _fresh_cache):
    a, b = aged["u16"], aged["u8"]
    _fresh_cache.set_budget(0)
    with io.load(a, backend="cuda", staging="registered") as acq:
        stats = acq.metadata["load_stats"]
        assert stats["staging"] == "pread" and "budget" in stats["staging_fallback"]
        np.testing.assert_array_equal(acq.data.get(), io.load(a).data)
    # What each registers alone (the chunk spans, page-aligned, not the whole files).
    locked = {}
    _fresh_cache.set_budget(1 << 40)
    for m in (a, b):
        with io.load(m, backend="cuda", staging="registered"):
            pass
        locked[m] = _fresh_cache.registered_bytes()
        _fresh_cache.release()
    _fresh_cache.set_budget(max(locked.values()))  # one fits, not both
    with io.load(a, backend="cuda", staging="registered") as acq:
        assert acq.metadata["load_stats"]["staging"] == "registered"
    with io.load(b, backend="cuda", staging="registered") as acq:
        assert acq.metadata["load_stats"]["staging"] == "registered"
        np.testing.assert_array_equal(acq.data.get(), io.load(b).data)
    assert sorted(_fresh_cache.paths()) == sorted(shards_of(b))  # a released for b
    assert _fresh_cache.registered_bytes() <= _fresh_cache.budget


def test_release_then_cold_eviction_reaches_the_cold_state(_fresh_cache):
    from harness.run import cache

    parent = block_backed_parent()
    folder = Path(tempfile.mkdtemp(prefix="registered-", dir=parent))
    try:
        master = write(folder)
        shards = shards_of(master)
        os.sync()
        age_past_the_racy_window()
        with io.load(master, backend="cuda", staging="registered") as acq:
            reference = acq.data.get()
        assert sorted(_fresh_cache.paths()) == sorted(shards)
        cache.evict_files(shards)  # the hook releases the registrations first
        assert _fresh_cache.paths() == [] and _fresh_cache.registered_bytes() == 0
        residency = cache.probe_residency(shards).fraction
        if filesystem_type(folder) in ("tmpfs", "ramfs"):
            pytest.skip(f"{folder} is not block-backed: eviction cannot be checked")
        assert residency == 0.0, residency
        with io.load(master, backend="cuda", staging="registered") as cold:
            stats = cold.metadata["load_stats"]
            assert stats["staging"] == "pread"
            assert "not in the page cache" in stats["staging_fallback"]
            np.testing.assert_array_equal(cold.data.get(), reference)
        assert _fresh_cache.paths() == []
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_release_api_and_release_cached_memory(aged, _fresh_cache):
    from quantem.stem4d.cuda import release_cached_memory, release_registered_files

    master = aged["u16"]
    with io.load(master, backend="cuda", staging="registered"):
        pass
    held = _fresh_cache.registered_bytes()
    assert held > 0
    assert release_registered_files(shards_of(master)[:1]) > 0
    assert 0 < _fresh_cache.registered_bytes() < held
    release_cached_memory()
    assert _fresh_cache.registered_bytes() == 0


def test_qem_registered_equals_pread_and_cpu_and_is_kept(tmp_path, monkeypatch, _fresh_cache):
    from harness.run import cache
    from quantem.stem4d.cuda import qem_pipeline
    from quantem.stem4d.io.qem.reader import load_qem
    from quantem.stem4d.io.qem.writer import save_qem

    master = write(tmp_path / "a", scan=(8, 8), det=(48, 40))
    path = save_qem(io.load(master), tmp_path / "a.qem", block_frames=8)
    age_past_the_racy_window()
    cpu = load_qem(path)
    with io.load(path, backend="cuda") as first:
        stats = first.metadata["load_stats"]
        assert stats["staging"] == "registered" and stats["registered_bytes"] > 0, stats
        np.testing.assert_array_equal(first.data.get(), cpu.data)
    with io.load(path, backend="cuda") as second:
        stats = second.metadata["load_stats"]
        assert stats["staging"] == "registered" and stats["registered_bytes"] == 0, stats
        np.testing.assert_array_equal(second.data.get(), cpu.data)
    with io.load(path, backend="cuda", scan_region=(2, 5, 1, 7)) as region:
        assert region.metadata["load_stats"]["staging"] == "registered"
        np.testing.assert_array_equal(region.data.get(), cpu.data[2:5, 1:7])
    with io.load(path, backend="cuda", representation="encoded") as encoded:
        mask = np.zeros((48, 40), dtype=bool)
        mask[10:30, 5:25] = True
        mask &= np.asarray(cpu.validity)  # stored and masked counts agree there
        from quantem.stem4d.cuda import detector_kernels as dk

        expected = dk.masked_sum(cupy.asarray(cpu.data), mask).get()
        np.testing.assert_array_equal(encoded.encoded.masked_sum(mask).get(), expected)
    monkeypatch.setattr(qem_pipeline, "DEFAULT_STAGING", "pread")
    with io.load(path, backend="cuda") as by_pread:
        assert by_pread.metadata["load_stats"]["staging"] == "pread"
        np.testing.assert_array_equal(by_pread.data.get(), cpu.data)
    assert str(path) in _fresh_cache.paths()
    cache.evict_files([path])
    assert str(path) not in _fresh_cache.paths()
