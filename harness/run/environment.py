"""Where a run happened: device, host and storage, collected best-effort.

These facts enter the comparison key (device identity, storage id) and let a reader
judge a number (a cold read from a network filesystem with 128 kB read-ahead is not a
cold read from local NVMe). Probes never raise for missing facts: an unknown value is
recorded as ``None`` rather than guessed.
"""

from __future__ import annotations

import os
import platform
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quantem.stem4d.backends import format_gpu_uuid

MOUNTINFO = "/proc/self/mountinfo"


@dataclass(frozen=True)
class MountEntry:
    """One line of ``/proc/self/mountinfo`` (the fields io-scale needs)."""

    mount_point: str
    filesystem: str
    mount_source: str
    device: str  # "major:minor"


def _unescape_mount_field(value: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo octal
    out, i = [], 0
    while i < len(value):
        if value[i] == "\\" and i + 4 <= len(value) and value[i + 1 : i + 4].isdigit():
            out.append(chr(int(value[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[MountEntry]:
    """Parse ``/proc/self/mountinfo`` text (see proc(5)); malformed lines are skipped."""
    entries = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 2:
            continue
        entries.append(
            MountEntry(
                mount_point=_unescape_mount_field(fields[4]),
                filesystem=tail[0],
                mount_source=_unescape_mount_field(tail[1]),
                device=fields[2],
            )
        )
    return entries


def find_mount(path: str | os.PathLike, mountinfo_text: str | None = None) -> MountEntry | None:
    """The mount holding ``path`` (longest mount point that is a prefix; later mounts win)."""
    if mountinfo_text is None:
        try:
            mountinfo_text = Path(MOUNTINFO).read_text()
        except OSError:
            return None
    target = os.path.realpath(path)
    best: MountEntry | None = None
    for entry in parse_mountinfo(mountinfo_text):
        mp = entry.mount_point
        inside = target == mp or target.startswith(mp.rstrip("/") + "/") or mp == "/"
        if inside and (best is None or len(mp) >= len(best.mount_point)):
            best = entry
    return best


def filesystem_type(path: str | os.PathLike) -> str | None:
    """Filesystem type (``ext4``, ``xfs``, ``tmpfs``, ...) of the mount holding ``path``."""
    entry = find_mount(path)
    return entry.filesystem if entry else None


def read_ahead_kb(device: str) -> int | None:
    """Read-ahead of a block device ``major:minor`` in KiB, from sysfs, or None."""
    candidates = [
        Path("/sys/class/bdi") / device / "read_ahead_kb",
        Path("/sys/dev/block") / device / "queue" / "read_ahead_kb",
        Path("/sys/dev/block") / device / ".." / "queue" / "read_ahead_kb",  # a partition
    ]
    for candidate in candidates:
        try:
            return int(candidate.read_text().strip())
        except (OSError, ValueError):
            continue
    return None


def collect_storage(path: str | os.PathLike, storage_id: str) -> dict:
    """Storage facts for the folder holding the measured data."""
    entry = find_mount(path)
    return {
        "storage_id": storage_id,
        "filesystem": entry.filesystem if entry else "unknown",
        "mount_source": entry.mount_source if entry else "unknown",
        "read_ahead_kb": read_ahead_kb(entry.device) if entry else None,
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "cpu model"):
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def collect_host() -> dict:
    """Hostname, CPU model, logical cores usable by this process, total RAM."""
    import psutil

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return {
        "hostname": socket.gethostname(),
        "cpu_model": _cpu_model(),
        "cores": cores,
        "ram_bytes": int(psutil.virtual_memory().total),
    }


def _cuda_version_string(value: int) -> str:
    return f"{value // 1000}.{(value % 1000) // 10}"


def gpu_uuid(raw: Any, smi_uuid: str | None = None) -> str | None:
    """The UUID of a GPU from its CUDA properties' 16 bytes, else nvidia-smi's spelling
    (a UUID with a zero byte reaches Python cut short)."""
    formatted = format_gpu_uuid(raw) if isinstance(raw, bytes | bytearray) else None
    return formatted or smi_uuid


def device_uuid(device_id: int, raw: Any) -> str | None:
    """:func:`gpu_uuid`, asking nvidia-smi only when the properties' bytes are short."""
    return gpu_uuid(raw) or _nvidia_smi(device_id)[0]


def _nvidia_smi(device_id: int) -> tuple[str | None, str | None]:
    """``(uuid, driver version)`` of a GPU from nvidia-smi, or Nones when it is unavailable."""
    import subprocess

    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=uuid,driver_version",
                "--format=csv,noheader",
                f"--id={device_id}",
            ],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None, None
    fields = [f.strip() for f in out.stdout.strip().split(",")]
    if len(fields) != 2:
        return None, None
    return fields[0] or None, fields[1] or None


def collect_device(backend: str) -> dict:
    """The compute device a backend runs on: the GPU for cuda, else the CPU.

    The GPU's UUID comes from the CUDA runtime's device properties (as nvidia-smi
    prints it), else from nvidia-smi; the driver version from nvidia-smi, else the
    driver API version the runtime reports.
    """
    if backend != "cuda":
        return {
            "kind": "cpu",
            "name": _cpu_model(),
            "uuid": None,
            "driver": None,
            "cuda_runtime": None,
            "cupy_version": None,
        }
    import cupy

    runtime = cupy.cuda.runtime
    device_id = cupy.cuda.Device().id
    props = runtime.getDeviceProperties(device_id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    smi_uuid, driver = _nvidia_smi(device_id)
    uuid = gpu_uuid(props.get("uuid"), smi_uuid)
    if driver is None:
        driver = f"cuda-driver-api {_cuda_version_string(runtime.driverGetVersion())}"
    return {
        "kind": "gpu",
        "name": name,
        "uuid": uuid,
        "driver": driver,
        "cuda_runtime": _cuda_version_string(runtime.runtimeGetVersion()),
        "cupy_version": cupy.__version__,
    }


def collect_environment(backend: str, data_path: str | os.PathLike, storage_id: str) -> dict:
    """The report's ``environment`` section."""
    return {
        "device": collect_device(backend),
        "host": collect_host(),
        "storage": collect_storage(data_path, storage_id),
    }
