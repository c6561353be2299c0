"""Competing activity on the host, sampled just before and just after the measurements.

Each sample (``collect_contention_sample``) records, best effort (a probe that cannot
run records None, never fails the run):

- ``load1`` (1-minute load average; recorded, not judged: it still holds the harness's
  own trials and its own previous runs for minutes after they end) and
  ``procs_running`` (run-queue length, from ``/proc/stat``) with ``own_running``, the
  runnable processes of the harness's own process tree at that moment, which the
  threshold leaves out; with the host's core count;
- CPU and IO pressure (``/proc/pressure/cpu`` and ``/proc/pressure/io``) where the
  kernel has PSI: the ``some`` and ``full`` percentages over the sample's own window
  (``*_window``: the change of PSI's stall-time counters across the 0.25 s the sample
  waits for the process CPU figures, while this run does nothing) and the kernel's
  ``avg10``. The thresholds look at the window: ``avg10`` decays over about 10 s, so
  right after a run's own cold reads (or a previous run's) it reports them as if
  something else were reading;
- the top CPU-consuming processes outside the harness's own process tree (psutil, over
  a short window), with PID, name and CPU percent;
- GPU: other processes on the device with their memory, utilisation and SM/memory
  clocks, through NVML (``nvidia-ml-py``) else ``nvidia-smi``, when there is a GPU.

:func:`assess_contention` compares both samples with :data:`THRESHOLDS`; a run above
any of them is ``contended`` (its report's ``status.host_load``; not a failure), and
the summary says why. The thresholds are documented in docs/verdicts.md.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.run.contention_gpu import gpu_sample

#: Limits above which a run is marked contended (docs/verdicts.md, "Host locks and load").
THRESHOLDS: dict[str, float] = {
    # runnable tasks outside the harness's own process tree, per core
    "procs_running_per_core": 1.5,
    # percent of the sample's window in which some task waited for a CPU / for IO (PSI;
    # avg10 only where the window could not be measured)
    "cpu_pressure_some_percent": 20.0,
    "io_pressure_some_percent": 20.0,
    "other_process_cpu_percent": 50.0,  # one other process using half a core or more
    "gpu_other_processes": 0,  # any other process holding GPU memory
    "gpu_utilization_percent": 10.0,  # busy GPU before/after our own work
}
TOP_PROCESSES = 5
CPU_WINDOW_SECONDS = 0.25


def _pressure_counters(name: str) -> dict[str, float] | None:
    """``{some,full}_avg10`` (percent) and ``{some,full}_total`` (stall microseconds
    since boot) of ``/proc/pressure/NAME``; None without PSI."""
    try:
        text = Path(f"/proc/pressure/{name}").read_text(encoding="ascii")
    except OSError:
        return None
    values = {}
    for line in text.splitlines():
        kind, *fields = line.split()
        for field in fields:
            key, _, value = field.partition("=")
            if key in ("avg10", "total"):
                with contextlib.suppress(ValueError):
                    values[f"{kind}_{key}"] = float(value)
    return values


def _pressure(
    first: dict[str, float] | None, second: dict[str, float] | None, seconds: float
) -> dict[str, float] | None:
    """The sample's pressure record: the kernel's avg10 (from ``second``) and the
    percentage of the ``seconds`` between the two readings spent stalled."""
    if second is None:
        return None
    values = {k: v for k, v in second.items() if k.endswith("_avg10")}
    if first is not None and seconds > 0:
        for kind in ("some", "full"):
            key = f"{kind}_total"
            if key in first and key in second:
                stalled = max(second[key] - first[key], 0.0) / 1e6
                values[f"{kind}_window"] = round(min(100.0, 100.0 * stalled / seconds), 2)
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


def _own_running(own: set[int]) -> int | None:
    """How many of ``own`` are runnable now (psutil status ``running``)."""
    try:
        import psutil
    except ImportError:
        return None
    running = 0
    for pid in own:
        with contextlib.suppress(psutil.Error):
            running += psutil.Process(pid).status() == psutil.STATUS_RUNNING
    return running


def _own_pids() -> set[int]:
    own = {os.getpid()}
    with contextlib.suppress(Exception):
        import psutil

        me = psutil.Process()
        own |= {child.pid for child in me.children(recursive=True)}
    return own


def collect_contention_sample(*, gpu_uuid: str | None = None, gpu: bool = False) -> dict[str, Any]:
    """One best-effort sample of competing activity (see the module docstring)."""
    own = _own_pids()
    try:
        load1 = os.getloadavg()[0]
    except OSError:
        load1 = None
    procs_running, own_running = _procs_running(), _own_running(own)
    started = time.monotonic()
    counters = {name: _pressure_counters(name) for name in ("cpu", "io")}
    top = _top_processes(own)  # waits CPU_WINDOW_SECONDS when psutil is there
    if time.monotonic() - started < CPU_WINDOW_SECONDS / 2:
        time.sleep(CPU_WINDOW_SECONDS)
    window = time.monotonic() - started
    sample: dict[str, Any] = {
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cores": os.cpu_count() or 1,
        "load1": load1,
        "procs_running": procs_running,
        "own_running": own_running,
        "cpu_pressure": _pressure(counters["cpu"], _pressure_counters("cpu"), window),
        "io_pressure": _pressure(counters["io"], _pressure_counters("io"), window),
        "pressure_window_seconds": round(window, 3),
        "top_processes": top,
        "gpu": None,
    }
    if gpu:
        sample["gpu"] = gpu_sample(gpu_uuid, own)
    return sample


def assess_contention(
    samples: Mapping[str, Mapping[str, Any]], thresholds: Mapping[str, float] = THRESHOLDS
) -> list[str]:
    """Reasons the run was contended (empty: quiet), one per sample and limit exceeded."""
    reasons = []
    for when, sample in samples.items():
        cores = sample.get("cores") or 1
        checks = []
        # load1 is not judged: it still counts this harness's own recent work
        if sample.get("procs_running") is not None:
            others = sample["procs_running"] - (sample.get("own_running") or 0)
            checks.append(
                ("procs_running_per_core", others / cores, "other runnable tasks per core")
            )
        for name in ("cpu", "io"):
            pressure = sample.get(f"{name}_pressure") or {}
            # the sample's own window; avg10 for samples without one (older reports)
            for field, label in (("some_window", "pressure %"), ("some_avg10", "pressure avg10 %")):
                if field in pressure:
                    checks.append(
                        (
                            f"{name}_pressure_some_percent",
                            pressure[field],
                            f"{name.upper()} {label}",
                        )
                    )
                    break
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
