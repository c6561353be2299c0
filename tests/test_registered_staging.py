"""Host tests of the registration cache behind ``staging="registered"`` (no GPU: the CUDA
register calls are stand-ins that record what they were asked; the mappings are real)."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from quantem.stem4d.cuda import registered_files as rf
from quantem.stem4d.cuda.hdf5_pipeline import shard_spans
from quantem.stem4d.io.page_cache import PAGE_SIZE

LATER = 10_000_000_000  # a clock this far ahead of the files' times: nothing is racy


class FakeDriver:
    def __init__(self, fail: bool = False) -> None:
        self.live: dict[int, int] = {}
        self.calls: list[tuple[str, int]] = []
        self.fail = fail

    def register(self, address: int, nbytes: int) -> None:
        self.calls.append(("register", nbytes))
        if self.fail:
            raise RuntimeError("cudaErrorNotSupported")
        assert address % PAGE_SIZE == 0 and nbytes % PAGE_SIZE == 0
        assert address not in self.live
        self.live[address] = nbytes

    def unregister(self, address: int) -> None:
        self.calls.append(("unregister", address))
        del self.live[address]


def make_cache(driver: FakeDriver, budget: int = 1 << 30, ahead: int = LATER) -> rf.RegisteredFiles:
    return rf.RegisteredFiles(
        budget,
        register=driver.register,
        unregister=driver.unregister,
        clock=lambda: time.time_ns() + ahead,
    )


def write(path, nbytes: int, fill: int = 1) -> str:
    path.write_bytes(bytes([fill]) * nbytes)
    return str(path)


def lease(cache, path, lo=0, hi=None):
    """lookup, else register; returns (entry, was_hit)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        hi = os.fstat(fd).st_size if hi is None else hi
        entry = cache.lookup(fd, path, lo, hi)
        if entry is not None:
            return entry, True
        return cache.register(fd, path, lo, hi), False
    finally:
        os.close(fd)


def test_a_registration_is_kept_and_served_again(tmp_path):
    driver = FakeDriver()
    cache = make_cache(driver)
    path = write(tmp_path / "a", 3 * PAGE_SIZE + 100)
    entry, hit = lease(cache, path, 10, 2 * PAGE_SIZE + 7)
    assert not hit and entry.offset == 0 and entry.locked_bytes == 3 * PAGE_SIZE
    assert entry.address_of(10) == entry.mapping.address + 10
    with pytest.raises(ValueError, match="outside"):
        entry.address_of(entry.offset + entry.length)
    cache.give_back(entry)
    again, hit = lease(cache, path, PAGE_SIZE, 2 * PAGE_SIZE)
    assert hit and again is entry
    cache.give_back(again)
    assert [c[0] for c in driver.calls] == ["register"]
    assert cache.registered_bytes() == 3 * PAGE_SIZE and cache.paths() == [path]


def test_a_wider_request_registers_the_union(tmp_path):
    driver = FakeDriver()
    cache = make_cache(driver)
    path = write(tmp_path / "a", 8 * PAGE_SIZE)
    first, _ = lease(cache, path, 0, PAGE_SIZE)
    cache.give_back(first)
    wider, hit = lease(cache, path, 5 * PAGE_SIZE, 6 * PAGE_SIZE)
    assert not hit and wider.offset == 0 and wider.length == 6 * PAGE_SIZE
    assert first.released and len(driver.live) == 1
    cache.give_back(wider)


def test_a_rewritten_file_is_registered_again(tmp_path):
    driver = FakeDriver()
    cache = make_cache(driver)
    path = write(tmp_path / "a", 2 * PAGE_SIZE)
    entry, _ = lease(cache, path)
    cache.give_back(entry)
    write(tmp_path / "a", 2 * PAGE_SIZE, fill=2)  # same size, in place
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    again, hit = lease(cache, path)
    assert not hit and again is not entry and entry.released
    assert again.stat == rf.FileStat.of(os.stat(path))
    cache.give_back(again)


def test_a_truncated_file_is_not_served_and_past_the_end_is_refused(tmp_path):
    driver = FakeDriver()
    cache = make_cache(driver)
    path = write(tmp_path / "a", 4 * PAGE_SIZE)
    entry, _ = lease(cache, path)
    cache.give_back(entry)
    os.truncate(path, PAGE_SIZE)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert cache.lookup(fd, path, 0, 4 * PAGE_SIZE) is None
        assert entry.released
        with pytest.raises(rf.RegistrationUnavailable, match="past the end"):
            cache.register(fd, path, 0, 4 * PAGE_SIZE)
    finally:
        os.close(fd)
    assert driver.live == {}


def test_a_replaced_file_is_a_new_identity(tmp_path):
    driver = FakeDriver()
    cache = make_cache(driver)
    path = write(tmp_path / "a", PAGE_SIZE)
    old, _ = lease(cache, path)
    cache.give_back(old)
    write(tmp_path / "b", PAGE_SIZE, fill=3)
    os.replace(tmp_path / "b", path)
    new, hit = lease(cache, path)
    assert not hit and new.stat.identity != old.stat.identity
    cache.give_back(new)
    assert old.released  # registering the new version released the old one
    assert cache.release([path]) == PAGE_SIZE
    assert driver.live == {} and new.released


def test_a_recently_changed_file_is_used_for_one_load_only(tmp_path):
    driver = FakeDriver()
    racy = make_cache(driver, ahead=0)  # registered right after the write: racy
    path = write(tmp_path / "a", PAGE_SIZE)
    entry, _ = lease(racy, path)
    assert not entry.keep and racy.registered_bytes() == PAGE_SIZE
    racy.give_back(entry)
    assert entry.released and driver.live == {} and racy.paths() == []
    # just past the racy window it is kept
    kept = make_cache(driver, ahead=rf.RACY_NS + 100_000_000)
    entry, _ = lease(kept, path)
    kept.give_back(entry)
    assert entry.keep and not entry.released


def test_lru_release_within_the_budget_never_releases_a_held_registration(tmp_path):
    driver = FakeDriver()
    cache = make_cache(driver, budget=2 * PAGE_SIZE)
    a, b, c = (write(tmp_path / n, PAGE_SIZE) for n in "abc")
    ea, _ = lease(cache, a)
    cache.give_back(ea)
    eb, _ = lease(cache, b)
    cache.give_back(eb)
    ea2, hit = lease(cache, a)  # a is now the most recently used
    assert hit
    cache.give_back(ea2)
    ec, _ = lease(cache, c)
    assert eb.released and not ea.released  # b was the least recently used
    assert cache.fits(PAGE_SIZE) and not cache.fits(2 * PAGE_SIZE)  # c is held, a is not
    ea3, _ = lease(cache, a)
    with pytest.raises(rf.RegistrationUnavailable, match="budget"):
        lease(cache, b)  # a and c held: no room
    cache.give_back(ea3)
    cache.give_back(ec)
    assert cache.registered_bytes() == 2 * PAGE_SIZE


def test_release_while_held_waits_for_the_lease(tmp_path):
    driver = FakeDriver()
    cache = make_cache(driver)
    path = write(tmp_path / "a", PAGE_SIZE)
    entry, _ = lease(cache, path)
    assert cache.release() == 0  # held: released when the load gives it back
    assert not entry.released and entry.doomed and cache.paths() == []
    cache.give_back(entry)
    assert entry.released and driver.live == {}


def test_set_budget_zero_releases_and_refuses(tmp_path):
    driver = FakeDriver()
    cache = make_cache(driver)
    path = write(tmp_path / "a", PAGE_SIZE)
    entry, _ = lease(cache, path)
    cache.give_back(entry)
    cache.set_budget(0)
    assert entry.released and not cache.fits(1)
    with pytest.raises(rf.RegistrationUnavailable, match="budget"):
        lease(cache, path)
    with pytest.raises(ValueError):
        cache.set_budget(-1)


def test_a_driver_refusal_leaves_nothing_mapped(tmp_path):
    cache = make_cache(FakeDriver(fail=True))
    path = write(tmp_path / "a", PAGE_SIZE)
    with pytest.raises(rf.RegistrationUnavailable, match="cudaHostRegister"):
        lease(cache, path)
    assert cache.registered_bytes() == 0 and cache.paths() == []


def test_check_resident_reports_missing_pages(tmp_path, monkeypatch):
    cache = make_cache(FakeDriver())
    path = write(tmp_path / "a", 3 * PAGE_SIZE)
    fd = os.open(path, os.O_RDONLY)
    try:
        monkeypatch.setattr(rf.ReadOnlyMapping, "resident_pages", lambda self: self.pages)
        cache.check_resident(fd, 5, 3 * PAGE_SIZE, path)
        monkeypatch.setattr(rf.ReadOnlyMapping, "resident_pages", lambda self: self.pages - 1)
        with pytest.raises(rf.RegistrationUnavailable, match="1 of 3 pages"):
            cache.check_resident(fd, 5, 3 * PAGE_SIZE, path)
    finally:
        os.close(fd)


def test_budget_from_the_environment(monkeypatch):
    monkeypatch.setenv(rf.BUDGET_ENV, "12345")
    assert rf.default_budget_bytes() == 12345
    monkeypatch.setenv(rf.BUDGET_ENV, "lots")
    with pytest.raises(ValueError, match=rf.BUDGET_ENV):
        rf.default_budget_bytes()
    monkeypatch.delenv(rf.BUDGET_ENV)
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert rf.default_budget_bytes() == int(physical * rf.DEFAULT_BUDGET_FRACTION)


def test_release_api_without_registrations_imports_nothing(monkeypatch):
    monkeypatch.setattr(rf, "_instance", None)
    assert rf.release_registered_files() == 0
    assert rf.release_registered_files(["/nonexistent"]) == 0


def test_the_harness_releases_registrations_before_evicting(tmp_path, monkeypatch):
    from harness.run import cache as harness_cache

    driver = FakeDriver()
    cache = make_cache(driver)
    monkeypatch.setattr(rf, "_instance", cache)
    keep = write(tmp_path / "keep", PAGE_SIZE)
    gone = write(tmp_path / "gone", PAGE_SIZE)
    for path in (keep, gone):
        entry, _ = lease(cache, path)
        cache.give_back(entry)
    harness_cache.evict_files([gone])
    assert cache.paths() == [keep]
    assert len(driver.live) == 1


@pytest.mark.parametrize("order", ["sorted", "shuffled"])
def test_shard_spans_cover_each_shards_chunks(order):
    rng = np.random.default_rng(3)
    n = 500
    shard = np.sort(rng.integers(0, 7, n)).astype(np.int32)
    if order == "shuffled":
        shard = rng.permutation(shard)
    offset = rng.integers(0, 1 << 20, n).astype(np.int64)
    nbytes = rng.integers(16, 4096, n).astype(np.int64)
    files, lo, hi = shard_spans(shard, offset, nbytes)
    _, first = np.unique(shard, return_index=True)
    assert files.tolist() == [int(shard[i]) for i in sorted(first)]
    for f, a, b in zip(files, lo, hi):
        mine = shard == f
        assert a == offset[mine].min() and b == (offset + nbytes)[mine].max()
    assert [x.size for x in shard_spans(shard[:0], offset[:0], nbytes[:0])] == [0, 0, 0]


def test_a_path_replaced_by_rename_releases_the_old_version_on_registering(tmp_path):
    driver = FakeDriver()
    cache = make_cache(driver)
    path = write(tmp_path / "a", PAGE_SIZE)
    old, _ = lease(cache, path)
    cache.give_back(old)
    write(tmp_path / "b", 2 * PAGE_SIZE, fill=5)
    os.replace(tmp_path / "b", path)
    new, _ = lease(cache, path)
    cache.give_back(new)
    assert old.released and cache.paths() == [path] and len(driver.live) == 1


def count(cache, *paths):
    fds = [os.open(p, os.O_RDONLY) for p in paths]
    try:
        cache.count_load(fds, list(paths))
    finally:
        for fd in fds:
            os.close(fd)


def test_files_are_registered_from_their_first_load_by_default(tmp_path, monkeypatch):
    monkeypatch.delenv(rf.REGISTER_FROM_ENV, raising=False)
    cache = make_cache(FakeDriver())
    assert cache.register_from == rf.DEFAULT_REGISTER_FROM == 1
    count(cache, write(tmp_path / "first", 10))  # the first load registers


def test_files_are_registered_from_their_second_unchanged_load_when_asked(tmp_path):
    cache = make_cache(FakeDriver())
    cache.set_register_from(2)
    a, b = write(tmp_path / "a", 100), write(tmp_path / "b", 200)
    with pytest.raises(rf.RegistrationUnavailable, match=r"load 1 .* from load 2"):
        count(cache, a, b)
    count(cache, a, b)  # the second load of both: register
    with pytest.raises(rf.RegistrationUnavailable, match=os.path.basename(b)):
        write(tmp_path / "b", 300)  # changed: its count starts again
        count(cache, a, b)
    cache.forget_loads()
    with pytest.raises(rf.RegistrationUnavailable):
        count(cache, a)
    cache.set_register_from(1)
    count(cache, write(tmp_path / "c", 10))  # the first load registers
    with pytest.raises(ValueError):
        cache.set_register_from(0)


def test_register_from_the_environment(monkeypatch):
    monkeypatch.setenv(rf.REGISTER_FROM_ENV, "1")
    assert rf.default_register_from() == 1
    monkeypatch.setenv(rf.REGISTER_FROM_ENV, "0")
    with pytest.raises(ValueError, match=rf.REGISTER_FROM_ENV):
        rf.default_register_from()
    monkeypatch.setenv(rf.REGISTER_FROM_ENV, "two")
    with pytest.raises(ValueError, match=rf.REGISTER_FROM_ENV):
        rf.default_register_from()


def test_release_changed_releases_only_changed_or_vanished_files(tmp_path):
    driver = FakeDriver()
    cache = make_cache(driver)
    keep, cut, gone = (write(tmp_path / n, 3 * PAGE_SIZE) for n in ("keep", "cut", "gone"))
    for path in (keep, cut, gone):
        entry, _ = lease(cache, path)
        cache.give_back(entry)
    os.truncate(cut, PAGE_SIZE)
    os.unlink(gone)
    assert cache.release_changed() == 2 * 3 * PAGE_SIZE
    assert cache.paths() == [keep] and len(driver.live) == 1


def test_a_failed_load_releases_the_registrations_of_changed_files(tmp_path, monkeypatch):
    driver = FakeDriver()
    cache = make_cache(driver)
    monkeypatch.setattr(rf, "_instance", cache)
    path = write(tmp_path / "a", 2 * PAGE_SIZE)
    entry, _ = lease(cache, path)
    cache.give_back(entry)
    os.truncate(path, PAGE_SIZE)
    with pytest.raises(OSError), rf.releasing_changed_on_error():
        raise OSError("the shard is truncated")
    assert cache.paths() == [] and driver.live == {}
