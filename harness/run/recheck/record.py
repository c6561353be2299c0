"""The record ``harness recheck`` writes: the candidate's content plus a ``recheck`` block.

The candidate's content is copied (never rewritten on disk) and its comparison dropped
(it is judged again on original plus recheck trials); the ``recheck`` block holds the
rechecked cells and trials (and, paired, the baseline's side; whether it paired and why),
the candidate's SHA-256,
when and by which command the recheck ran, its contention samples and fingerprints;
the status takes the recheck's failures.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from harness.history.lookup import LoadedReport
from harness.run.checks import FailureLog
from harness.run.runner import recheck_block

CellKey = tuple[str, str, str]


def recheck_record(
    candidate: LoadedReport,
    *,
    rounds: int,
    looks: int = 1,
    cells: Sequence[CellKey],
    command: Sequence[str],
    measured: dict,
    created: str,
    provenance: dict,
    stable: bool,
    log: FailureLog,
) -> dict:
    """The candidate's content, a ``recheck`` block, and the status with the recheck's failures."""
    doc = copy.deepcopy(candidate.doc)
    doc.pop("comparison", None)  # judged again by the caller, on original plus recheck trials
    doc["baseline"] = None
    contention = measured["contention"]
    block = recheck_block(rounds, list(cells), measured["trials"])
    block["looks"] = looks
    if measured.get("paired"):
        block["paired"] = measured["paired"]
    if measured.get("pairing"):
        block["pairing"] = measured["pairing"]  # paired or not, and why
    if measured.get("source_check"):
        block["source_check"] = measured["source_check"]
    block.update(
        {
            "candidate_sha256": candidate.sha256,
            "created_utc": created,
            "command": [str(a) for a in command],
            "source_fingerprint_start": provenance["source_fingerprint_start"],
            "source_fingerprint_end": provenance["source_fingerprint_end"],
            "contention": contention,
        }
    )
    doc["recheck"] = block
    status = doc["status"]
    if log.execution_failed:
        status["execution"] = "failed"
    if log.correctness_failed:
        status["correctness"] = "failed"
    if not stable:
        status["source_stability"] = "changed"
    status["failures"] = [*status["failures"], *(f"recheck: {f}" for f in log.failures)]
    if contention["contended"]:
        status["host_load"] = "contended"
    return doc
