"""``harness recheck``: measure the flagged cells of an earlier report again, as a new record.

``run --baseline --recheck K`` rechecks inside the run that measured the candidate.
This is the same recheck after the fact: the candidate is a stored report, its flagged
cells are those ``harness compare`` flags against the baseline (the same verdict code),
and only those cells are measured K more rounds, interleaved, in this process, with the
io-scale kind's own preparation and trial loop (:class:`harness.run.io_scale.kind.IoScaleRun`).

What is measured must be what the candidate measured, or the pooled verdict means
nothing; so before any measurement (each refusal is an :class:`IncomparableError`,
exit 2, :mod:`harness.run.recheck.guards`):

- the source fingerprint of this checkout equals the candidate's;
- the selection manifest and every master file's SHA-256 are those the candidate names;
- host, device and storage (``guards.SAME_PLACE_FIELDS``) equal the candidate's.

The new record (:mod:`harness.run.recheck.record`) is the candidate's content (never
rewritten on disk) plus a ``recheck`` block like the in-process one, with the
candidate's SHA-256, when and by which command the recheck ran, its own contention
samples and fingerprints; the comparison is taken again on original plus recheck trials
and the record is written as a new file, then registered like any other. Host locks and
contention sampling are those of :mod:`harness.run.runner`. This module is the order of
that work and the measurement (alone or paired).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.compare import CalibrationUse, collect_cells, undecided_after_recheck
from harness.errors import EXIT_FAILURE, HarnessError, IncomparableError, ManifestError, UsageError
from harness.history.backend import HistoryBackend
from harness.history.lookup import LoadedReport
from harness.run.backends import profile_for
from harness.run.checks import check_products_match
from harness.run.contention import collect_contention_sample, contention_section
from harness.run.environment import collect_environment
from harness.run.host_lock import host_locks, resources_for
from harness.run.io_scale.config import IoScaleConfig
from harness.run.io_scale.kind import IoScaleRun
from harness.run.manifest import parse_manifest
from harness.run.paired.baseline_code import BaselineCode
from harness.run.paired.coordinator import candidate_products, check_workers, paired_recheck
from harness.run.paired.pairing import choose_baseline_code
from harness.run.provenance import SourceTracker
from harness.run.recheck.guards import (
    check_same_inputs,
    check_same_place,
    check_same_source,
    recorded_products,
)
from harness.run.recheck.record import recheck_record
from harness.run.registration import register_measured
from harness.run.reporting import REPORT_NAME, RunOutcome, judge, write_report
from harness.run.runner import (
    EXECUTION_ERRORS,
    collect_source_check,
    finish_provenance,
    say_waiting,
)
from harness.run.workspace import claim_output_dir, open_workspace, progress_bar
from harness.verdict import DEFAULT_RECHECK_LOOKS

CellKey = tuple[str, str, str]


@dataclass
class RecheckConfig:
    """A recheck of ``candidate``'s flagged ``cells``; built by ``harness.commands.recheck``."""

    candidate: LoadedReport
    baseline: LoadedReport
    calibration: CalibrationUse | None
    cells: Sequence[CellKey]
    root: Path
    manifest: Path
    output_dir: Path
    rounds: int = 5
    #: the most batches of ``rounds`` rounds (a sequential recheck, harness.run.runner)
    looks: int = DEFAULT_RECHECK_LOOKS
    regression_percent: float = 20.0
    #: the history (a :class:`~harness.history.backend.HistoryBackend`, opened by the
    #: command) the baseline is looked up in and the report registered into; None: none
    history: HistoryBackend | None = None
    native_binary: Path | None = None
    lock_dir: Path | None = None
    lock_timeout: float = 600.0
    command: Sequence[str] = ()
    progress: bool | None = None
    on_event: Callable[[str, dict], None] | None = None
    #: Measure the baseline's code too, alternately (:mod:`harness.run.paired.coordinator`): True
    #: ``--paired`` (required), False ``--no-paired``, None when its code can be had
    #: (:mod:`harness.run.paired.pairing`)
    paired: bool | None = None
    #: ``--baseline-tree``: the baseline's code (default: this checkout when it fingerprints
    #: as the baseline, else its git revision, exported)
    baseline_tree: Path | None = None
    #: Check the shard files against the manifest before measuring (False:
    #: --no-verify-source; the loads check chunks as the candidate's did, for comparability)
    check_source_files: bool = True


def kind_config(cfg: RecheckConfig) -> IoScaleConfig:
    """The io-scale configuration of the candidate's measurements (from its report)."""
    conditions = cfg.candidate.doc["conditions"]
    return IoScaleConfig(
        root=cfg.root,
        manifest=cfg.manifest,
        backend=conditions["backend"],
        storage_id=cfg.candidate.doc["environment"]["storage"]["storage_id"],
        output_dir=cfg.output_dir,
        reps=int(conditions["reps"]),  # recheck trial indices continue after the main ones
        # the QEM is prepared untimed: the conversion is not what is rechecked
        load_only=True,
        representation=conditions.get("representation", "dense"),
        qem_version=int(conditions.get("qem_version", 1)),
        fresh_index=bool(conditions.get("fresh_index", False)),
        # as the candidate measured (part of the comparison key); before 2026-12-05 a
        # record without the field did not verify
        verify_source=bool(conditions.get("verify_source", False)),
        check_source_files=cfg.check_source_files,
        threads=conditions.get("threads"),
        native_binary=cfg.native_binary,
        command=cfg.command,
        progress=cfg.progress,
        on_event=cfg.on_event,
    )


def _check_products(kind: IoScaleRun, candidate: LoadedReport) -> None:
    """The recheck's indexed products must be the candidate's (same data, same code)."""
    ours = {s.selected.id: s.expected.products[0] for s in kind.states if s.expected.products}
    check_products_match(
        kind.log, ours, recorded_products(candidate), what="recheck", whose="the candidate's"
    )


def run_recheck(cfg: RecheckConfig) -> RunOutcome:
    """Measure ``cfg.cells`` ``cfg.rounds`` more rounds; write and register the new record."""
    if cfg.rounds < 1:
        raise ValueError("a recheck needs at least one round")
    candidate = cfg.candidate
    # native and webgpu loads run outside this process (a built binary, a browser bundle)
    separate = not profile_for(candidate.doc["conditions"]["backend"]).in_process
    if separate and (cfg.paired or cfg.baseline_tree is not None):
        raise UsageError(
            "--paired needs a cpu or cuda candidate (a native or webgpu load runs this "
            "checkout's built binary or bundle, which is not the baseline's code)"
        )
    kind = IoScaleRun(kind_config(cfg))
    kind.check_config()
    tracker = SourceTracker().start()
    check_same_source(tracker, candidate)
    try:
        manifest = parse_manifest(cfg.manifest, cfg.root)
    except ManifestError as exc:
        raise IncomparableError(
            f"recheck: the inputs of candidate {candidate.sha256[:12]} are gone: {exc}"
        ) from exc
    check_same_inputs(manifest, candidate)
    source_check = collect_source_check(kind.config, manifest)
    wanted = {key[0] for key in cfg.cells}
    acquisitions = [a for a in manifest.acquisitions if a.id in wanted]
    io_cfg = kind.config
    with claim_output_dir(cfg.output_dir, REPORT_NAME):
        environment = collect_environment(io_cfg.backend, io_cfg.root, io_cfg.storage_id)
        check_same_place(environment, candidate)
        resources = resources_for([environment["device"].get("uuid")], io_cfg.storage_id)
        assert tracker.checkout is not None  # started
        with (
            choose_baseline_code(
                cfg.baseline.doc,
                cfg.baseline.sha256,
                paired=cfg.paired,
                tree=cfg.baseline_tree,
                checkout=tracker.checkout,
                fingerprint=tracker.start_fingerprint,  # the candidate's (check_same_source)
                in_process=not separate,
            ) as (code, choice),
            host_locks(
                resources,
                lock_dir=cfg.lock_dir,
                timeout=cfg.lock_timeout,
                command=[str(a) for a in cfg.command],
                on_wait=say_waiting,
            ),
        ):
            created = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            if code is not None:
                rechecked = _measure_paired(kind, cfg, acquisitions, environment, tracker, code)
            else:
                rechecked = _measure(kind, cfg, acquisitions, environment)
            rechecked["pairing"] = choice.to_dict()
            rechecked["source_check"] = source_check
            provenance, stable = finish_provenance(tracker, kind.log)
            doc = recheck_record(
                candidate,
                rounds=cfg.rounds,
                looks=cfg.looks,
                cells=cfg.cells,
                command=cfg.command,
                measured=rechecked,
                created=created,
                provenance=provenance,
                stable=stable,
                log=kind.log,
            )
            exit_code = judge(
                doc,
                cfg.baseline,
                cfg.regression_percent,
                calibration=cfg.calibration,
                # a paired block is read from the record itself, as `harness compare` reads it
                recheck=collect_cells({"trials": rechecked["trials"]}) if code is None else None,
            )
            report_path = write_report(doc, cfg.output_dir)
    outcome = RunOutcome(doc, report_path, exit_code)
    if cfg.history is not None:
        outcome.registered = register_measured(cfg.history, report_path)
    return outcome


def _undecided(cfg: RecheckConfig, candidate_trials, baseline_trials=None) -> list[CellKey]:
    """The rechecked cells the trials so far neither clear nor confirm."""
    return undecided_after_recheck(
        cfg.baseline.doc,
        cfg.candidate.doc["trials"],
        cfg.regression_percent,
        looks=cfg.looks,
        recheck_trials=candidate_trials,
        paired_baseline_trials=baseline_trials,
        calibration=cfg.calibration,
    )


def _measure(kind: IoScaleRun, cfg: RecheckConfig, acquisitions, environment: dict) -> dict:
    """Prepare the acquisitions and measure the cells, with contention sampled around it."""
    gpu = environment["device"].get("kind") == "gpu"
    uuid = environment["device"].get("uuid")
    trials: list[dict] = []
    with open_workspace(
        cfg.output_dir,
        title="recheck trials",
        total=len(cfg.cells) * cfg.rounds,
        show_progress=cfg.progress,
        on_event=cfg.on_event,
    ) as workspace:
        before = collect_contention_sample(gpu_uuid=uuid, gpu=gpu)
        prepared = True
        for selected in acquisitions:
            try:
                prepared = kind.prepare(selected, workspace) is not None and prepared
            except EXECUTION_ERRORS as exc:
                if isinstance(exc, HarnessError) and exc.exit_code != EXIT_FAILURE:
                    raise
                kind.log.execution(f"{selected.id}: {type(exc).__name__}: {exc}")
                prepared = False
                break
        if prepared and not kind.log.failed:
            try:
                trials = kind.recheck_cells(
                    workspace,
                    list(cfg.cells),
                    cfg.rounds,
                    looks=cfg.looks,
                    undecided=lambda so_far: _undecided(cfg, so_far),
                )
            except EXECUTION_ERRORS as exc:
                if isinstance(exc, HarnessError) and exc.exit_code != EXIT_FAILURE:
                    raise
                kind.log.execution(f"recheck: {type(exc).__name__}: {exc}")
        after = collect_contention_sample(gpu_uuid=uuid, gpu=gpu)
        kind.after_trials(workspace)
    _check_products(kind, cfg.candidate)
    return {"trials": trials, "contention": contention_section(before, after)}


def _measure_paired(
    kind: IoScaleRun,
    cfg: RecheckConfig,
    acquisitions,
    environment: dict,
    tracker: SourceTracker,
    code: BaselineCode,
) -> dict:
    """The flagged cells with the baseline's code and the candidate's, alternately."""
    gpu = environment["device"].get("kind") == "gpu"
    uuid = environment["device"].get("uuid")
    assert tracker.checkout is not None  # started
    trials: list[dict] = []
    block: dict = {}
    with progress_bar("paired recheck trials", len(cfg.cells) * cfg.rounds, cfg.progress) as bar:
        before = collect_contention_sample(gpu_uuid=uuid, gpu=gpu)
        try:
            trials, block = paired_recheck(
                kind.config,
                [a.id for a in acquisitions],
                list(cfg.cells),
                cfg.rounds,
                code=code,
                baseline_doc=cfg.baseline.doc,
                baseline_sha256=cfg.baseline.sha256,
                candidate_fingerprint=cfg.candidate.doc["provenance"]["source_fingerprint_end"],
                checkout=tracker.checkout,
                scratch_parent=cfg.output_dir,
                on_trial=bar.advance,
                looks=cfg.looks,
                undecided=lambda base, cand: _undecided(cfg, cand, base),
            )
        except IncomparableError:
            raise
        except HarnessError as exc:
            kind.log.execution(str(exc))
        after = collect_contention_sample(gpu_uuid=uuid, gpu=gpu)
    if block:
        check_workers(kind.log, block["workers"])
        check_products_match(
            kind.log,
            candidate_products(block),
            recorded_products(cfg.candidate),
            what="paired recheck",
            whose="the candidate's",
        )
    return {
        "trials": trials,
        "contention": contention_section(before, after),
        "paired": block or None,
    }
