"""Paired rechecks: the baseline's code and the candidate's, measured alternately, now.

A recheck of the candidate alone (``--recheck K``) samples the candidate again but
not the baseline, whose run is over. On a host whose speed wanders from one run to
the next (the 2-core development VM: a cell's median moves 15-75% between runs while
the trials of one run agree to a few per cent; docs/verdicts.md), a baseline measured
at a fast moment makes every later candidate look slower, and no recheck of the
candidate clears that. A *paired* recheck (``--paired``) measures the flagged cells
with both codes at the same moment: two worker processes
(:mod:`harness.run.paired_worker`), one running the baseline's code tree and one the
candidate's, asked in turn for one trial each (the baseline first in even rounds, the
candidate first in odd ones), so that drift hits both sides alike. The verdict of a
cell rechecked this way is taken on the paired trials alone
(:func:`harness.verdict.cells.decide_cells`).

The baseline's code is ``--baseline-tree DIR``, or the baseline's git revision
exported with ``git archive`` from the repository of this checkout (only when the
baseline ran from a clean tree). Either way the tree's source fingerprint must equal
the baseline's recorded one, and the tree must have the worker (code from before
paired rechecks cannot be paired): otherwise :class:`IncomparableError` (exit 2)
before anything is measured. The candidate's worker runs in this checkout, whose
fingerprint the callers have already checked against the candidate's.

This module is what a run or a recheck calls (:func:`paired_recheck`) and what it reads
back (the report's block, the workers' failures and products). The baseline's code is
:mod:`harness.run.paired.baseline_code`; the two workers and their alternation are
:mod:`harness.run.paired.workers`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.run.paired.baseline_code import BaselineCode, Scratch
from harness.run.paired.workers import CellKey, PairedSpec, measure_paired


@dataclass(frozen=True)
class Pairing:
    """What a run's paired recheck needs: the baseline, its code, this code's checkout."""

    baseline: Any  # harness.history.lookup.LoadedReport
    code: BaselineCode
    checkout: Path
    fingerprint: str


def paired_recheck(
    config: Any,
    acquisitions: Sequence[str],
    cells: Sequence[CellKey],
    rounds: int,
    *,
    code: BaselineCode,
    baseline_doc: dict,
    baseline_sha256: str,
    candidate_fingerprint: str,
    checkout: Path,
    scratch_parent: Path,
    on_trial: Callable[[], None] | None = None,
    looks: int = 1,
    undecided: Callable[[list[dict], list[dict]], Sequence[CellKey]] | None = None,
) -> tuple[list[dict], dict[str, Any]]:
    """The candidate's paired trials and the report's ``recheck.paired`` block.

    ``config`` is the candidate's io-scale configuration (root, manifest, backend, storage
    id, representation, fresh index, threads; ``reps`` is the first trial index). The
    workers' files go under ``scratch_parent``, on the candidate's filesystem.
    """
    spec = PairedSpec(
        root=str(Path(config.root).resolve()),
        manifest=str(Path(config.manifest).resolve()),
        backend=config.backend,
        storage_id=config.storage_id,
        representation=config.representation,
        fresh_index=bool(config.fresh_index),
        threads=config.threads,
        first_index=int(config.reps),
        acquisitions=tuple(acquisitions),
        verify_source=bool(config.verify_source),
        qem_version=int(config.qem_version),
    )
    expected = {
        "baseline": baseline_doc["provenance"]["source_fingerprint_end"],
        "candidate": candidate_fingerprint,
    }
    scratch = Scratch.create(scratch_parent)
    try:
        measured = measure_paired(
            spec,
            cells,
            rounds,
            baseline=code,
            candidate_tree=checkout,
            expected=expected,
            scratch=scratch.path,
            on_trial=on_trial,
            looks=looks,
            undecided=undecided,
        )
    finally:
        scratch.remove()
    return measured["candidate_trials"], paired_block(measured, baseline_sha256, code)


def paired_block(
    measured: dict[str, Any], baseline_sha256: str, code: BaselineCode
) -> dict[str, Any]:
    """The report's ``recheck.paired`` block (the candidate's trials are ``recheck.trials``)."""
    workers = measured["workers"]
    return {
        "baseline_sha256": baseline_sha256,
        "baseline_code": code.origin,
        "order": "alternating per cell: baseline first in even rounds, candidate first in "
        "odd; fresh workers each look, started in alternating order",
        "started_first": measured["started_first"],
        "warmup_rounds": measured["warmup_rounds"],
        "looks_done": measured["looks_done"],
        "baseline_trials": measured["baseline_trials"],
        "workers": workers,
    }


def check_workers(log: Any, workers: dict[str, Any]) -> None:
    """Each worker's failures and stability into ``log`` (a FailureLog)."""
    for side, worker in workers.items():
        for failure in worker["failures"]:
            log.execution(f"paired recheck, {side} worker: {failure}")
        if not worker["stable"]:
            log.other(f"source-stability: the {side} worker's source changed during the recheck")


def candidate_products(block: dict[str, Any]) -> dict[str, str | None]:
    """The candidate worker's indexed product per acquisition."""
    return dict(block["workers"].get("candidate", {}).get("products", {}))
