"""Competing activity on the host, sampled just before and just after the measurements.

Each sample (``collect_contention_sample``) records, best effort (a probe that cannot
run records None, never fails the run):

- ``load1`` (1-minute load average) and ``procs_running`` (run-queue length, from
  ``/proc/stat``), with the host's core count;
- CPU and IO pressure (``/proc/pressure/cpu`` and ``/proc/pressure/io``, the ``some``
  and ``full`` avg10 percentages) where the kernel has PSI;
- the top CPU-consuming other processes (psutil, over a short window), with PID,
  name and CPU percent;
- GPU: other processes on the device with their memory, utilisation and SM/memory
  clocks, through NVML (``nvidia-ml-py``) else ``nvidia-smi``, when there is a GPU.

:func:`assess_contention` compares both samples with :data:`THRESHOLDS`; a run above
any of them is ``contended`` (its report's ``status.host_load``; not a failure), and
the summary says why. The thresholds are documented in docs/verdicts.md.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: Limits above which a run is marked contended (docs/verdicts.md, "Host locks and load").
THRESHOLDS: dict[str, float] = {
    "load1_per_core": 1.0,  # 1-minute load average divided by cores
    "procs_running_per_core": 1.5,  # runnable tasks (this run included) per core
    "cpu_pressure_some_avg10": 20.0,  # percent of time some task waited for a CPU
    "io_pressure_some_avg10": 20.0,  # percent of time some task waited for IO
    "other_process_cpu_percent": 50.0,  # one other process using half a core or more
    "gpu_other_processes": 0,  # any other process holding GPU memory
    "gpu_utilization_percent": 10.0,  # busy GPU before/after our own work
}
TOP_PROCESSES = 5
CPU_WINDOW_SECONDS = 0.25


def _pressure(name: str) -> dict[str, float] | None:
    try:
        text = Path(f"/proc/pressure/{name}").read_text(encoding="ascii")
    except OSError:
        return None
    values = {}
    for line in text.splitlines():
        kind, *fields = line.split()
        for field in fields:
            key, _, value = field.partition("=")
            if key == "avg10":
                values[f"{kind}_avg10"] = float(value)
    return values


def _procs_running() -> int | None:
    try:
        for line in Path("/proc/stat").read_text(encoding="ascii").splitlines():
            if line.startswith("procs_running"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _top_processes(own: set[int]) -> list[dict[str, Any]] | None:
    try:
        import psutil
    except ImportError:
        return None
    processes = []
    for process in psutil.process_iter(["pid", "name"]):
        if process.pid in own:
            continue
        with contextlib.suppress(psutil.Error):
            process.cpu_percent(None)
            processes.append(process)
    time.sleep(CPU_WINDOW_SECONDS)
    usage = []
    for process in processes:
        with contextlib.suppress(psutil.Error):
            usage.append(
                {
                    "pid": process.pid,
                    "name": process.info.get("name") or "",
                    "cpu_percent": round(process.cpu_percent(None), 1),
                }
            )
    usage.sort(key=lambda p: -p["cpu_percent"])
    return usage[:TOP_PROCESSES]


def _own_pids() -> set[int]:
    own = {os.getpid()}
    with contextlib.suppress(Exception):
        import psutil

        me = psutil.Process()
        own |= {child.pid for child in me.children(recursive=True)}
    return own


def _gpu_nvml(uuid: str | None, own: set[int]) -> dict[str, Any] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVML raises its own error types for "no driver"
        return None
    try:
        handle = (
            pynvml.nvmlDeviceGetHandleByUUID(uuid) if uuid else pynvml.nvmlDeviceGetHandleByIndex(0)
        )
        utilization = pynvml.nvmlDeviceGetUtilizationRates(handle)
        processes = []
        for getter in (
            pynvml.nvmlDeviceGetComputeRunningProcesses,
            pynvml.nvmlDeviceGetGraphicsRunningProcesses,
        ):
            for proc in getter(handle):
                if proc.pid not in own:
                    processes.append({"pid": proc.pid, "memory_bytes": proc.usedGpuMemory})
        return {
            "source": "nvml",
            "utilization_percent": float(utilization.gpu),
            "memory_utilization_percent": float(utilization.memory),
            "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "memory_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            "other_processes": processes,
        }
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _gpu_smi(uuid: str | None, own: set[int]) -> dict[str, Any] | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    target = ["-i", uuid] if uuid else ["-i", "0"]
    try:
        gpu = (
            subprocess.run(
                [
                    smi,
                    *target,
                    "--query-gpu=utilization.gpu,utilization.memory,clocks.sm,clocks.mem",
                    "--format=csv,noheader,nounits",
                ],
                capture_output=True,
                text=True,
                check=True,
                timeout=10,
            )
            .stdout.strip()
            .split(",")
        )
        apps = (
            subprocess.run(
                [
                    smi,
                    *target,
                    "--query-compute-apps=pid,used_memory",
                    "--format=csv,noheader,nounits",
                ],
                capture_output=True,
                text=True,
                check=True,
                timeout=10,
            )
            .stdout.strip()
            .splitlines()
        )
        processes = []
        for line in apps:
            pid, memory = (part.strip() for part in line.split(","))
            if int(pid) not in own:
                processes.append(
                    {"pid": int(pid), "memory_bytes": int(float(memory)) * 1024 * 1024}
                )
        return {
            "source": "nvidia-smi",
            "utilization_percent": float(gpu[0]),
            "memory_utilization_percent": float(gpu[1]),
            "sm_clock_mhz": int(float(gpu[2])),
            "memory_clock_mhz": int(float(gpu[3])),
            "other_processes": processes,
        }
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def collect_contention_sample(*, gpu_uuid: str | None = None, gpu: bool = False) -> dict[str, Any]:
    """One best-effort sample of competing activity (see the module docstring)."""
    own = _own_pids()
    try:
        load1 = os.getloadavg()[0]
    except OSError:
        load1 = None
    sample: dict[str, Any] = {
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cores": os.cpu_count() or 1,
        "load1": load1,
        "procs_running": _procs_running(),
        "cpu_pressure": _pressure("cpu"),
        "io_pressure": _pressure("io"),
        "top_processes": _top_processes(own),
        "gpu": None,
    }
    if gpu:
        sample["gpu"] = _gpu_nvml(gpu_uuid, own) or _gpu_smi(gpu_uuid, own)
    return sample


def assess_contention(
    samples: Mapping[str, Mapping[str, Any]], thresholds: Mapping[str, float] = THRESHOLDS
) -> list[str]:
    """Reasons the run was contended (empty: quiet), one per sample and limit exceeded."""
    reasons = []
    for when, sample in samples.items():
        cores = sample.get("cores") or 1
        checks = []
        if sample.get("load1") is not None:
            checks.append(("load1_per_core", sample["load1"] / cores, "load average per core"))
        if sample.get("procs_running") is not None:
            checks.append(
                (
                    "procs_running_per_core",
                    sample["procs_running"] / cores,
                    "runnable tasks per core",
                )
            )
        for name in ("cpu", "io"):
            pressure = sample.get(f"{name}_pressure") or {}
            if "some_avg10" in pressure:
                checks.append(
                    (
                        f"{name}_pressure_some_avg10",
                        pressure["some_avg10"],
                        f"{name.upper()} pressure %",
                    )
                )
        top = sample.get("top_processes") or []
        if top:
            checks.append(
                (
                    "other_process_cpu_percent",
                    top[0]["cpu_percent"],
                    f"CPU % of PID {top[0]['pid']} ({top[0]['name']})",
                )
            )
        gpu = sample.get("gpu") or {}
        if gpu:
            checks.append(
                ("gpu_other_processes", len(gpu.get("other_processes", [])), "other GPU processes")
            )
            checks.append(
                (
                    "gpu_utilization_percent",
                    gpu.get("utilization_percent", 0.0),
                    "GPU utilisation %",
                )
            )
        for key, value, label in checks:
            if value > thresholds[key]:
                reasons.append(f"{when}: {label} {value:.3g} > {thresholds[key]:g}")
    return reasons


def contention_section(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """The report's ``contention`` section: both samples, thresholds and the assessment."""
    reasons = assess_contention({"before": before, "after": after})
    return {
        "before": dict(before),
        "after": dict(after),
        "thresholds": dict(THRESHOLDS),
        "contended": bool(reasons),
        "reasons": reasons,
    }
