"""``harness run io-scale``: cold and cached loads of HDF5 and QEM, verified.

Per acquisition, in order (docs/io-scale.md explains each step and why): a first
HDF5 observation with a fresh, disposable frame index; QEM preparation (timed as the
conversion workflow unless ``--load-only``) and the reference-header check; a first
QEM observation; ``reps`` rounds of cold and cached loads of every format of the
backend, interleaved (so drift hits all cells alike), each followed, outside the
timing, by the indexed product; optional cold reloads and one profiled reload.

This module is the io-scale *kind* (:class:`harness.run.runner.BenchmarkKind`): its
order of steps and its report body. Its configuration and the checks of it are
:mod:`harness.run.io_scale.config`; the frame around it (provenance, manifest,
output-dir claim, baseline, workspace, writing and registering) is
:mod:`harness.run.runner`; the steps are :mod:`harness.run.io_scale.steps`; what the backend
means is :mod:`harness.run.backends`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from harness.errors import HarnessError, IncomparableError
from harness.report import summarise_trials
from harness.run import trials
from harness.run.backends import BackendProfile, LoadSettings, describe_devices
from harness.run.checks import (
    Expected,
    FailureLog,
    check_products_consistent,
    check_products_match,
)
from harness.run.checks import python_sample_hashes as reference_sample_hashes
from harness.run.floors.cells import IoScaleFloors
from harness.run.fresh.process import fresh_cells
from harness.run.instrumentation import instrumentation_state
from harness.run.io_scale import conversion
from harness.run.io_scale import steps as io_steps
from harness.run.io_scale.config import IoScaleConfig, check_config
from harness.run.io_scale.conversion import ConversionSettings
from harness.run.io_scale.steps import AcquisitionState, TrialContext
from harness.run.loop import Cell, TrialLoop
from harness.run.manifest import SelectedAcquisition
from harness.run.memory import MemoryTracker
from harness.run.paired.coordinator import (
    Pairing,
    candidate_products,
    check_workers,
    paired_recheck,
)
from harness.run.reporting import RunOutcome
from harness.run.runner import run_benchmark
from harness.run.workspace import Workspace

CACHE_STATES = (trials.COLD, trials.CACHED)

__all__ = ["IoScaleRun", "run_io_scale"]


class IoScaleRun:
    """The io-scale kind; :meth:`execute` runs it in the frame and returns a :class:`RunOutcome`."""

    title = "io-scale trials"

    def __init__(self, config: IoScaleConfig) -> None:
        self.config = config
        self.log = FailureLog()
        self.profile: BackendProfile | None = None  # set by check_config
        self.states: list[AcquisitionState] = []
        self.trials: list[dict] = []
        self.cold_reload_runs: list[dict] = []
        self.conversions: list[dict] = []
        self.profiled: dict | None = None
        self.memory: MemoryTracker | None = None
        self._headers: dict[str, dict] = {}
        self.floors: IoScaleFloors | None = None  # --floors (set by check_config)
        self.first_loads: list[dict] = []  # --fresh-process

    # -- BenchmarkKind ---------------------------------------------------------------
    def check_config(self) -> None:
        self.profile = check_config(self.config)
        self.memory = MemoryTracker(self.profile)
        if self.config.floors:
            self.floors = IoScaleFloors(
                self.config.backend, self.config.representation, threads=self.config.threads
            )

    def total_trials(self, n_acquisitions: int) -> int:
        return n_acquisitions * self.config.reps * len(self.profile.formats) * len(CACHE_STATES)

    def context(self, workspace: Workspace) -> TrialContext:
        cfg = self.config
        settings = LoadSettings(
            index_dir=workspace.index_dir,
            threads=cfg.threads,
            representation=cfg.representation,
            fresh_index=cfg.fresh_index,
            devices=self.profile.devices,
            verify_source=cfg.verify_source,
        )
        return TrialContext(
            self.profile, settings, self.log, self.memory, workspace, cfg.native_binary
        )

    def measure(self, selected: SelectedAcquisition, workspace: Workspace) -> None:
        cfg, ctx = self.config, self.context(workspace)
        state = self.prepare(selected, workspace)
        if state is None:
            return
        self.measure_cells(ctx, self.cells_of(state), cfg.reps, floors=self.floors)
        if self.floors is not None:
            self.floors.after_acquisition(state, self.profile.formats, self.trials)
        if cfg.fresh_processes and self.profile.in_process:
            self.first_loads += fresh_cells(ctx, state, cfg.fresh_processes)
        if self.profile.in_process:
            self.cold_reload_runs += io_steps.cold_reloads(ctx, state, cfg.cold_reloads)
            if cfg.profile_reload:
                self.profiled = io_steps.profiled_reload(ctx, state)

    def prepare(
        self, selected: SelectedAcquisition, workspace: Workspace
    ) -> AcquisitionState | None:
        """Everything before the trials of one acquisition; None when its QEM is wrong.

        Sources resolved, the first HDF5 observation (it builds the frame index), the
        disposable QEM written and checked, the first QEM observation. ``harness recheck``
        prepares an earlier report's acquisitions with this before its rounds.
        """
        ctx = self.context(workspace)
        state = AcquisitionState(selected, Expected(selected))
        self.states.append(state)
        io_steps.resolve_sources(ctx, state)
        io_steps.first_observation(ctx, state)
        workspace.event("first-observation", acquisition=selected.id)
        if not self.prepare_qem(ctx, state):
            return None
        if self.profile.in_process:
            io_steps.qem_first_observation(ctx, state)
        else:
            state.python_sample_hashes = reference_sample_hashes(
                self.log, state.expected, state.qem_path
            )
        return state

    def cells_of(self, state: AcquisitionState) -> list[Cell]:
        """The acquisition's cells in trial order (formats of the backend x cache states)."""
        acquisition = state.selected.id
        return [Cell(acquisition, f, c) for f in self.profile.formats for c in CACHE_STATES]

    def measure_cells(
        self, ctx: TrialContext, cells: Sequence[Cell], rounds: int, first_index: int = 0,
        floors: IoScaleFloors | None = None,
    ) -> int:  # fmt: skip
        """Measure ``cells`` (prepared acquisitions) for ``rounds`` interleaved rounds.

        The main trials are ``measure_cells(ctx, cells_of(state), reps)``; a recheck is
        the same call with a subset of cells and ``first_index=reps`` (docs/architecture.md).
        With ``floors``, each cold trial has its cold floor read beside it (harness.run.floors.cells).
        """
        by_id = {s.selected.id: s for s in self.states}

        def one(cell: Cell, index: int) -> None:
            state, fmt, cache_state = by_id[cell.acquisition], cell.format, cell.cache_state
            trial = lambda: self.trials.append(  # noqa: E731
                io_steps.run_trial(ctx, state, fmt, cache_state, index)
            )
            floors.around_trial(state, fmt, cache_state, index, trial) if floors else trial()

        return TrialLoop(ctx.workspace, one).run(cells, rounds, first_index)

    def recheck_cells(
        self,
        workspace: Workspace,
        cells: Sequence,
        rounds: int,
        looks: int = 1,
        undecided: Callable[[list[dict]], Sequence] | None = None,
    ) -> list[dict]:
        """Measure ``cells`` ``rounds`` more rounds (indices after the main ones); kept apart.

        Up to ``looks`` batches: after each but the last, ``undecided(trials so far)`` names
        the cells still measured (a sequential recheck, harness.run.paired.workers).
        """
        ctx = self.context(workspace)
        first = len(self.trials)
        index = self.config.reps
        active = list(cells)
        try:
            for look in range(looks):
                self.measure_cells(ctx, [Cell(*key) for key in active], rounds, first_index=index)
                index += rounds
                if look + 1 == looks or undecided is None:
                    break
                active = list(undecided(self.trials[first:]))
                if not active:
                    break
            return self.trials[first:]
        finally:
            del self.trials[first:]  # the recheck is its own block, never mixed into the trials

    def paired_recheck_cells(
        self,
        workspace: Workspace,
        cells: Sequence,
        rounds: int,
        pairing: Pairing,
        looks: int = 1,
        undecided: Callable[[list[dict], list[dict]], Sequence] | None = None,
    ) -> tuple[list[dict], dict | None]:
        """``--paired``: ``cells`` with the baseline's code and this run's, alternately.

        Returns this code's trials and the ``recheck.paired`` block (None when a worker
        failed: that is an execution failure of the run).
        """
        wanted = {key[0] for key in cells}
        try:
            trials_, block = paired_recheck(
                self.config,
                [s.selected.id for s in self.states if s.selected.id in wanted],
                list(cells),
                rounds,
                code=pairing.code,
                baseline_doc=pairing.baseline.doc,
                baseline_sha256=pairing.baseline.sha256,
                candidate_fingerprint=pairing.fingerprint,
                checkout=pairing.checkout,
                scratch_parent=workspace.folder,
                on_trial=workspace.progress.advance,
                looks=looks,
                undecided=undecided,
            )
        except IncomparableError:
            raise
        except HarnessError as exc:
            self.log.execution(str(exc))
            return [], None
        check_workers(self.log, block["workers"])
        check_products_match(
            self.log,
            candidate_products(block),
            {s.selected.id: s.expected.products[0] for s in self.states if s.expected.products},
            what="paired recheck",
            whose="this run's",
        )
        return trials_, block

    def prepare_qem(self, ctx: TrialContext, state: AcquisitionState) -> bool:
        """Write the disposable QEM (timed as the conversion workflow unless --load-only).

        Returns False when it differs from the manifest's reference header: nothing is
        then measured against a file known to be wrong.
        """
        cfg, selected = self.config, state.selected
        qem_path = ctx.workspace.folder / f"{selected.id}.qem"
        if cfg.load_only:
            conversion.prepare_untimed(selected, qem_path, ctx.settings.index_dir, cfg.qem_version)
        else:
            settings = ConversionSettings(
                cfg.verify, cfg.source_hashes, cfg.reloads, cfg.qem_version
            )
            record = conversion.timed_conversion(
                selected, qem_path, ctx.settings.index_dir, settings, self.log, self.profile.barrier
            )
            self.conversions.append(record)
        state.qem_path = qem_path
        state.qem_bytes = qem_path.stat().st_size
        state.expected.qem_dtype = conversion.qem_stored_dtype(qem_path)
        ctx.workspace.event("qem-prepared", acquisition=selected.id, path=str(qem_path))
        return conversion.check_reference_header(self.log, selected, qem_path)

    def after_trials(self, workspace: Workspace) -> None:
        for state in self.states:
            check_products_consistent(self.log, state.expected)
        # before the QEM files go with the workspace
        self._headers = conversion.collect_reference_headers(
            {s.selected.id: s.qem_path for s in self.states}
        )

    def finish(self, trustworthy: bool) -> None:
        if trustworthy:  # never from a failing candidate
            conversion.write_reference_headers(self.config.output_dir, self._headers)

    def build_report(self, head: dict) -> dict:
        cfg, profile = self.config, self.profile
        measured = [s for s in self.states if s.expected.shape is not None]
        kept = sum(1 for t in self.trials if t["kept"])
        conditions_devices = (
            {"devices": describe_devices(profile.devices)} if profile.devices is not None else {}
        )
        summaries = summarise_trials(self.trials)
        entries = [s.entry() for s in measured]
        floors = self.floors and self.floors.section(entries, self.trials, summaries)
        return {
            **head,
            "conditions": {
                **conditions_devices,
                "backend": cfg.backend,
                "representation": cfg.representation,
                "qem_version": cfg.qem_version,
                "timing_boundary": profile.timing_boundary,
                "allocator_policy": profile.allocator_policy,
                "compiler_cache_dir": profile.compiler_cache_dir(),
                "reps": cfg.reps,
                "load_only": cfg.load_only,
                "cache_states": list(CACHE_STATES),
                "fresh_index": cfg.fresh_index,
                "verify_source": cfg.verify_source,
                "threads": cfg.threads,
                "label_rules": trials.label_rules(),
                "instrumentation": instrumentation_state(),
            },
            "acquisitions": entries,
            "trials": self.trials,
            "label_counts": {
                "trials": len(self.trials),
                "kept_label": kept,
                "lost_label": len(self.trials) - kept,
            },
            "summaries": summaries,
            "conversion": {"acquisitions": self.conversions} if self.conversions else None,
            "cold_reload_runs": self.cold_reload_runs,
            "profile": self.profiled,
            "memory": self.memory.section(),
            **({"floors": floors} if floors else {}),
            **({"first_load": {"cells": self.first_loads}} if self.first_loads else {}),
        }

    def execute(self) -> RunOutcome:
        return run_benchmark(self)


def run_io_scale(config: IoScaleConfig) -> RunOutcome:
    """Run io-scale as configured; see the module docstring for the order of work."""
    return IoScaleRun(config).execute()
