"""``harness run compute WORKLOAD``: stage timings and output hashes of a compute workload.

The compute *kind* (:class:`harness.run.runner.BenchmarkKind`) in the same frame as
io-scale (provenance, manifest and master hashes, output-dir claim, baseline lookup,
workspace, writing and registering). Per acquisition it runs the workload's stages
(:mod:`harness.run.compute.workloads`) ``reps + 1`` times: round 0 is the *first*
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

The configuration and its checks are :mod:`harness.run.compute.config`; what a round
produces (hashes, determinism, saved outputs, output changes) is
:mod:`harness.run.compute.outputs`.
"""

from __future__ import annotations

import time

from harness.compute_report import BENCHMARK, SCHEMA_NAME, SCHEMA_VERSION
from harness.report import quantile
from harness.run.backends import BackendProfile
from harness.run.checks import FailureLog
from harness.run.compute.config import ComputeConfig, check_config
from harness.run.compute.outputs import (
    check_deterministic,
    jsonable,
    judge_output_change,
    output_digest,
    save_outputs,
)
from harness.run.compute.workloads import as_host, workload_for
from harness.run.floors.cells import FLOORS_VERSION
from harness.run.floors.mask_lines import MASK_LINES
from harness.run.floors.read_once import READ_ONCE
from harness.run.floors.stages import measure_stage_floors, with_ratios
from harness.run.fresh.first_call import first_call_section, measure_first_calls, peer_versions
from harness.run.instrumentation import instrumentation_state
from harness.run.loop import Cell, TrialLoop
from harness.run.manifest import SelectedAcquisition
from harness.run.memory import MemoryTracker
from harness.run.qem_copy import write_qem_untimed
from harness.run.reporting import RunOutcome
from harness.run.runner import run_benchmark
from harness.run.trials import FIRST, stage_trial
from harness.run.workspace import Workspace

COMPUTE_REPORT_NAME = "compute.json"


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
        #: The ``read_once`` floor of each acquisition's resident data (floors.read_once).
        self.floors: dict[str, dict[str, dict | None]] = {}
        #: ``--fresh-process``: the fresh-process cells, ours and the peers' (first_call).
        self.first_calls: list[dict] = []
        self.peer_versions: dict[str, str | None] = {}

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
        self.profile = check_config(self.config)
        self.memory = MemoryTracker(self.profile)
        if self.config.fresh_processes:
            self.peer_versions = peer_versions(self.config.peer_python)

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
        if cfg.fresh_processes:  # before this process loads the file or starts numba
            self.first_calls += measure_first_calls(
                self.log, selected.id, selected.master_path, cfg.backend,
                cfg.fresh_processes, cfg.peer_python, self.peer_versions,
            )  # fmt: skip
        path, fmt = selected.master_path, cfg.source_format
        if fmt == "qem":  # untimed, before the rounds; its size is recorded
            path = workspace.folder / f"{selected.id}.qem"
            write_qem_untimed(selected.master_path, path, workspace.index_dir, cfg.qem_version)
            entry["qem_bytes"] = path.stat().st_size
        load_options = {"representation": "encoded"} if cfg.representation == "encoded" else {}
        cells = [Cell(selected.id, fmt, name) for name, _ in stages]
        state_holder: dict = {}

        def one(cell: Cell, index: int) -> None:
            # A round is the whole workload; the loop's cells are its stages in order.
            name = cell.cache_state
            if name == stages[0][0]:
                self._close(state_holder)
                state_holder.clear()
                state_holder.update(
                    path=str(path),
                    load_options=load_options,
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
            self.trials.append(stage_trial(selected.id, fmt, name, index, seconds))
            if name == stages[-1][0]:
                self.memory.sample(state_holder.get("acq"))
                self._finish_round(selected, entry, state_holder, index)
                if index == cfg.reps:  # after the last round, while the data is resident
                    self.floors[selected.id] = measure_stage_floors(
                        self.workload.floors, self.workload.masks, state_holder, cfg.backend,
                        barrier,
                    )  # fmt: skip

        try:
            TrialLoop(workspace, one).run(cells, cfg.reps + 1)
        finally:
            self._close(state_holder)

    def _finish_round(self, selected, entry: dict, state: dict, index: int) -> None:
        outputs = {name: as_host(a) for name, a in self.workload.outputs(state).items()}
        digests = {name: output_digest(a) for name, a in outputs.items()}
        if index == 0:
            entry["outputs"] = digests
            entry["fitted"] = jsonable(self.workload.fitted(state))
            if self.config.save_outputs is not None:
                folder = self.config.save_outputs
                if self._n_acquisitions > 1:
                    folder = folder / selected.id
                save_outputs(
                    folder, self.workload.name, selected.id, outputs, entry, self.config.parameters
                )
            return
        check_deterministic(self.log, selected.id, entry, digests, index)

    _n_acquisitions = 1

    @staticmethod
    def _close(state: dict) -> None:
        for close in reversed(state.get("on_close", [])):
            close()
        state.pop("on_close", None)

    def judge_hook(self, doc: dict, baseline) -> None:
        """Output hashes against a same-backend, same-device baseline (module docstring)."""
        judge_output_change(doc, baseline, self.config.accept_output_change)

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
                "format": self.config.source_format,
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
                "representation": cfg.representation,
                "source_format": cfg.source_format,
                "qem_version": cfg.qem_version,
                "timing_boundary": f"{cfg.backend}:stage-call (device-synchronised before and after)",
                "allocator_policy": profile.allocator_policy,
                "cache_states": [name for name, _ in self.workload.stages],
                "stages": [name for name, _ in self.workload.stages],
                "reps": cfg.reps,
                "parameters": jsonable(cfg.parameters.to_dict()),
                "calibration": cfg.parameters.calibration().to_dict(),
                "instrumentation": instrumentation_state(),
            },
            "acquisitions": self.acquisitions,
            "trials": self.trials,
            "summaries": with_ratios(self.summaries(), self.floors),
            "floors": {
                "version": FLOORS_VERSION,
                # the whole data's pass (one per acquisition), and the masked stages' own
                "read_once": {
                    acq: next((f for f in stages.values() if f and f["method"] == READ_ONCE), None)
                    for acq, stages in self.floors.items()
                },
                "mask_lines": {
                    acq: {k: f for k, f in stages.items() if f and f["method"] == MASK_LINES}
                    for acq, stages in self.floors.items()
                },
            },
            "output_change": {
                "accepted": bool(cfg.accept_output_change),
                "changed": [],
            },
            "memory": self.memory.section(),
            **(
                {
                    "first_call": first_call_section(
                        self.first_calls, cfg.peer_python, self.peer_versions
                    )
                }
                if cfg.fresh_processes
                else {}
            ),
        }

    def execute(self) -> RunOutcome:
        return run_benchmark(self)


def run_compute(config: ComputeConfig) -> RunOutcome:
    """Run a compute workload as configured (module docstring)."""
    return ComputeRun(config).execute()


__all__ = ["COMPUTE_REPORT_NAME", "ComputeRun", "run_compute"]
