"""Measurement primitives of the io-scale runner: eviction, residency, IO counters, timers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest
from _run_helpers import real_disk_dir, tmpfs_dir

from harness.run import cache, proc_io, timers
from harness.run.environment import collect_storage, find_mount, parse_mountinfo

FILE_BYTES = 4 << 20


def _write(path, size=FILE_BYTES):
    with open(path, "wb") as f:
        f.write(os.urandom(size))
        f.flush()
        os.fsync(f.fileno())
    return path


def _read_all(path):
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass


@pytest.fixture
def disk_file(tmp_path):
    folder = real_disk_dir(tmp_path)
    path = _write(folder / "payload.bin")
    yield path
    if folder != tmp_path:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("method", [None, cache.METHOD_MINCORE])
def test_eviction_confirmed_by_residency_probe(disk_file, method):
    _read_all(disk_file)
    before = cache.probe_file_residency(disk_file, method=method)
    assert before.file_bytes == FILE_BYTES
    assert before.fraction > 0.9, "a file just read should be cached"
    cache.evict_file(disk_file)
    after = cache.probe_file_residency(disk_file, method=method)
    assert after.fraction < 0.01, f"eviction left {after.fraction:.1%} resident ({after.method})"
    _read_all(disk_file)
    assert cache.probe_file_residency(disk_file, method=method).fraction > 0.9


def test_probe_methods_agree(disk_file):
    cache.evict_file(disk_file)
    with open(disk_file, "rb") as f:  # read the first half only, without read-ahead
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_RANDOM)
        f.read(FILE_BYTES // 2)
    via_mincore = cache.probe_file_residency(disk_file, method=cache.METHOD_MINCORE)
    assert 0.3 < via_mincore.fraction < 1.0
    try:
        via_cachestat = cache.probe_file_residency(disk_file, method=cache.METHOD_CACHESTAT)
    except OSError:
        pytest.skip("cachestat is not available on this kernel")
    assert via_cachestat.resident_bytes == via_mincore.resident_bytes


def test_cold_read_physical_bytes_counted(disk_file):
    if not proc_io.io_counters_available():
        pytest.skip("kernel without task IO accounting")
    cache.evict_file(disk_file)
    before = proc_io.read_io_counters()
    _read_all(disk_file)
    delta = proc_io.read_io_counters() - before
    assert delta.read_bytes >= 0.9 * FILE_BYTES
    # read again: served from the cache, no physical reads
    before = proc_io.read_io_counters()
    _read_all(disk_file)
    delta = proc_io.read_io_counters() - before
    assert delta.read_bytes < 0.1 * FILE_BYTES
    assert delta.rchar >= FILE_BYTES


def test_eviction_cannot_work_on_tmpfs():
    folder = tmpfs_dir()
    try:
        path = _write(folder / "payload.bin", 1 << 20)
        cache.evict_file(path)
        assert cache.probe_file_residency(path).fraction > 0.99
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_combined_residency_and_empty_file(tmp_path):
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert cache.probe_file_residency(empty).fraction == 0.0
    small = tmp_path / "small"
    small.write_bytes(b"x" * 10)
    combined = cache.probe_residency([empty, small])
    assert combined.file_bytes == 10
    assert combined.resident_bytes <= 10


def test_child_process_io_counters():
    if not proc_io.io_counters_available():
        pytest.skip("kernel without task IO accounting")
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        counters = proc_io.read_io_counters(child.pid)
        assert counters.rchar > 0  # the interpreter read its own modules
    finally:
        child.communicate(b"")


def test_parse_proc_io_rejects_missing_fields():
    with pytest.raises(ValueError, match="read_bytes"):
        proc_io.parse_proc_io("rchar: 1\nwchar: 2\n")


def test_timer_runs_barrier_before_each_reading():
    calls = []
    timer = timers.WallTimer(barrier=lambda: calls.append(time.perf_counter_ns()))
    with timer, timer.stage("work"):
        time.sleep(0.01)
    assert len(calls) == 4  # start, stage begin, stage end, stop
    assert timer.seconds >= timer.stages["work"] >= 0.01
    with pytest.raises(RuntimeError):
        timers.WallTimer().stop()


def test_mountinfo_parsing_longest_prefix_and_escapes():
    text = (
        "27 1 254:0 / / rw - ext4 /dev/vda rw\n"
        "40 27 259:3 / /data\\040disk rw - xfs /dev/nvme0n1p1 rw\n"
        "41 27 0:50 / /data rw - tmpfs tmpfs rw\n"
    )
    entries = parse_mountinfo(text)
    assert entries[1].mount_point == "/data disk"
    assert find_mount("/data disk/x", text).filesystem == "xfs"
    assert find_mount("/data/x", text).filesystem == "tmpfs"
    assert find_mount("/usr", text).mount_source == "/dev/vda"


def test_collect_storage_of_this_folder(tmp_path):
    storage = collect_storage(tmp_path, "here")
    assert storage["storage_id"] == "here"
    assert storage["filesystem"] != "unknown"
