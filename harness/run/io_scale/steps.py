"""The steps of io-scale for one acquisition, each given only the state it needs.

:class:`TrialContext` is what every step shares (backend profile, load settings,
failure log, memory tracker, workspace); :class:`AcquisitionState` is what the run
learns about one acquisition. Every load's result is released (closed, its arrays
freed) before the next load starts, so no two decoded acquisitions are alive at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.run import cache, proc_io, trials
from harness.run.backends import BackendProfile, LoadSettings
from harness.run.checks import (
    Expected,
    FailureLog,
    check_native_load,
    check_product,
    check_source,
    sample_frames_of,
)
from harness.run.io_scale.profile import profile_call
from harness.run.manifest import SelectedAcquisition
from harness.run.memory import MemoryTracker
from harness.run.timers import WallTimer
from harness.run.workspace import Workspace
from quantem.stem4d.io.arina import open_arina


@dataclass
class TrialContext:
    """What the steps of a run share."""

    profile: BackendProfile
    settings: LoadSettings
    log: FailureLog
    memory: MemoryTracker
    workspace: Workspace
    native_binary: Path | None = None


@dataclass
class AcquisitionState:
    """What the run learns about one acquisition."""

    selected: SelectedAcquisition
    expected: Expected
    source_files: list[Path] = field(default_factory=list)
    source_bytes: int = 0
    qem_path: Path | None = None
    qem_bytes: int | None = None
    first_observation: dict = field(default_factory=lambda: {"seconds": 0.0, "index_seconds": 0.0})
    python_sample_hashes: list[str] | None = None
    qem_first_observation: dict | None = None

    def files_of(self, fmt: str) -> list[Path]:
        return list(self.source_files) if fmt == "hdf5" else [self.qem_path]

    def path_of(self, fmt: str) -> Path:
        return self.selected.master_path if fmt == "hdf5" else self.qem_path

    def entry(self) -> dict:
        sel, exp = self.selected, self.expected
        return {
            "id": sel.id,
            "filename": sel.filename,
            "source_master_sha256": sel.source_master_sha256,
            "shape": exp.shape or list(sel.shape or (1, 1, 1, 1)),
            "dtype": exp.dtype or sel.dtype or "unknown",
            "source_bytes": self.source_bytes,
            "qem_bytes": self.qem_bytes,
            "first_observation": self.first_observation,
            "indexed_product_sha256": exp.products[0] if exp.products else None,
            "products_consistent": len(set(exp.products)) <= 1,
            "qem_dtype": exp.qem_dtype,
            "qem_first_observation": self.qem_first_observation,
        }


def loader_stages(acquisition: Any) -> dict[str, float]:
    """Stage times a loader reports about itself (``metadata["load_stats"]``, ``*_seconds``).
    The cuda loaders report their read and pipeline intervals there; the timer only
    sees the whole load.
    """
    stats = getattr(acquisition, "metadata", {}).get("load_stats") or {}
    return {
        f"loader_{key[: -len('_seconds')]}": float(value)
        for key, value in stats.items()
        if key.endswith("_seconds") and isinstance(value, int | float) and value >= 0
    }


def loader_devices(acquisition: Any) -> list[dict] | None:
    """Each GPU of a sharded load (``load_stats["devices"]``): id, name, UUID, scan rows,
    bytes, share of the bytes and its own ``*_seconds`` stage times; None otherwise."""
    stats = getattr(acquisition, "metadata", {}).get("load_stats") or {}
    devices = stats.get("devices")
    if not devices:
        return None
    out = []
    for entry in devices:
        nbytes = entry.get("compressed_bytes", entry.get("payload_bytes", 0))
        out.append(
            {
                "device": int(entry["device"]),
                "name": entry.get("name"),
                "uuid": entry.get("uuid"),
                "rows": [int(v) for v in entry["rows"]],
                "bytes": int(nbytes),
                "bytes_share": float(entry.get("bytes_share", 0.0)),
                "stages": {
                    f"loader_{k[: -len('_seconds')]}": float(v)
                    for k, v in entry.items()
                    if k.endswith("_seconds") and isinstance(v, int | float) and v >= 0
                },
            }
        )
    return out


def resolve_sources(ctx: TrialContext, state: AcquisitionState) -> None:
    """The acquisition's files, bytes, shape and dtype (checked against the manifest)."""
    master = state.selected.master_path
    source = open_arina(master, index_dir=str(ctx.settings.index_dir))
    files = [Path(master), *(Path(p) for p in source.shard_paths)]
    state.source_files = list(dict.fromkeys(p.resolve() for p in files))
    state.source_bytes = sum(p.stat().st_size for p in state.source_files)
    shape = [int(n) for n in (*source.scan_shape, *source.detector_shape)]
    check_source(ctx.log, state.expected, shape, str(source.dtype))


def first_observation(ctx: TrialContext, state: AcquisitionState) -> None:
    """The first load with a fresh frame index, cold, recorded apart from the trials."""
    cache.evict_files(state.source_files)
    residency = cache.probe_residency(state.source_files)
    before = proc_io.read_io_counters()
    timer = WallTimer(ctx.profile.barrier).start()
    with timer.stage("index"):
        open_arina(
            state.selected.master_path, index_dir=str(ctx.settings.index_dir), fresh_index=True
        )
    acquisition = ctx.profile.load(state.selected.master_path, "hdf5", ctx.settings)
    seconds = timer.stop()
    delta = proc_io.read_io_counters() - before
    try:
        check_product(ctx.log, state.expected, acquisition, "first observation")
        ctx.memory.sample(acquisition)
    finally:
        acquisition.close()
    state.first_observation = {
        "seconds": seconds,
        "index_seconds": timer.stages["index"],
        "residency_before": residency.fraction,
        "read_bytes": max(0, delta.read_bytes),
        "file_bytes": residency.file_bytes,
    }


def timed_load(
    ctx: TrialContext, state: AcquisitionState, fmt: str, cache_state: str
) -> trials.Measurement:
    """One timed in-process load of ``fmt`` in ``cache_state`` (the caller releases it)."""
    return ctx.profile.measure_in_process(
        state.path_of(fmt),
        fmt,
        ctx.settings,
        cache_state=cache_state,
        files=state.files_of(fmt),
        evict_also=[state.qem_path] if fmt == "hdf5" and cache_state == trials.COLD else (),
    )


def settle_load(ctx: TrialContext, state: AcquisitionState, fmt: str) -> dict:
    """The untimed load before a cuda cached trial; returns its seconds and staging.

    A cold trial releases the files' page-cache registrations (the kernel cannot evict a
    locked page), so without it every cached trial would register them again: the cached
    cell is the steady state of reloading, and what registering costs stays in the record.
    """
    start = time.perf_counter()
    acquisition = ctx.profile.load(state.path_of(fmt), fmt, ctx.settings)
    try:
        ctx.profile.barrier()
        seconds = time.perf_counter() - start
        stats = acquisition.metadata.get("load_stats") or {}
    finally:
        acquisition.close()
        del acquisition
    return {
        "seconds": seconds,
        "staging": stats.get("staging"),
        "registered_bytes": stats.get("registered_bytes"),
    }


def checked_load(
    ctx: TrialContext, state: AcquisitionState, fmt: str, cache_state: str, what: str
) -> tuple[trials.Measurement, str]:
    """A timed load, then (untimed) its product check and memory sample; released after."""
    settle = None
    if cache_state == trials.CACHED and ctx.profile.settle_cached:
        settle = settle_load(ctx, state, fmt)
    m = timed_load(ctx, state, fmt, cache_state)
    acquisition, m.result = m.result, None
    try:
        m.stages.update(loader_stages(acquisition))
        load_stats = acquisition.metadata.get("load_stats") or {}
        m.extra["staging"] = load_stats.get("staging")
        m.extra["registered_bytes"] = load_stats.get("registered_bytes")
        m.extra["settle"] = settle
        devices = loader_devices(acquisition)
        if devices is not None:
            m.extra["devices"] = devices
        ctx.memory.sample(acquisition)
        product = check_product(ctx.log, state.expected, acquisition, what, fmt)
    finally:
        acquisition.close()  # frees the arrays now (reference counting), not at a later gc
        del acquisition
    return m, product


def qem_first_observation(ctx: TrialContext, state: AcquisitionState) -> None:
    """The first QEM load of the process, cold, recorded apart from the trials.

    It pays one-time costs (JIT compilation or kernel loading, pool growth) that
    the trials should not; "first" in the summaries is the first *trial*.
    """
    m, _ = checked_load(ctx, state, "qem", trials.COLD, "first QEM observation")
    state.qem_first_observation = {
        "seconds": m.seconds,
        "label": m.label_and_kept[0],
        "residency_before": round(m.residency_before, 6),
        "read_bytes": int(m.read_bytes),
        "file_bytes": int(m.file_bytes),
    }


def trial_record(
    state: AcquisitionState,
    fmt: str,
    index: int,
    m: trials.Measurement,
    *,
    product: str | None,
    extra: dict | None = None,
) -> dict:
    """The report's record of one trial."""
    label, kept = m.label_and_kept
    record = {
        "acquisition": state.selected.id,
        "format": fmt,
        "cache_state": m.cache_state,
        "trial_index": index,
        "label": label,
        "kept": kept,
        "seconds": m.seconds,
        "stages": m.stages,
        "residency_before": round(m.residency_before, 6),
        "read_bytes": int(m.read_bytes),
        "file_bytes": int(m.file_bytes),
        "product_sha256": product,
        "shape": state.expected.shape,
        "dtype": state.expected.dtype_of(fmt),
        "rchar": int(m.extra.get("rchar", 0)),
        "residency_method": m.extra.get("residency_method"),
        "io_read_bytes_before": m.extra.get("io_read_bytes_before"),
        "io_read_bytes_after": m.extra.get("io_read_bytes_after"),
    }
    if m.extra.get("cpu_seconds") is not None:
        record["cpu_seconds"] = m.extra["cpu_seconds"]
    # a sharded load's GPUs; the path a cuda load took, what it registered, its settle load
    for key in ("devices", "staging", "registered_bytes", "settle"):
        if m.extra.get(key) is not None:
            record[key] = m.extra[key]
    if extra:
        record.update(extra)
    return record


def run_trial(
    ctx: TrialContext, state: AcquisitionState, fmt: str, cache_state: str, index: int
) -> dict:
    """One trial of the backend's kind; returns its record."""
    if not ctx.profile.in_process:
        frames = sample_frames_of(state.expected)
        native = ctx.profile.measure_separate(
            ctx.native_binary, state.qem_path, frames, ctx.settings.threads, cache_state
        )
        check_native_load(
            ctx.log, state.expected, state.python_sample_hashes, native.frames,
            native.hashes, native.shape,
        )  # fmt: skip
        for problem in native.problems:
            ctx.log.correctness(problem)
        m = native.measurement
        return trial_record(state, fmt, index, m, product=None, extra=native.record_extra)
    what = f"{fmt} {cache_state} trial {index}"
    m, product = checked_load(ctx, state, fmt, cache_state, what)
    return trial_record(state, fmt, index, m, product=product)


def cold_reloads(ctx: TrialContext, state: AcquisitionState, count: int) -> list[dict]:
    """``--cold-reloads``: evicted QEM loads recorded apart from the summaries."""
    runs = []
    for i in range(count):
        m, product = checked_load(ctx, state, "qem", trials.COLD, f"cold reload {i}")
        label, kept = m.label_and_kept
        runs.append(
            {
                "acquisition": state.selected.id,
                "run_index": i,
                "seconds": m.seconds,
                "label": label,
                "kept": kept,
                "residency_before": round(m.residency_before, 6),
                "read_bytes": int(m.read_bytes),
                "file_bytes": int(m.file_bytes),
                "product_sha256": product,
            }
        )
    return runs


def profiled_reload(ctx: TrialContext, state: AcquisitionState) -> dict:
    """``--profile-reload``: one instrumented cold QEM load (outside the statistics)."""
    cache.evict_files([state.qem_path])
    return profile_call(
        lambda: ctx.profile.load(state.qem_path, "qem", ctx.settings),
        barrier=ctx.profile.barrier,
        label={"acquisition": state.selected.id, "format": "qem", "cache_state": "cold"},
    )
