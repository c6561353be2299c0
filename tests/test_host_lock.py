"""Host locks (one run per GPU and storage) and the contention sample and assessment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.run.contention import (
    THRESHOLDS,
    assess_contention,
    collect_contention_sample,
    contention_section,
)
from harness.run.host_lock import LockBusyError, Resource, host_locks, lock_name, resources_for

HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from harness.run.host_lock import Resource, host_locks
    with host_locks([Resource("storage", "nvme-1")], lock_dir=Path(sys.argv[1]), command=["harness", "run", "io-scale", "--storage-id", "nvme-1"]):
        print("held", flush=True)
        time.sleep(60)
    """
)


def _start_holder(lock_dir: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock_dir)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_second_run_waits_then_names_the_holder(tmp_path: Path) -> None:
    holder = _start_holder(tmp_path)
    try:
        waited = []
        started = time.monotonic()
        with (
            pytest.raises(LockBusyError) as caught,
            host_locks(
                [Resource("storage", "nvme-1")],
                lock_dir=tmp_path,
                timeout=0.5,
                on_wait=lambda r, h: waited.append(h),
            ),
        ):
            pass
        assert time.monotonic() - started >= 0.5
        message = str(caught.value)
        assert f"PID {holder.pid}" in message and "--storage-id nvme-1" in message
        assert caught.value.exit_code == 1 and waited
        # another resource is free meanwhile
        with host_locks([Resource("storage", "other")], lock_dir=tmp_path, timeout=0.1):
            pass
    finally:
        holder.send_signal(signal.SIGTERM)
        holder.wait(10)
    # the kernel released the lock of the terminated holder: taking it now succeeds at once
    with host_locks([Resource("storage", "nvme-1")], lock_dir=tmp_path, timeout=0.1) as held:
        assert held[0].name.startswith("storage-nvme-1-")


def test_locks_are_released_on_exceptions_and_names_are_safe(tmp_path: Path) -> None:
    resource = Resource("gpu", "GPU-1234/../../etc")
    with pytest.raises(RuntimeError), host_locks([resource], lock_dir=tmp_path, timeout=0.1):
        assert (tmp_path / f"{resource.name}.holder.json").exists()
        raise RuntimeError("boom")
    assert not (tmp_path / f"{resource.name}.holder.json").exists()
    with host_locks([resource], lock_dir=tmp_path, timeout=0.1):
        pass
    assert "/" not in lock_name("gpu", "a/b") and lock_name("gpu", "a/b") != lock_name("gpu", "a-b")
    assert [r.kind for r in resources_for(["GPU-1", None], "disk")] == ["gpu", "storage"]


def test_contention_sample_and_thresholds() -> None:
    sample = collect_contention_sample()
    assert sample["cores"] >= 1 and sample["load1"] is not None
    quiet = {
        "cores": 2,
        "load1": 0.5,
        "procs_running": 1,
        "cpu_pressure": {"some_avg10": 1.0},
        "io_pressure": {"some_avg10": 0.0},
        "top_processes": [{"pid": 9, "name": "x", "cpu_percent": 3.0}],
        "gpu": None,
    }
    assert assess_contention({"before": quiet, "after": quiet}) == []
    busy = dict(
        quiet,
        load1=5.0,
        cpu_pressure={"some_avg10": 80.0},
        top_processes=[{"pid": 77, "name": "make", "cpu_percent": 190.0}],
        gpu={"other_processes": [{"pid": 5, "memory_bytes": 1}], "utilization_percent": 0.0},
    )
    reasons = assess_contention({"before": quiet, "after": busy})
    # load1 is recorded, not judged (it holds the harness's own recent runs)
    assert len(reasons) == 3 and all(r.startswith("after:") for r in reasons)
    assert any("PID 77 (make)" in r for r in reasons)
    section = contention_section(quiet, busy)
    assert section["contended"] and section["thresholds"] == THRESHOLDS


def test_pressure_thresholds_use_the_sample_window_not_avg10() -> None:
    # right after cold reads avg10 still holds them; the sample's own window does not
    after_cold_reads = {
        "cores": 16,
        "load1": 1.0,
        "procs_running": 1,
        "cpu_pressure": {"some_avg10": 0.5, "some_window": 0.0},
        "io_pressure": {"some_avg10": 63.0, "some_window": 0.4},
        "top_processes": [],
        "gpu": None,
    }
    assert assess_contention({"after": after_cold_reads}) == []
    reading = dict(after_cold_reads, io_pressure={"some_avg10": 5.0, "some_window": 45.0})
    assert assess_contention({"before": reading}) == ["before: IO pressure % 45 > 20"]
    # a sample without a window (a report from before it) falls back to avg10
    old = dict(after_cold_reads, io_pressure={"some_avg10": 63.0})
    assert assess_contention({"after": old}) == ["after: IO pressure avg10 % 63 > 20"]


def test_pressure_window_from_the_stall_counters(monkeypatch) -> None:
    from harness.run import contention

    first = {"some_avg10": 9.0, "some_total": 1_000_000.0, "full_total": 500_000.0}
    second = {"some_avg10": 9.5, "some_total": 1_100_000.0, "full_total": 500_000.0}
    # 0.1 s stalled in a 0.25 s window: 40%; nothing fully stalled
    assert contention._pressure(first, second, 0.25) == {
        "some_avg10": 9.5,
        "some_window": 40.0,
        "full_window": 0.0,
    }
    assert contention._pressure(None, second, 0.25) == {"some_avg10": 9.5}
    assert contention._pressure(first, None, 0.25) is None
    # a real sample on this host: the window is measured wherever the kernel has PSI
    sample = collect_contention_sample()
    assert sample["pressure_window_seconds"] >= contention.CPU_WINDOW_SECONDS / 2
    if Path("/proc/pressure/io").exists():
        assert 0.0 <= sample["io_pressure"]["some_window"] <= 100.0
