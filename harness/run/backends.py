"""What a backend means to a run: one :class:`BackendProfile` per ``--backend``.

The backend is interpreted here and nowhere else in :mod:`harness.run`: what the
timer includes (part of the comparison key), the allocator policy, the device
barrier before every clock reading, the quantem backend that loads in-process, the
formats the trials measure, how to sample device memory, and how one load is
measured (in-process through ``quantem.stem4d.io.load``, or one ``qem-native-load``
process per load for the native reader, which reads only ``.qem``).

Native trials: the trial's time is the process's wall time (launch included: that
is what a user of a separate reader pays); its stages are the launch overhead and
the program's own stage times (``native_open``, ``native_verify``, ``native_decode``,
``native_total``); its physical reads are the program's own ``/proc/self/io``
counters. Their correctness checks live in :mod:`harness.run.checks`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import quantem.stem4d.io
from harness.errors import UsageError
from harness.native import hash_frame_u32_le, io_read_bytes, run_native_load
from harness.run import trials
from harness.run.environment import device_uuid
from harness.run.timers import WallTimer, device_barrier
from harness.run.webgpu import TIMING_BOUNDARY as WEBGPU_TIMING_BOUNDARY
from harness.run.webgpu import measure_webgpu_load, require_webgpu
from quantem.stem4d.backends import require_backend


@dataclass(frozen=True)
class LoadSettings:
    """How the run asks quantem for a load (the same for every trial of a run)."""

    index_dir: Path
    threads: int | None = None
    representation: str = "dense"
    fresh_index: bool = False
    #: ``--devices``: the GPUs a sharded cuda load spreads over (None: one GPU, device 0).
    devices: tuple[int, ...] | None = None
    verify_source: bool = False


@dataclass(frozen=True)
class BackendProfile:
    """Everything a run needs to know about one backend."""

    name: str
    #: What the timer includes (part of the comparison key).
    timing_boundary: str
    allocator_policy: str
    #: The quantem backend of in-process loads (native runs use it for reference loads).
    python_backend: str
    #: The formats the trials measure, in trial order.
    formats: tuple[str, ...]
    #: True: one load is a ``quantem.stem4d.io.load`` call; False: one ``qem-native-load`` process.
    in_process: bool
    #: True: the device has a memory pool to sample and to release between loads.
    device_pool: bool = False
    #: The GPUs of a sharded run (``--devices``); the barrier waits for all of them.
    devices: tuple[int, ...] | None = None
    #: True: a cached trial follows one untimed load of the same files, because the cold
    #: trial before it released the files' page-cache registrations (steady state of reloads).
    settle_cached: bool = False

    @property
    def barrier(self) -> Callable[[], None]:
        """Waits for the device's queued work before a clock is read (no-op off the GPU)."""
        return device_barrier(self.python_backend, self.devices)

    def require(self) -> None:
        """Check once per run that the backend can run here (BackendUnavailableError, exit 1)."""
        require_backend(self.python_backend)
        if self.name == "webgpu":
            require_webgpu()

    def measure_separate(
        self,
        binary: Path | None,
        qem_path: Path,
        frames: Sequence[int],
        threads: int | None,
        cache_state: str,
    ) -> NativeLoad:
        """One trial of a backend that does not load in this process (native, webgpu)."""
        if self.name != "webgpu":
            return measure_native_load(binary, qem_path, frames, threads, cache_state)
        load = measure_webgpu_load(qem_path, list(frames), cache_state)
        hashes = [hash_frame_u32_le(counts) for counts in load.sample_counts]
        extra = {"sample_frames": list(frames), "sample_hashes_u32_le": hashes}
        extra.update(load.record_extra)
        return NativeLoad(load.measurement, list(frames), hashes, load.shape, extra, load.problems)

    def compiler_cache_dir(self) -> str | None:
        if not self.device_pool:
            return None
        return os.environ.get("CUPY_CACHE_DIR") or str(Path.home() / ".cupy" / "kernel_cache")

    def load(self, path: Path, fmt: str, settings: LoadSettings, *, fresh_index: bool = False):
        """One in-process load of ``path`` as the run's trials load it."""
        # The stored counts, as every earlier record measured them (io.load's default became
        # apply_mask=True in wave 2): the timed work, and so the comparison key, are unchanged.
        options: dict[str, Any] = {"apply_mask": False}
        if settings.threads is not None:
            options["threads"] = settings.threads
        if fmt == "hdf5":
            options["index_dir"] = str(settings.index_dir)
            options["fresh_index"] = fresh_index
            # said either way: the cpu loader's default (on) is not what the key records
            options["verify_source"] = bool(settings.verify_source)
        elif settings.representation != "dense":
            options["representation"] = settings.representation
        if settings.devices is not None:
            options["devices"] = list(settings.devices)
        return quantem.stem4d.io.load(path, backend=self.python_backend, **options)

    def measure_in_process(
        self,
        path: Path,
        fmt: str,
        settings: LoadSettings,
        *,
        cache_state: str,
        files: Sequence[Path],
        evict_also: Sequence[Path] = (),
    ) -> trials.Measurement:
        """One timed in-process load; the caller checks and releases ``result``."""

        def load(timer: WallTimer) -> Any:
            return self.load(path, fmt, settings, fresh_index=settings.fresh_index)

        return trials.measure_load(
            load,
            cache_state=cache_state,
            files=files,
            evict_also=evict_also,
            barrier=self.barrier,
        )

    def sample_device_memory(self) -> tuple[int, int, int] | None:
        """(pool bytes in use, pool bytes reserved, card bytes used), or None without a pool."""
        if not self.device_pool:
            return None
        import cupy

        pool = cupy.get_default_memory_pool()
        free, total = cupy.cuda.runtime.memGetInfo()
        return int(pool.used_bytes()), int(pool.total_bytes()), int(total - free)


PROFILES = {
    "cpu": BackendProfile(
        name="cpu",
        timing_boundary="cpu:load-call-to-host-array (open, index lookup, read, decode, checksums)",
        allocator_policy="host:numpy-default, arrays released after each trial",
        python_backend="cpu",
        formats=("hdf5", "qem"),
        in_process=True,
    ),
    "cuda": BackendProfile(
        name="cuda",
        timing_boundary=(
            "cuda:load-call-to-device-array-synchronized (read, transfer, decode, checksums)"
        ),
        allocator_policy=(
            "cuda:cupy-default-memory-pool kept across loads, pinned pool kept, cached trials"
            " after one untimed load (page-cache registrations kept)"
        ),
        python_backend="cuda",
        formats=("hdf5", "qem"),
        in_process=True,
        device_pool=True,
        settle_cached=True,
    ),
    "native": BackendProfile(
        name="native",
        timing_boundary=(
            "native:process-launch-to-exit (qem-native-load: open, verify, decode to memory)"
        ),
        allocator_policy="native:fresh-process-per-trial",
        python_backend="cpu",
        formats=("qem",),
        in_process=False,
    ),
    "webgpu": BackendProfile(
        name="webgpu",
        timing_boundary=WEBGPU_TIMING_BOUNDARY,
        allocator_policy="webgpu:buffers made per load and destroyed after it, device kept",
        python_backend="cpu",
        formats=("qem",),
        in_process=False,
    ),
}


def describe_devices(devices: Sequence[int]) -> list[dict[str, Any]]:
    """Identity of each GPU of a sharded run: id, name and UUID (part of the comparison
    key: the same ids on another host are other devices)."""
    import cupy

    described = []
    for device in devices:
        props = cupy.cuda.runtime.getDeviceProperties(int(device))
        name = props.get("name", b"")
        uuid = props.get("uuid")
        described.append(
            {
                "id": int(device),
                "name": name.decode() if isinstance(name, bytes) else str(name),
                "uuid": device_uuid(int(device), uuid),
            }
        )
    return described


def profile_for(backend: str) -> BackendProfile:
    """The profile of ``--backend``; UsageError for a name the harness does not know."""
    try:
        return PROFILES[backend]
    except KeyError:
        raise UsageError(f"unknown backend {backend!r}") from None


@dataclass
class NativeLoad:
    """One trial outside this process (native, webgpu): the measurement and what the
    reader reported about the data."""

    measurement: trials.Measurement
    frames: list[int]
    hashes: list[str]
    shape: list[int]
    record_extra: dict[str, Any]
    #: Correctness failures beyond the sample hashes (webgpu: products unequal to quantem's).
    problems: list[str] = field(default_factory=list)


def measure_native_load(
    binary: Path, qem_path: Path, frames: Sequence[int], threads: int | None, cache_state: str
) -> NativeLoad:
    """One ``qem-native-load`` process in ``cache_state``, hashing the sample ``frames``."""
    residency = trials.prepare_cache_state(cache_state, [qem_path])
    doc = run_native_load(binary, qem_path, list(frames), threads)
    read_bytes = io_read_bytes(doc)
    stages = {"launch": float(doc["launch_seconds"])}
    stages.update({f"native_{name}": float(value) for name, value in doc["stages"].items()})
    hashes = list(doc.get("sample_hashes_u32_le") or [])
    measurement = trials.Measurement(
        cache_state=cache_state,
        seconds=float(doc["wall_seconds"]),
        stages=stages,
        residency_before=residency.fraction,
        read_bytes=max(0, read_bytes or 0),
        file_bytes=residency.file_bytes,
        extra={
            "residency_method": residency.method,
            # the program's own /proc/self/io, read at its start and end
            "io_read_bytes_before": (doc.get("io_before") or {}).get("read_bytes"),
            "io_read_bytes_after": (doc.get("io_after") or {}).get("read_bytes"),
        },
    )
    record_extra = {
        "sample_frames": list(frames),
        "sample_hashes_u32_le": hashes,
        "native_peak_rss_bytes": doc.get("peak_rss_bytes"),
        "native_resident_bytes": doc.get("resident_bytes"),
        "native_io_counted": read_bytes is not None,
    }
    shape = [int(n) for n in doc.get("shape", [])]
    return NativeLoad(measurement, list(frames), hashes, shape, record_extra)
