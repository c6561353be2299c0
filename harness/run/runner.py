"""The frame every benchmark kind runs in.

A run, whatever it measures (:mod:`harness.run.io_scale.kind` today, ``compute`` next):

1. the kind checks its configuration (the backend is required here, once);
2. provenance first: the source fingerprint starts;
3. the manifest is parsed and every master's SHA-256 checked before any measurement,
   and every shard file against the size and SHA-256 the manifest records (unless
   ``--no-verify-source``), once each, outside any timing;
4. the output directory is claimed (a second run into it refuses now, not after
   measuring), and the baseline is looked up in the run's history (whichever backend
   holds it) by :func:`harness.history.backend.load_reference`, the same rule as
   ``harness compare``, with the calibration to judge it against;
5. the host locks of the GPU and the storage are taken (:mod:`harness.run.host_lock`;
   held until the report is written); inside the workspace (temporary area, interrupt
   latch, progress) competing activity is sampled, the kind measures each selected
   acquisition (an execution failure ends the trials and is recorded), with
   ``--recheck K`` the flagged cells are measured K more rounds right away, and
   competing activity is sampled again;
6. the fingerprint is taken again; the kind finishes (e.g. archives reference headers
   when nothing failed) and builds its report; the report is judged against the
   baseline, written as a new file and registered into the history.

A kind is an object with the methods of :class:`BenchmarkKind`; docs/architecture.md
says how to add one.
"""

from __future__ import annotations

import contextlib
import datetime
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from harness.compare import (
    collect_cells,
    flagged_for_recheck,
    resolve_calibration,
    undecided_after_recheck,
)
from harness.errors import EXIT_FAILURE, HarnessError
from harness.history.backend import HistoryBackend, load_reference
from harness.history.store import RegistrationRenderer
from harness.report import BENCHMARK, PROTOCOL_VERSION, SCHEMA_NAME, SCHEMA_VERSION
from harness.run.checks import FailureLog
from harness.run.contention import collect_contention_sample, contention_section
from harness.run.environment import collect_environment
from harness.run.host_lock import host_locks, resources_for
from harness.run.manifest import (
    SelectedAcquisition,
    check_master_hashes,
    check_source_files,
    parse_manifest,
)
from harness.run.paired.coordinator import Pairing
from harness.run.paired.pairing import PairingChoice, choose_baseline_code
from harness.run.provenance import SourceTracker
from harness.run.registration import register_measured
from harness.run.reporting import REPORT_NAME, RunOutcome, judge, status_section, write_report
from harness.run.workspace import Workspace, claim_output_dir, open_workspace
from quantem.stem4d.errors import QuantemError

#: Errors that end the trials as an execution failure (recorded in the report) rather
#: than ending the run: bad data (QuantemError), IO, value and runtime errors.
EXECUTION_ERRORS = (HarnessError, OSError, ValueError, RuntimeError, QuantemError)


class RunSettings(Protocol):
    """The configuration fields the frame reads (every kind's config has them)."""

    root: Path
    manifest: Path
    backend: str
    storage_id: str
    output_dir: Path
    #: the history the run reads its baseline from and registers into (None: none)
    history: HistoryBackend | None
    baseline: str | None
    regression_percent: float
    calibration: str | None
    recheck: int
    lock_dir: Path | None
    lock_timeout: float
    command: object
    progress: bool | None
    on_event: object
    render: RegistrationRenderer | None


class BenchmarkKind(Protocol):
    """What a benchmark kind supplies to :func:`run_benchmark`."""

    config: RunSettings
    log: FailureLog
    #: Shown beside the progress bar.
    title: str

    def check_config(self) -> None:
        """Raise UsageError for a bad configuration; require the backend (once)."""

    def total_trials(self, n_acquisitions: int) -> int:
        """How many trials the progress bar counts."""

    def measure(self, selected: SelectedAcquisition, workspace: Workspace) -> None:
        """Measure one acquisition (its files live in ``workspace.folder``)."""

    def recheck_cells(
        self, workspace: Workspace, cells: list, rounds: int, looks: int = 1, undecided=None
    ) -> list[dict]:
        """Measure ``cells`` (keys) ``rounds`` more times, interleaved, in up to ``looks``
        batches (after each, only ``undecided(trials so far)``); return those trials."""

    def after_trials(self, workspace: Workspace) -> None:
        """Work that needs the temporary files, after every acquisition was measured."""

    def finish(self, trustworthy: bool) -> None:
        """After the workspace is gone; ``trustworthy``: stable source, nothing failed."""

    def build_report(self, head: dict) -> dict:
        """The report: ``head`` (schema fields, status, provenance, environment) plus results."""


def run_benchmark(kind: BenchmarkKind) -> RunOutcome:
    """Run ``kind`` in the frame described in the module docstring."""
    cfg = kind.config
    kind.check_config()
    tracker = SourceTracker().start()
    manifest = parse_manifest(cfg.manifest, cfg.root)
    check_master_hashes(manifest)
    source_check = collect_source_check(cfg, manifest)
    with claim_output_dir(cfg.output_dir, getattr(kind, "report_name", REPORT_NAME)):
        baseline = load_reference(cfg.history, cfg.baseline) if cfg.baseline else None
        calibration = (
            resolve_calibration(cfg.history, cfg.calibration, baseline.doc)
            if baseline is not None
            else None
        )
        environment = collect_environment(cfg.backend, cfg.root, cfg.storage_id)
        resources = resources_for([environment["device"].get("uuid")], cfg.storage_id)
        locks = host_locks(
            resources,
            lock_dir=cfg.lock_dir,
            timeout=cfg.lock_timeout,
            command=[str(a) for a in cfg.command],
            on_wait=say_waiting,
        )
        with _pairing(kind, baseline, tracker) as (pairing, choice), locks:
            outcome = _measure_and_report(
                kind,
                manifest,
                tracker,
                baseline,
                calibration,
                environment,
                pairing,
                choice,
                source_check,
            )
    registered = (
        register_measured(cfg.history, outcome.report_path, render=cfg.render)
        if cfg.history is not None
        else []
    )
    outcome.registered = registered
    return outcome


@contextlib.contextmanager
def _pairing(
    kind, baseline, tracker: SourceTracker
) -> Iterator[tuple[Pairing | None, PairingChoice | None]]:
    """With ``--recheck``: whether it pairs and the baseline's code, chosen before anything
    is measured (:mod:`harness.run.paired.pairing`); (None, None) for a kind that cannot pair."""
    cfg = kind.config
    if not hasattr(cfg, "paired") or baseline is None or cfg.recheck <= 0:
        yield None, None
        return
    assert tracker.checkout is not None and tracker.start_fingerprint is not None
    with choose_baseline_code(
        baseline.doc,
        baseline.sha256,
        paired=cfg.paired,
        tree=cfg.baseline_tree,
        checkout=tracker.checkout,
        fingerprint=tracker.start_fingerprint,
        in_process=kind.profile.in_process,  # a kind with `paired` is io-scale
    ) as (code, choice):
        pairing = (
            Pairing(baseline, code, tracker.checkout, tracker.start_fingerprint)
            if code is not None
            else None
        )
        yield pairing, choice


def say_waiting(resource, holder: str) -> None:
    """Tell the user (stderr) which run holds the GPU or storage this one waits for."""
    print(
        f"harness: waiting for {resource.kind} {resource.identifier!r}, in use by {holder}",
        file=sys.stderr,
    )


def collect_source_check(cfg, manifest) -> dict:
    """The report's ``source_check``: the manifest's files checked now, once each, outside
    any timing (unless ``--no-verify-source``), and whether every load checks its chunks.

    ``cfg.verify_source`` (io-scale, recheck: resolved by the kind's check_config) says
    whether each HDF5 load checks its chunks; a kind without it (compute) loads with
    io.load's default (on for the cpu loader; the cuda loader's default is off).
    """
    from quantem.stem4d.io.arina import VERIFY_SOURCE_DEFAULT

    verify = getattr(cfg, "verify_source", None)
    check_files = getattr(cfg, "check_source_files", True)
    files = check_source_files(manifest) if check_files else {"state": "off"}
    return {
        "manifest_files": files,
        "chunk_checksums": (
            VERIFY_SOURCE_DEFAULT and cfg.backend == "cpu" if verify is None else bool(verify)
        ),
    }


def _measure_and_report(
    kind,
    manifest,
    tracker,
    baseline,
    calibration,
    environment,
    pairing=None,
    choice=None,
    source_check=None,
) -> RunOutcome:
    """Steps 5 and 6 of the module docstring, with the host locks held."""
    cfg, log = kind.config, kind.log
    created = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    gpu = environment["device"].get("kind") == "gpu"
    uuid = environment["device"].get("uuid")
    rechecked: list[dict] = []
    flagged: list = []
    paired: dict | None = None
    with open_workspace(
        cfg.output_dir,
        title=kind.title,
        total=kind.total_trials(len(manifest.acquisitions)),
        show_progress=cfg.progress,
        on_event=cfg.on_event,
    ) as workspace:
        before = collect_contention_sample(gpu_uuid=uuid, gpu=gpu)
        for selected in manifest.acquisitions:
            try:
                kind.measure(selected, workspace)
            except EXECUTION_ERRORS as exc:
                if isinstance(exc, HarnessError) and exc.exit_code != EXIT_FAILURE:
                    raise
                log.execution(f"{selected.id}: {type(exc).__name__}: {exc}")
                break
        if baseline is not None and cfg.recheck > 0 and not log.failed:
            # flagged cells are measured again right away, in this process, interleaved
            flagged = flagged_for_recheck(
                baseline.doc,
                kind.trials,
                cfg.regression_percent,
                calibration=calibration,
            )
            if flagged:
                workspace.progress.add_total(len(flagged) * cfg.recheck)
                looks = getattr(cfg, "recheck_looks", 1)

                def undecided(candidate_trials, baseline_trials=None):
                    cells = undecided_after_recheck(
                        baseline.doc,
                        kind.trials,
                        cfg.regression_percent,
                        looks=looks,
                        recheck_trials=candidate_trials,
                        paired_baseline_trials=baseline_trials,
                        calibration=calibration,
                    )
                    workspace.progress.add_total(len(cells) * cfg.recheck)
                    return cells

                if pairing is not None:
                    rechecked, paired = kind.paired_recheck_cells(
                        workspace,
                        flagged,
                        cfg.recheck,
                        pairing,
                        looks=looks,
                        undecided=lambda base, cand: undecided(cand, base),
                    )
                else:
                    rechecked = kind.recheck_cells(
                        workspace, flagged, cfg.recheck, looks=looks, undecided=undecided
                    )
        after = collect_contention_sample(gpu_uuid=uuid, gpu=gpu)
        kind.after_trials(workspace)
    provenance, stable = finish_provenance(tracker, log)
    kind.finish(stable and not log.failed)
    contention = contention_section(before, after)
    status = status_section(log, stable)
    status["host_load"] = "contended" if contention["contended"] else "quiet"
    head = {
        "schema": SCHEMA_NAME,
        "schema_version": SCHEMA_VERSION,
        "protocol_version": PROTOCOL_VERSION,
        "benchmark": BENCHMARK,
        "created_utc": created,
        "command": [str(a) for a in cfg.command],
        "status": status,
        "baseline": None,
        "provenance": provenance,
        "environment": environment,
        "contention": contention,
    }
    if source_check is not None:
        head["source_check"] = source_check
    if getattr(cfg, "purpose", None):
        head["purpose"] = dict(cfg.purpose)
    # A kind with its own report schema names it (compute); io-scale keeps the default.
    head.update(getattr(kind, "report_head", {}))
    doc = kind.build_report(head)
    recheck = None
    if flagged:
        doc["recheck"] = recheck_block(cfg.recheck, flagged, rechecked)
        doc["recheck"]["looks"] = getattr(cfg, "recheck_looks", 1)
        if choice is not None:
            doc["recheck"]["pairing"] = choice.to_dict()
        if paired is not None:
            doc["recheck"]["paired"] = paired  # judged from the block, as `compare` reads it
        else:
            recheck = collect_cells({"trials": rechecked})
    exit_code = judge(
        doc,
        baseline,
        cfg.regression_percent,
        calibration=calibration,
        recheck=recheck,
        hook=getattr(kind, "judge_hook", None),
    )
    report_path = write_report(doc, cfg.output_dir, getattr(kind, "report_name", REPORT_NAME))
    return RunOutcome(doc, report_path, exit_code)


def finish_provenance(tracker: SourceTracker, log: FailureLog) -> tuple[dict, bool]:
    """The fingerprint taken again; a change during the measurements is logged as a failure."""
    provenance, stable = tracker.finish()
    if not stable:
        changed = ", ".join(tracker.changed_files[:10]) or "a module imported from elsewhere"
        log.other(
            "source-stability: the measured source changed during the run "
            f"(fingerprint {provenance['source_fingerprint_start'][:12]} -> "
            f"{provenance['source_fingerprint_end'][:12]}; changed: {changed})"
        )
    return provenance, stable


def recheck_block(rounds: int, cells: list, trials: list[dict]) -> dict:
    """The report's ``recheck`` block: the rechecked cells and their trials, kept apart."""
    return {"rounds": rounds, "cells": [list(key) for key in cells], "trials": trials}
