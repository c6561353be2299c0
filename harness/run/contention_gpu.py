"""The GPU part of a competing-activity sample (:mod:`harness.run.contention`): other
processes on the device with their memory, its utilisation and SM/memory clocks, through
NVML (``nvidia-ml-py``) else ``nvidia-smi``; None where neither answers."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from typing import Any


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


def gpu_sample(uuid: str | None, own: set[int]) -> dict[str, Any] | None:
    """The device's record (NVML first, then ``nvidia-smi``), excluding ``own`` PIDs."""
    return _gpu_nvml(uuid, own) or _gpu_smi(uuid, own)
