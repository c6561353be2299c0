"""``harness run compute WORKLOAD``: stage timings and output hashes of a compute workload.

The compute *kind* (:class:`harness.run.runner.BenchmarkKind`) in the same frame as
io-scale (provenance, manifest and master hashes, output-dir claim, baseline lookup,
workspace, writing and registering). Per acquisition it runs the workload's stages
(:mod:`harness.run.compute_workloads`) ``reps + 1`` times: round 0 is the *first*
(cold: compilation, plan caches, allocations), rounds 1..reps the *warm* trials. Each
stage is timed between device barriers (GPU-synchronised on cuda). Every round hashes
every output array (SHA-256 of the raw C-order bytes, with dtype and shape); a round
whose hashes differ from round 0 is a correctness failure (the outputs must be
deterministic, docs/compute.md). ``--save-outputs DIR`` writes the arrays of round 0 as
``DIR/<workload>.<output>.npy`` (several acquisitions: ``DIR/<id>/...``) and
``<workload>.json`` with the calibration and fitted parameters, outside the timings.

Against a baseline of the same workload on the same backend and device, output hashes
that differ make the correctness status ``outputs_changed`` (exit 1) unless
``--accept-output-change`` was given, which the report records.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.compare import DEFAULT_REGRESSION_PERCENT, output_changes
from harness.compute_report import BENCHMARK, SCHEMA_NAME, SCHEMA_VERSION
from harness.errors import UsageError
from harness.history.store import RegistrationRenderer
from harness.report import quantile
from harness.run.backends import BackendProfile, profile_for
from harness.run.checks import FailureLog
from harness.run.compute_workloads import ComputeParameters, as_host, workload_for
from harness.run.loop import Cell, TrialLoop
from harness.run.manifest import SelectedAcquisition
from harness.run.memory import MemoryTracker
from harness.run.reporting import RunOutcome
from harness.run.runner import run_benchmark
from harness.run.workspace import Workspace

COMPUTE_REPORT_NAME = "compute.json"
FIRST, WARM = "first", "warm"


@dataclass
class ComputeConfig:
    """Everything a compute run needs; built by the CLI or by tests."""

    workload: str
    root: Path
    manifest: Path
    backend: str
    storage_id: str
    output_dir: Path
    reps: int = 5
    parameters: ComputeParameters = field(default_factory=ComputeParameters)
    save_outputs: Path | None = None
    accept_output_change: bool = False
    history_dir: Path | None = None
    #: Brings the history's rendered files up to date after registration (see IoScaleConfig).
    render: RegistrationRenderer | None = None
    baseline: str | None = None
    regression_percent: float = DEFAULT_REGRESSION_PERCENT
    #: Read by the runner frame: calibration record for significance, recheck rounds of
    #: flagged cells (compute reruns none: 0), host locks.
    calibration: str | None = None
    recheck: int = 0
    lock_dir: Path | None = None
    lock_timeout: float = 600.0
    command: Sequence[str] = ()
    progress: bool | None = None
    on_event: Callable[[str, dict], None] | None = None


def output_digest(array: np.ndarray) -> dict:
    from quantem.arrays import array_digest

    return array_digest(array)


class ComputeRun:
    """The compute kind; :meth:`execute` runs it in the frame."""

    title = "compute trials"
    report_name = COMPUTE_REPORT_NAME

    def __init__(self, config: ComputeConfig) -> None:
        self.config = config
        self.log = FailureLog()
        self.workload = workload_for(config.workload, config.parameters)
        self.profile: BackendProfile | None = None
        self.memory: MemoryTracker | None = None
        self.trials: list[dict] = []
        self.acquisitions: list[dict] = []

    # -- the report's identity (read by the runner) ------------------------------------
    @property
    def report_head(self) -> dict:
        return {
            "schema": SCHEMA_NAME,
            "schema_version": SCHEMA_VERSION,
            "benchmark": f"{BENCHMARK}-{self.workload.name}",
        }

    # -- BenchmarkKind -----------------------------------------------------------------
    def check_config(self) -> None:
        cfg = self.config
        if cfg.reps < 1:
            raise UsageError("--reps must be at least 1")
        if cfg.regression_percent <= 0:
            raise UsageError("--regression-percent must be positive")
        if not cfg.storage_id.strip():
            raise UsageError("--storage-id must not be empty")
        if cfg.accept_output_change and cfg.baseline is None:
            raise UsageError("--accept-output-change needs --baseline")
        if cfg.backend not in ("cpu", "cuda"):
            raise UsageError(f"compute runs on --backend cpu or cuda, not {cfg.backend!r}")
        if cfg.parameters.streaming and cfg.backend != "cpu":
            raise UsageError(
                "ssb streaming (--memory-budget, --scan-block-rows) runs on --backend cpu; "
                "on cuda the whole acquisition is loaded"
            )
        if cfg.parameters.scan_block_rows is not None and cfg.parameters.scan_block_rows < 1:
            raise UsageError("--scan-block-rows must be at least 1")
        if (
            cfg.parameters.memory_budget_bytes is not None
            and cfg.parameters.memory_budget_bytes < 1
        ):
            raise UsageError("--memory-budget must be positive")
        if cfg.parameters.dtype == "float32" and cfg.backend == "cpu":
            raise UsageError("--dtype float32 is a cuda option (cpu outputs are float64)")
        if (
            cfg.save_outputs is not None
            and cfg.save_outputs.exists()
            and any(cfg.save_outputs.iterdir())
        ):
            raise UsageError(f"--save-outputs {cfg.save_outputs} is not empty")
        self.profile = profile_for(cfg.backend)
        self.profile.require()
        self.memory = MemoryTracker(self.profile)

    def total_trials(self, n_acquisitions: int) -> int:
        self._n_acquisitions = n_acquisitions
        return n_acquisitions * (self.config.reps + 1) * len(self.workload.stages)

    def measure(self, selected: SelectedAcquisition, workspace: Workspace) -> None:
        cfg = self.config
        stages = self.workload.stages
        barrier = self.profile.barrier
        entry = {
            "id": selected.id,
            "filename": selected.filename,
            "source_master_sha256": selected.source_master_sha256,
            "outputs": {},
            "fitted": None,
            "deterministic": True,
        }
        self.acquisitions.append(entry)
        cells = [Cell(selected.id, "hdf5", name) for name, _ in stages]
        state_holder: dict = {}

        def one(cell: Cell, index: int) -> None:
            # A round is the whole workload; the loop's cells are its stages in order.
            name = cell.cache_state
            if name == stages[0][0]:
                self._close(state_holder)
                state_holder.clear()
                state_holder.update(
                    path=str(selected.master_path),
                    backend=cfg.backend,
                    parameters=cfg.parameters,
                    on_close=[],
                )
            run = dict(stages)[name]
            barrier()
            start = time.perf_counter_ns()
            run(state_holder)
            barrier()
            seconds = (time.perf_counter_ns() - start) / 1e9
            self.trials.append(
                {
                    "acquisition": selected.id,
                    "format": "hdf5",
                    "cache_state": name,
                    "stage": name,
                    "trial_index": index,
                    "label": FIRST if index == 0 else WARM,
                    "kept": index > 0,
                    "seconds": seconds,
                    "read_bytes": 0,
                    "file_bytes": 0,
                    "residency_before": 0.0,
                }
            )
            if name == stages[-1][0]:
                self.memory.sample(state_holder.get("acq"))
                self._finish_round(selected, entry, state_holder, index)

        try:
            TrialLoop(workspace, one).run(cells, cfg.reps + 1)
        finally:
            self._close(state_holder)

    def _finish_round(self, selected, entry: dict, state: dict, index: int) -> None:
        outputs = {name: as_host(a) for name, a in self.workload.outputs(state).items()}
        digests = {name: output_digest(a) for name, a in outputs.items()}
        if index == 0:
            entry["outputs"] = digests
            entry["fitted"] = _jsonable(self.workload.fitted(state))
            if self.config.save_outputs is not None:
                self._save(selected, outputs, entry)
            return
        for name, digest in digests.items():
            if digest != entry["outputs"].get(name):
                entry["deterministic"] = False
                self.log.correctness(
                    f"{selected.id}: output {name} of round {index} differs from round 0 "
                    f"({digest['sha256'][:12]} vs {entry['outputs'][name]['sha256'][:12]}): "
                    "the workload is not deterministic"
                )

    def _save(self, selected, outputs: dict[str, np.ndarray], entry: dict) -> None:
        folder = self.config.save_outputs
        if self._n_acquisitions > 1:
            folder = folder / selected.id
        folder.mkdir(parents=True, exist_ok=True)
        name = self.workload.name
        for output, array in outputs.items():
            np.save(folder / f"{name}.{output}.npy", array, allow_pickle=False)
        meta = {
            "workload": name,
            "acquisition": selected.id,
            "calibration": self.config.parameters.calibration().to_dict(),
            "parameters": self.config.parameters.to_dict(),
            "fitted": entry["fitted"],
            "outputs": entry["outputs"],
        }
        (folder / f"{name}.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")

    _n_acquisitions = 1

    @staticmethod
    def _close(state: dict) -> None:
        for close in reversed(state.get("on_close", [])):
            close()
        state.pop("on_close", None)

    def judge_hook(self, doc: dict, baseline) -> None:
        """Output hashes against a same-backend, same-device baseline (module docstring)."""
        changed = output_changes(baseline.doc, doc)
        if not changed:
            return
        doc["output_change"] = {
            "accepted": bool(self.config.accept_output_change),
            "changed": changed,
            "baseline_sha256": baseline.sha256,
        }
        if not self.config.accept_output_change:
            doc["status"]["correctness"] = "outputs_changed"
            doc["status"]["failures"].append(
                "outputs_changed: output hashes differ from the baseline on the same backend "
                f"and device: {', '.join(changed)} (pass --accept-output-change to accept)"
            )

    def after_trials(self, workspace: Workspace) -> None:
        pass

    def finish(self, trustworthy: bool) -> None:
        pass

    def summaries(self) -> list[dict]:
        cells: dict[tuple[str, str], list[dict]] = {}
        for trial in self.trials:
            cells.setdefault((trial["acquisition"], trial["stage"]), []).append(trial)
        out = []
        for (acquisition, stage), members in cells.items():
            first = [t for t in members if t["label"] == FIRST]
            warm = sorted(float(t["seconds"]) for t in members if t["kept"])
            summary = {
                "acquisition": acquisition,
                "format": "hdf5",
                "cache_state": stage,
                "stage": stage,
                "n": len(members),
                "n_kept": len(warm),
                "first": float(first[0]["seconds"]) if first else None,
                "median": quantile(warm, 0.5) if warm else None,
                "p90": quantile(warm, 0.9) if warm else None,
                "p95": quantile(warm, 0.95) if warm else None,
                "min": warm[0] if warm else None,
                "max": warm[-1] if warm else None,
            }
            out.append(summary)
        return out

    def build_report(self, head: dict) -> dict:
        cfg, profile = self.config, self.profile
        return {
            **head,
            "conditions": {
                "workload": self.workload.name,
                "backend": cfg.backend,
                "representation": "dense",
                "timing_boundary": f"{cfg.backend}:stage-call (device-synchronised before and after)",
                "allocator_policy": profile.allocator_policy,
                "cache_states": [name for name, _ in self.workload.stages],
                "stages": [name for name, _ in self.workload.stages],
                "reps": cfg.reps,
                "parameters": _jsonable(cfg.parameters.to_dict()),
                "calibration": cfg.parameters.calibration().to_dict(),
            },
            "acquisitions": self.acquisitions,
            "trials": self.trials,
            "summaries": self.summaries(),
            "output_change": {
                "accepted": bool(cfg.accept_output_change),
                "changed": [],
            },
            "memory": self.memory.section(),
        }

    def execute(self) -> RunOutcome:
        return run_benchmark(self)


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.floating, float)):
        v = float(value)
        return v if v == v and abs(v) != float("inf") else None
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    return value


def run_compute(config: ComputeConfig) -> RunOutcome:
    """Run a compute workload as configured (module docstring)."""
    return ComputeRun(config).execute()


__all__ = ["COMPUTE_REPORT_NAME", "ComputeConfig", "ComputeRun", "run_compute"]
