"""``harness run io-scale``: the orchestration of one benchmark run.

Order of work (docs/io-scale.md explains each step and why):

1. Provenance first: refuse foreign modules, fingerprint the source.
2. Parse the manifest, check every master's SHA-256 before any measurement.
3. Per acquisition: a first HDF5 observation with a fresh, disposable frame index;
   QEM preparation (timed as the conversion workflow unless ``--load-only``) and the
   reference-header check; ``reps`` rounds of cold and cached loads of both formats
   (interleaved, so drift hits both alike), each followed, outside the timing, by the
   indexed product; optional cold reloads and one profiled reload.
4. Fingerprint again; build the report; compare with the baseline; write
   ``loading.json`` atomically; register it into the history.

Every temporary file (QEM, frame index) lives in one folder removed in a ``finally``,
also on Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import resource
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_REVIEW,
    HarnessError,
    ReportValidationError,
    UsageError,
)
from harness.fsio import write_new
from harness.run import cache, proc_io, trials
from harness.run.manifest import SelectedAcquisition, check_master_hashes, parse_manifest
from harness.run.timers import WallTimer, device_barrier

REPORT_NAME = "loading.json"
#: Where a report that fails its own schema is kept for diagnosis (never registered).
REJECTED_REPORT_NAME = "loading.rejected.json"
REFERENCE_HEADER_DIR = "qem-reference-headers"
TEMP_PREFIX = ".io-scale-tmp-"
FORMATS = ("hdf5", "qem")
CACHE_STATES = ("cold", "cached")

#: What the timer includes, per backend (part of the comparison key).
TIMING_BOUNDARIES = {
    "cpu": "cpu:load-call-to-host-array (open, index lookup, read, decode, checksums)",
    "cuda": "cuda:load-call-to-device-array-synchronized (read, transfer, decode, checksums)",
    "native": "native:process-launch-to-exit (qem-native-load: open, verify, decode to memory)",
}
ALLOCATOR_POLICIES = {
    "cpu": "host:numpy-default, arrays released after each trial",
    "cuda": "cuda:cupy-default-memory-pool kept across loads, pinned pool kept",
    "native": "native:fresh-process-per-trial",
}


@dataclass
class IoScaleConfig:
    """Everything a run needs; built by the CLI (``harness.commands.run``) or by tests."""

    root: Path
    manifest: Path
    backend: str
    storage_id: str
    output_dir: Path
    reps: int = 5
    load_only: bool = False
    representation: str = "dense"
    history_dir: Path | None = None
    baseline: str | None = None
    regression_percent: float = 20.0
    fresh_index: bool = False
    cold_reloads: int = 0
    verify: bool = True
    source_hashes: bool = True
    reloads: int = 1
    profile_reload: bool = False
    native_binary: Path | None = None
    threads: int | None = None
    command: Sequence[str] = ()
    progress: bool | None = None  # None: only on a TTY
    #: Called with (event, details) at stage boundaries; tests use it to act mid-run.
    on_event: Callable[[str, dict], None] | None = None


@dataclass
class RunOutcome:
    """Result of a run: the report document, where it was written, the exit code."""

    report: dict
    report_path: Path | None
    exit_code: int
    registered: list = field(default_factory=list)


# --- temporary files and signals ----------------------------------------------------


class InterruptLatch:
    """Remembers that SIGINT, SIGTERM or SIGHUP arrived, even if its exception was lost.

    The handler raises ``KeyboardInterrupt`` so the run unwinds at once; but Python
    discards an exception raised while it runs a weakref callback or a ``__del__``
    ("Exception ignored in ..."), and a run that carried on from there would write a
    report nobody asked for. The latch keeps the signal, :meth:`check` re-raises it at
    every trial boundary, and leaving the area re-raises it before any report is written.
    """

    def __init__(self) -> None:
        self.signum: int | None = None

    def handler(self, signum, frame) -> None:
        self.signum = signum
        raise KeyboardInterrupt(f"signal {signum}")

    def check(self) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt(f"signal {self.signum}")


@contextlib.contextmanager
def temporary_area(parent: Path, latch: InterruptLatch | None = None) -> Iterator[Path]:
    """A private folder for disposable QEM and index files, removed whatever happens.

    SIGINT, SIGTERM and SIGHUP raise ``KeyboardInterrupt`` for the duration (through
    ``latch``, which also remembers them), so a killed run unwinds through the
    ``finally`` like a Ctrl-C instead of leaving files, and never completes normally.
    """
    parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=parent))
    latch = latch if latch is not None else InterruptLatch()
    previous = {}
    if _is_main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, latch.handler)
    try:
        yield folder
        latch.check()  # a signal whose exception was swallowed still ends the run
    finally:
        try:
            shutil.rmtree(folder, ignore_errors=True)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _is_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


# --- memory --------------------------------------------------------------------------


class MemoryTracker:
    """Peaks of host RSS and of GPU pool/card use, sampled after every load."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.gpu_allocated = self.gpu_reserved = self.gpu_card_used = None
        self.resident_bytes: int | None = None

    def sample(self, acquisition: Any = None) -> None:
        if acquisition is not None:
            nbytes = _resident_nbytes(acquisition)
            if nbytes is not None:
                self.resident_bytes = max(self.resident_bytes or 0, nbytes)
        if self.backend != "cuda":
            return
        import cupy

        pool = cupy.get_default_memory_pool()
        free, total = cupy.cuda.runtime.memGetInfo()
        self.gpu_allocated = max(self.gpu_allocated or 0, int(pool.used_bytes()))
        self.gpu_reserved = max(self.gpu_reserved or 0, int(pool.total_bytes()))
        self.gpu_card_used = max(self.gpu_card_used or 0, int(total - free))

    def section(self) -> dict:
        peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        return {
            "peak_rss_bytes": int(peak_rss),
            "gpu_allocated_peak_bytes": self.gpu_allocated,
            "gpu_reserved_peak_bytes": self.gpu_reserved,
            "gpu_card_used_peak_bytes": self.gpu_card_used,
            "resident_bytes": self.resident_bytes,
        }


def _resident_nbytes(acquisition: Any) -> int | None:
    if getattr(acquisition, "data", None) is not None:
        return int(acquisition.data.nbytes)
    encoded = getattr(acquisition, "encoded", None)
    for name in ("nbytes", "resident_bytes"):
        value = getattr(encoded, name, None)
        if isinstance(value, int):
            return value
    return None


# --- one acquisition -------------------------------------------------------------------


@dataclass
class AcquisitionState:
    """What the run learns about one acquisition."""

    selected: SelectedAcquisition
    source_files: list[Path] = field(default_factory=list)
    source_bytes: int = 0
    qem_path: Path | None = None
    qem_bytes: int | None = None
    first_observation: dict = field(default_factory=lambda: {"seconds": 0.0, "index_seconds": 0.0})
    products: list[str] = field(default_factory=list)
    python_sample_hashes: list[str] | None = None
    shape: list[int] | None = None
    dtype: str | None = None
    qem_dtype: str | None = None
    qem_first_observation: dict | None = None

    def expected_dtype(self, fmt: str) -> str | None:
        return self.dtype if fmt == "hdf5" else self.qem_dtype

    def entry(self) -> dict:
        sel = self.selected
        return {
            "id": sel.id,
            "filename": sel.filename,
            "source_master_sha256": sel.source_master_sha256,
            "shape": self.shape or list(sel.shape or (1, 1, 1, 1)),
            "dtype": self.dtype or sel.dtype or "unknown",
            "source_bytes": self.source_bytes,
            "qem_bytes": self.qem_bytes,
            "first_observation": self.first_observation,
            "indexed_product_sha256": self.products[0] if self.products else None,
            "products_consistent": len(set(self.products)) <= 1,
            "qem_dtype": self.qem_dtype,
            "qem_first_observation": self.qem_first_observation,
        }


class IoScaleRun:
    """One run of io-scale; :meth:`execute` returns a :class:`RunOutcome`."""

    def __init__(self, config: IoScaleConfig) -> None:
        self.config = config
        self.failures: list[str] = []
        self.execution_failed = False
        self.correctness_failed = False
        self.trials: list[dict] = []
        self.cold_reload_runs: list[dict] = []
        self.conversions: list[dict] = []
        self.profile: dict | None = None
        self.states: list[AcquisitionState] = []
        self.memory = MemoryTracker(config.backend)
        self.barrier = device_barrier(config.backend)
        self.work_dir: Path | None = None
        self._progress = None
        self._latch: InterruptLatch | None = None

    # -- helpers ------------------------------------------------------------------
    def _event(self, name: str, **details: Any) -> None:
        if self._latch is not None:
            self._latch.check()
        if self.config.on_event is not None:
            self.config.on_event(name, details)

    def _fail_correctness(self, message: str) -> None:
        self.correctness_failed = True
        self.failures.append(f"correctness: {message}")

    def _python_backend(self) -> str:
        return "cpu" if self.config.backend == "native" else self.config.backend

    def _load(self, path: Path, fmt: str, *, fresh_index: bool = False) -> Any:
        import quantem.io

        backend = self._python_backend()
        options: dict[str, Any] = {}
        if self.config.threads is not None:
            options["threads"] = self.config.threads
        if fmt == "hdf5":
            options["index_dir"] = str(self.work_dir / "index")
            options["fresh_index"] = fresh_index
        elif self.config.representation != "dense":
            options["representation"] = self.config.representation
        return quantem.io.load(path, backend=backend, **options)

    # -- steps ----------------------------------------------------------------------
    def _resolve_sources(self, state: AcquisitionState) -> None:
        from quantem.io.arina import open_arina

        master = state.selected.master_path
        source = open_arina(master, index_dir=str(self.work_dir / "index"))
        files = [Path(master), *(Path(p) for p in source.shard_paths)]
        state.source_files = list(dict.fromkeys(p.resolve() for p in files))
        state.source_bytes = sum(p.stat().st_size for p in state.source_files)
        shape = [*source.scan_shape, *source.detector_shape]
        state.shape = [int(n) for n in shape]
        state.dtype = str(source.dtype)
        sel = state.selected
        if sel.shape is not None and list(sel.shape) != state.shape:
            self._fail_correctness(
                f"{sel.id}: shape {state.shape} differs from the manifest's {list(sel.shape)}"
            )
        if sel.dtype is not None and sel.dtype != state.dtype:
            self._fail_correctness(
                f"{sel.id}: dtype {state.dtype} differs from the manifest's {sel.dtype}"
            )

    def _first_observation(self, state: AcquisitionState) -> None:
        """The first load with a fresh frame index, cold, recorded apart from the trials."""
        from quantem.io.arina import open_arina

        cache.evict_files(state.source_files)
        residency = cache.probe_residency(state.source_files)
        before = proc_io.read_io_counters()
        timer = WallTimer(self.barrier).start()
        with timer.stage("index"):
            open_arina(
                state.selected.master_path, index_dir=str(self.work_dir / "index"), fresh_index=True
            )
        acquisition = self._load(state.selected.master_path, "hdf5")
        seconds = timer.stop()
        delta = proc_io.read_io_counters() - before
        try:
            self._check_product(state, acquisition, "first observation")
            self.memory.sample(acquisition)
        finally:
            acquisition.close()
        state.first_observation = {
            "seconds": seconds,
            "index_seconds": timer.stages["index"],
            "residency_before": residency.fraction,
            "read_bytes": max(0, delta.read_bytes),
            "file_bytes": residency.file_bytes,
        }

    def _qem_first_observation(self, state: AcquisitionState) -> None:
        """The first QEM load of the process, cold, recorded apart from the trials.

        It pays one-time costs (JIT compilation or kernel loading, pool growth) that
        the trials should not; "first" in the summaries is the first *trial*.
        """
        m = self._python_trial(state, "qem", "cold")
        acquisition = m.result
        m.result = None
        try:
            self._check_product(state, acquisition, "first QEM observation", "qem")
            self.memory.sample(acquisition)
        finally:
            acquisition.close()
        state.qem_first_observation = {
            "seconds": m.seconds,
            "label": m.label_and_kept[0],
            "residency_before": round(m.residency_before, 6),
            "read_bytes": int(m.read_bytes),
            "file_bytes": int(m.file_bytes),
        }

    def _check_product(
        self, state: AcquisitionState, acquisition: Any, what: str, fmt: str = "hdf5"
    ) -> str:
        """Check shape, exposed dtype and the indexed product of one load; return the hash.

        HDF5 loads expose the source dtype; QEM loads the file's stored dtype (the
        narrowest holding every count, docs/qem-format.md §16). The product is uint64
        either way, so it must agree across formats.
        """
        digest, shape, dtype = trials.indexed_product(acquisition)
        sel = state.selected
        expected_dtype = state.expected_dtype(fmt)
        if shape != state.shape:
            self._fail_correctness(
                f"{sel.id}: {what} returned shape {shape}, expected {state.shape}"
            )
        if dtype != expected_dtype:
            self._fail_correctness(
                f"{sel.id}: {what} exposed dtype {dtype}, expected {expected_dtype}"
            )
        if sel.indexed_product_sha256 is not None and digest != sel.indexed_product_sha256:
            self._fail_correctness(
                f"{sel.id}: {what}: indexed product SHA-256 {digest} differs from the manifest's "
                f"{sel.indexed_product_sha256}"
            )
        if state.products and digest != state.products[0]:
            self._fail_correctness(
                f"{sel.id}: {what}: indexed product SHA-256 {digest} differs from the first load's "
                f"{state.products[0]}"
            )
        state.products.append(digest)
        return digest

    def _prepare_qem(self, state: AcquisitionState) -> bool:
        """Write the disposable QEM (timed as the conversion workflow unless --load-only).

        Returns False when it differs from the manifest's reference header: nothing is
        then measured against a file known to be wrong.
        """
        import quantem.io

        cfg = self.config
        qem_path = self.work_dir / f"{state.selected.id}.qem"
        if cfg.load_only:
            from quantem.io.arina import open_arina

            source = open_arina(state.selected.master_path, index_dir=str(self.work_dir / "index"))
            quantem.io.save(source, qem_path, verify=False, source_hashes=False)
        else:
            self.conversions.append(self._timed_conversion(state, qem_path))
        state.qem_path = qem_path
        state.qem_bytes = qem_path.stat().st_size
        state.qem_dtype = _qem_stored_dtype(qem_path)
        self._event("qem-prepared", acquisition=state.selected.id, path=str(qem_path))
        if state.selected.qem_reference_header is not None:
            from harness.run.qem_reference import compare_reference_header

            differences = compare_reference_header(qem_path, state.selected.qem_reference_header)
            if differences:
                self._fail_correctness(
                    f"{state.selected.id}: prepared QEM differs from reference header "
                    f"{state.selected.qem_reference_header}: " + "; ".join(differences[:5])
                )
                return False
        return True

    def _timed_conversion(self, state: AcquisitionState, qem_path: Path) -> dict:
        """HDF5 read, encode+write (fsync, rename), N verified reopens: the user's workflow."""
        import numpy as np

        import quantem.io

        cfg = self.config
        timer = WallTimer(self.barrier).start()
        with timer.stage("hdf5_read"):
            source = quantem.io.load(
                state.selected.master_path, backend="cpu", index_dir=str(self.work_dir / "index")
            )
        try:
            with timer.stage("encode_write"):
                quantem.io.save(
                    source, qem_path, verify=cfg.verify, source_hashes=cfg.source_hashes
                )
            for _ in range(cfg.reloads):
                with timer.stage("reopen_verify"):
                    reopened = quantem.io.load(qem_path, backend="cpu", verify=True)
                    try:
                        identical = np.array_equal(reopened.data, source.data)
                    finally:
                        reopened.close()
                if not identical:
                    self._fail_correctness(
                        f"{state.selected.id}: reopened QEM differs from the HDF5 source"
                    )
        finally:
            source.close()
        seconds = timer.stop()
        verified = cfg.verify and cfg.source_hashes and cfg.reloads > 0
        record = {
            "acquisition": state.selected.id,
            "stages": dict(timer.stages),
            "verify": cfg.verify,
            "source_hashes": cfg.source_hashes,
            "reloads": cfg.reloads,
            "qem_bytes": qem_path.stat().st_size,
            "cache_state": "as left by the first observation (source mostly cached)",
        }
        record["verified_conversion_seconds" if verified else "conversion_seconds"] = seconds
        return record

    def _files_of(self, state: AcquisitionState, fmt: str) -> list[Path]:
        return list(state.source_files) if fmt == "hdf5" else [state.qem_path]

    def _python_trial(
        self, state: AcquisitionState, fmt: str, cache_state: str
    ) -> trials.Measurement:
        path = state.selected.master_path if fmt == "hdf5" else state.qem_path

        def load(timer: WallTimer) -> Any:
            return self._load(path, fmt, fresh_index=self.config.fresh_index)

        return trials.measure_load(
            load,
            cache_state=cache_state,
            files=self._files_of(state, fmt),
            evict_also=[state.qem_path] if fmt == "hdf5" and cache_state == "cold" else (),
            barrier=self.barrier,
        )

    def _record_trial(
        self,
        state: AcquisitionState,
        fmt: str,
        index: int,
        m: trials.Measurement,
        *,
        product: str | None,
        extra: dict | None = None,
    ) -> dict:
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
            "shape": state.shape,
            "dtype": state.expected_dtype(fmt),
            "rchar": int(m.extra.get("rchar", 0)),
            "residency_method": m.extra.get("residency_method"),
            "io_read_bytes_before": m.extra.get("io_read_bytes_before"),
            "io_read_bytes_after": m.extra.get("io_read_bytes_after"),
        }
        if extra:
            record.update(extra)
        return record

    def _run_trial(self, state: AcquisitionState, fmt: str, cache_state: str, index: int) -> None:
        if self.config.backend == "native":
            from harness.run.native_trials import measure_native_load

            m, extra = measure_native_load(self, state, cache_state)
            self.trials.append(self._record_trial(state, fmt, index, m, product=None, extra=extra))
            return
        m = self._python_trial(state, fmt, cache_state)
        acquisition = m.result
        m.result = None
        try:
            m.stages.update(loader_stages(acquisition))
            self.memory.sample(acquisition)
            what = f"{fmt} {cache_state} trial {index}"
            product = self._check_product(state, acquisition, what, fmt)
        finally:
            acquisition.close()  # frees the arrays now (reference counting), not at a later gc
            del acquisition
        self.trials.append(self._record_trial(state, fmt, index, m, product=product))
        self._event(
            "trial", acquisition=state.selected.id, format=fmt, cache_state=cache_state, index=index
        )

    def _cold_reloads(self, state: AcquisitionState) -> None:
        for i in range(self.config.cold_reloads):
            m = self._python_trial(state, "qem", "cold")
            acquisition = m.result
            m.result = None
            try:
                product = self._check_product(state, acquisition, f"cold reload {i}", "qem")
            finally:
                acquisition.close()
            label, kept = m.label_and_kept
            self.cold_reload_runs.append(
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

    def _profiled_reload(self, state: AcquisitionState) -> None:
        from harness.run.profile import profile_call

        cache.evict_files([state.qem_path])
        self.profile = profile_call(
            lambda: self._load(state.qem_path, "qem"),
            barrier=self.barrier,
            label={"acquisition": state.selected.id, "format": "qem", "cache_state": "cold"},
        )

    def _measure(self, state: AcquisitionState) -> None:
        cfg = self.config
        self._resolve_sources(state)
        self._first_observation(state)
        self._event("first-observation", acquisition=state.selected.id)
        if not self._prepare_qem(state):
            return
        if cfg.backend != "native":
            self._qem_first_observation(state)
        formats = ("qem",) if cfg.backend == "native" else FORMATS
        if cfg.backend == "native":
            from harness.run.native_trials import python_sample_hashes

            python_sample_hashes(self, state)
        for rep in range(cfg.reps):
            for fmt in formats:
                for cache_state in CACHE_STATES:
                    self._run_trial(state, fmt, cache_state, rep)
                    self._advance()
        if cfg.backend != "native":
            self._cold_reloads(state)
            if cfg.profile_reload:
                self._profiled_reload(state)

    def _advance(self) -> None:
        if self._progress is not None:
            self._progress[0].advance(self._progress[1])

    # -- the run ----------------------------------------------------------------------
    def execute(self) -> RunOutcome:
        from harness.run.environment import collect_environment
        from harness.run.provenance import SourceTracker

        cfg = self.config
        _check_config(cfg)
        tracker = SourceTracker().start()
        manifest = parse_manifest(cfg.manifest, cfg.root)
        check_master_hashes(manifest)
        report_path = cfg.output_dir / REPORT_NAME
        if report_path.exists():
            raise HarnessError(
                f"{report_path} exists; a report is never overwritten: choose a new --output-dir"
            )
        baseline = _load_baseline(cfg) if cfg.baseline else None
        environment = collect_environment(cfg.backend, cfg.root, cfg.storage_id)
        created = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.states = [AcquisitionState(sel) for sel in manifest.acquisitions]
        n_formats = 1 if cfg.backend == "native" else 2
        total = len(self.states) * cfg.reps * n_formats * 2
        self._latch = InterruptLatch()
        with (
            temporary_area(cfg.output_dir, self._latch) as work_dir,
            _progress_bar(cfg, total) as progress,
        ):
            self.work_dir = work_dir
            self._progress = progress
            (work_dir / "index").mkdir()
            for state in self.states:
                try:
                    self._measure(state)
                except (HarnessError, OSError, ValueError, RuntimeError) as exc:
                    if isinstance(exc, HarnessError) and exc.exit_code != EXIT_FAILURE:
                        raise
                    self.execution_failed = True
                    self.failures.append(
                        f"execution: {state.selected.id}: {type(exc).__name__}: {exc}"
                    )
                    break
                except Exception as exc:  # a QuantemError (bad data) is an execution failure too
                    from quantem.errors import QuantemError

                    if not isinstance(exc, QuantemError):
                        raise
                    self.execution_failed = True
                    self.failures.append(
                        f"execution: {state.selected.id}: {type(exc).__name__}: {exc}"
                    )
                    break
            for state in self.states:
                if len(set(state.products)) > 1:
                    self.failures.append(
                        f"correctness: {state.selected.id}: indexed products differ between loads"
                    )
                    self.correctness_failed = True
            headers = self._collect_reference_headers()  # before the QEM files go
        provenance, stable = tracker.finish()
        if not stable:
            changed = ", ".join(tracker.changed_files[:10]) or "a module imported from elsewhere"
            self.failures.append(
                "source-stability: the measured source changed during the run "
                f"(fingerprint {provenance['source_fingerprint_start'][:12]} -> "
                f"{provenance['source_fingerprint_end'][:12]}; changed: {changed})"
            )
        if stable and not (self.execution_failed or self.correctness_failed):
            self._write_reference_headers(headers)  # never from a failing candidate
        doc = self._build_report(cfg, created, provenance, environment, stable)
        performance = "no_baseline"
        if baseline is not None:
            performance = self._compare(baseline, doc)
        exit_code = _exit_code(doc["status"], performance)
        doc["status"]["performance"] = performance
        doc["status"]["exit_code"] = exit_code
        from harness.report import dump_report

        try:
            data = dump_report(doc)
        except ReportValidationError:
            # keep what was measured for diagnosis, under a name no tool takes for evidence
            rejected = cfg.output_dir / REJECTED_REPORT_NAME
            _write_atomically(
                rejected, (json.dumps(doc, sort_keys=True, default=str) + "\n").encode()
            )
            raise
        _write_atomically(report_path, data)
        registered = []
        if cfg.history_dir is not None:
            from harness.history.render import registration_renderer
            from harness.history.store import register_reports

            registered = register_reports(
                cfg.history_dir, [report_path], render=registration_renderer()
            )
        return RunOutcome(
            report=doc, report_path=report_path, exit_code=exit_code, registered=registered
        )

    def _collect_reference_headers(self) -> dict[str, dict]:
        """Header documents of the prepared QEM files, by acquisition id."""
        from harness.run.qem_reference import header_document

        return {
            state.selected.id: header_document(state.qem_path)
            for state in self.states
            if state.qem_path is not None and state.qem_path.exists()
        }

    def _write_reference_headers(self, headers: dict[str, dict]) -> None:
        from harness.run.qem_reference import write_header_document

        folder = self.config.output_dir / REFERENCE_HEADER_DIR
        for acquisition_id, document in headers.items():
            folder.mkdir(parents=True, exist_ok=True)
            target = folder / f"{acquisition_id}.qem-header.json"
            if not target.exists():
                write_header_document(document, target)

    def _compare(self, baseline: tuple[dict, str, str | None], doc: dict) -> str:
        """Compare with the named baseline; record it; return ``status.performance``."""
        from harness.compare import compare_reports

        baseline_doc, sha, path = baseline
        percent = self.config.regression_percent
        doc["baseline"] = {"sha256": sha, "path": path, "regression_percent": percent}
        comparison = compare_reports(
            baseline_doc, doc, percent, baseline_sha256=sha, baseline_path=path
        )
        doc["comparison"] = {
            "verdict": comparison.verdict.value,
            "differences": [str(d) for d in comparison.differences],
            "flagged_cells": [
                {
                    "acquisition": c.acquisition,
                    "format": c.format,
                    "cache_state": c.cache_state,
                    "baseline_median": c.baseline_median,
                    "candidate_median": c.candidate_median,
                    "change_percent": c.change_percent,
                }
                for c in comparison.flagged_cells
            ],
            "warnings": list(comparison.warnings),
        }
        return comparison.performance_status

    def _build_report(
        self, cfg: IoScaleConfig, created: str, provenance: dict, environment: dict, stable: bool
    ) -> dict:
        from harness.report import (
            BENCHMARK,
            PROTOCOL_VERSION,
            SCHEMA_NAME,
            SCHEMA_VERSION,
            summarise_trials,
        )

        measured = [s for s in self.states if s.shape is not None]
        summaries = summarise_trials(self.trials)
        kept = sum(1 for t in self.trials if t["kept"])
        return {
            "schema": SCHEMA_NAME,
            "schema_version": SCHEMA_VERSION,
            "protocol_version": PROTOCOL_VERSION,
            "benchmark": BENCHMARK,
            "created_utc": created,
            "command": [str(a) for a in cfg.command],
            "status": {
                "execution": "failed" if self.execution_failed else "completed",
                "correctness": "failed"
                if (self.correctness_failed or self.execution_failed)
                else "passed",
                "source_stability": "stable" if stable else "changed",
                "performance": "no_baseline",
                "exit_code": 0,
                "failures": list(self.failures),
            },
            "baseline": None,
            "provenance": provenance,
            "environment": environment,
            "conditions": {
                "backend": cfg.backend,
                "representation": cfg.representation,
                "timing_boundary": TIMING_BOUNDARIES[cfg.backend],
                "allocator_policy": ALLOCATOR_POLICIES[cfg.backend],
                "compiler_cache_dir": _compiler_cache_dir(cfg.backend),
                "reps": cfg.reps,
                "load_only": cfg.load_only,
                "cache_states": list(CACHE_STATES),
                "fresh_index": cfg.fresh_index,
                "threads": cfg.threads,
                "label_rules": {
                    "cold": f"residency_before <= {trials.COLD_MAX_RESIDENCY} and read_bytes >= {trials.COLD_MIN_READ_FRACTION} * file_bytes",
                    "cached": f"residency_before >= {trials.CACHED_MIN_RESIDENCY} and read_bytes <= {trials.CACHED_MAX_READ_FRACTION} * file_bytes",
                },
            },
            "acquisitions": [s.entry() for s in measured],
            "trials": self.trials,
            "label_counts": {
                "trials": len(self.trials),
                "kept_label": kept,
                "lost_label": len(self.trials) - kept,
            },
            "summaries": summaries,
            "conversion": {"acquisitions": self.conversions} if self.conversions else None,
            "cold_reload_runs": self.cold_reload_runs,
            "profile": self.profile,
            "memory": self.memory.section(),
        }


# --- module helpers ----------------------------------------------------------------------


def _check_config(cfg: IoScaleConfig) -> None:
    if cfg.backend not in TIMING_BOUNDARIES:
        raise UsageError(f"unknown backend {cfg.backend!r}")
    if cfg.reps < 1:
        raise UsageError("--reps must be at least 1")
    if cfg.cold_reloads < 0 or cfg.reloads < 0:
        raise UsageError("--cold-reloads and --reloads must not be negative")
    if cfg.regression_percent <= 0:
        raise UsageError("--regression-percent must be positive")
    if cfg.representation not in ("dense", "encoded"):
        raise UsageError(f"unknown representation {cfg.representation!r}")
    if cfg.representation == "encoded" and cfg.backend != "cuda":
        raise UsageError("--representation encoded needs --backend cuda")
    if cfg.backend == "native" and cfg.native_binary is None:
        raise UsageError("--backend native needs --native-binary PATH")
    if cfg.native_binary is not None and not os.access(cfg.native_binary, os.X_OK):
        raise UsageError(f"--native-binary {cfg.native_binary} is not an executable file")
    if not cfg.storage_id.strip():
        raise UsageError("--storage-id must not be empty")
    if cfg.backend == "cuda":
        from quantem.backends import require_backend

        require_backend("cuda")  # BackendUnavailableError (exit 1) saying why


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


def _qem_stored_dtype(path: Path) -> str:
    from quantem.io.qem import format as qf

    with open(path, "rb") as f:
        header = qf.parse_header(f.read(qf.HEADER_SIZE + qf.FOOTER_SIZE), str(path))
    return str(header.stored_dtype)


def _compiler_cache_dir(backend: str) -> str | None:
    if backend != "cuda":
        return None
    return os.environ.get("CUPY_CACHE_DIR") or str(Path.home() / ".cupy" / "kernel_cache")


def _load_baseline(cfg: IoScaleConfig) -> tuple[dict, str, str | None]:
    """Resolve ``--baseline`` by the one lookup rule (:mod:`harness.history.lookup`)."""
    from harness.history.lookup import load_report

    loaded = load_report(cfg.baseline, history_dir=cfg.history_dir, what="--baseline")
    return loaded.doc, loaded.sha256, str(loaded.path)


def _exit_code(status: dict, performance: str) -> int:
    if (
        status["execution"] == "failed"
        or status["correctness"] == "failed"
        or status["source_stability"] == "changed"
    ):
        return EXIT_FAILURE
    if performance in ("review", "incomparable"):
        return EXIT_REVIEW
    return EXIT_OK


def _write_atomically(path: Path, data: bytes) -> None:
    """Write a new file via a temporary name, fsync, link, fsync the folder; never overwrite."""
    write_new(path, data, step="writing the report")


@contextlib.contextmanager
def _progress_bar(cfg: IoScaleConfig, total: int):
    show = cfg.progress if cfg.progress is not None else sys.stderr.isatty()
    if not show:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("io-scale trials"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=True,
    ) as progress:
        task = progress.add_task("trials", total=total)
        yield (progress, task)


def run_io_scale(config: IoScaleConfig) -> RunOutcome:
    """Run io-scale as configured; see the module docstring for the order of work."""
    return IoScaleRun(config).execute()
