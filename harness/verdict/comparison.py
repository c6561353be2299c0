"""Comparing a candidate report with an explicitly named baseline.

The verdict is computed here, as a :class:`Verdict`; templates only display it.
Rules (issue 6, "Comparison"; issue 11 and docs/verdicts.md for the cells):

1. A candidate whose execution, correctness or source stability failed is
   ``FAILED`` (exit 1), whatever its timings.
2. Otherwise the two reports must be comparable: every field of
   :data:`harness.comparability.COMPARABILITY_FIELDS` equal, the same measured
   cells (cells with kept trials), and a baseline that is itself valid evidence.
   If not: ``INCOMPARABLE`` (exit 2) with the differences field by field.
3. Otherwise each cell (acquisition, format, cache state) gets a
   :class:`~harness.verdict.cells.CellVerdict`: a cell whose median is slower by more
   than ``regression_percent`` (the documented review trigger) is ``slower`` when the
   slowdown is significant after Holm correction over the cells (against this host's
   calibrated A/A noise when a calibration matches, else Mann-Whitney U), else
   ``possibly_slower``; either makes the verdict ``REVIEW`` (exit 2), else ``PASS``
   (exit 0). ``faster`` and ``unchanged`` are stated too.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.comparability import FieldDifference, collect_differences
from harness.errors import EXIT_FAILURE, EXIT_OK, EXIT_REVIEW
from harness.verdict import delays
from harness.verdict.calibration import CalibratedNull
from harness.verdict.cells import DEFAULT_ALPHA, CellComparison, CellVerdict, decide_cells

DEFAULT_REGRESSION_PERCENT = 20.0
#: Family-wise significance level of the cell verdicts (Holm over the cells).
SIGNIFICANCE_LEVEL = DEFAULT_ALPHA

__all__ = [
    "DEFAULT_REGRESSION_PERCENT",
    "SIGNIFICANCE_LEVEL",
    "CalibrationUse",
    "CellComparison",
    "CellVerdict",
    "Comparison",
    "Verdict",
    "cell_to_dict",
    "collect_cells",
    "compare_loaded",
    "compare_reports",
    "flagged_for_recheck",
]

CellKey = tuple[str, str, str]


class Verdict(enum.Enum):
    """Outcome of a comparison; ``exit_code`` is what ``harness compare`` exits with."""

    PASS = "pass"
    REVIEW = "review"
    INCOMPARABLE = "incomparable"
    FAILED = "failed"

    @property
    def exit_code(self) -> int:
        return {
            Verdict.PASS: EXIT_OK,
            Verdict.REVIEW: EXIT_REVIEW,
            Verdict.INCOMPARABLE: EXIT_REVIEW,
            Verdict.FAILED: EXIT_FAILURE,
        }[self]


@dataclass(frozen=True)
class CalibrationUse:
    """Which calibration a comparison used (or why none): shown with every verdict."""

    sha256: str | None
    runs: int = 0
    reps: int = 0
    created_utc: str | None = None
    note: str = ""
    null: CalibratedNull | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "sha256": self.sha256,
            "runs": self.runs,
            "reps": self.reps,
            "created_utc": self.created_utc,
            "note": self.note,
        }


@dataclass
class Comparison:
    """Everything ``harness compare`` reports; ``verdict`` decides the exit code."""

    verdict: Verdict
    regression_percent: float
    baseline_sha256: str | None = None
    baseline_path: str | None = None
    candidate_sha256: str | None = None
    candidate_path: str | None = None
    differences: list[FieldDifference] = field(default_factory=list)
    cells: list[CellComparison] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    alpha: float = DEFAULT_ALPHA
    calibration: CalibrationUse | None = None

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    @property
    def flagged_cells(self) -> list[CellComparison]:
        return [cell for cell in self.cells if cell.flagged]

    @property
    def recheck_cells(self) -> list[CellComparison]:
        """The cells a recheck measures again: flagged or undecided."""
        return [cell for cell in self.cells if cell.verdict.needs_recheck]

    @property
    def performance_status(self) -> str:
        """The report's ``status.performance`` value for this comparison."""
        if self.verdict is Verdict.FAILED:
            if self.differences:
                return "incomparable"
            return "review" if self.flagged_cells else "pass"
        return self.verdict.value

    @property
    def faster_cells(self) -> list[CellComparison]:
        return [cell for cell in self.cells if cell.verdict is CellVerdict.FASTER]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``harness compare --format json``; docs/verdicts.md)."""
        return {
            "verdict": self.verdict.value,
            "exit_code": self.exit_code,
            "regression_percent": self.regression_percent,
            "alpha": self.alpha,
            "baseline_sha256": self.baseline_sha256,
            "baseline_path": self.baseline_path,
            "candidate_sha256": self.candidate_sha256,
            "candidate_path": self.candidate_path,
            "calibration": self.calibration.to_dict() if self.calibration else None,
            "differences": [asdict(d) for d in self.differences],
            "failures": list(self.failures),
            "warnings": list(self.warnings),
            "cells": [cell_to_dict(cell) for cell in self.cells],
        }


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON (and the report schema) has no NaN or infinity
    return value


def cell_to_dict(cell: CellComparison) -> dict[str, Any]:
    """One cell as JSON: the issue's fields first, then the context."""
    raw = {
        "acquisition": cell.acquisition,
        "format": cell.format,
        "cache_state": cell.cache_state,
        "verdict": cell.verdict.value,
        "change_percent": cell.change_percent,
        "estimator": cell.estimator,
        "ci_percent": list(cell.ci_percent),
        "p_value": cell.p_value,
        "p_adjusted": cell.p_adjusted,
        "p_method": cell.p_method,
        "holm_family": cell.holm_family,
        "n_baseline": cell.n_baseline,
        "n_candidate": cell.n_candidate,
        "baseline_median": cell.baseline_median,
        "candidate_median": cell.candidate_median,
        "baseline_spread": cell.baseline_spread,
        "candidate_spread": cell.candidate_spread,
        "noise_floor_percent": cell.noise_floor_percent,
        "mdc_percent": cell.mdc_percent,
        "flag_mdc_percent": cell.flag_mdc_percent,
        "notes": list(cell.notes),
        "recheck": dict(cell.recheck) if cell.recheck else None,
    }
    raw["ci_percent"] = [_finite(v) for v in raw["ci_percent"]]
    return {key: _finite(value) for key, value in raw.items()}


def collect_cells(doc: Mapping[str, Any]) -> dict[CellKey, list[float]]:
    """Kept trial seconds per cell; cells without a kept trial are left out."""
    cells: dict[CellKey, list[float]] = {}
    for trial in doc["trials"]:
        if trial["kept"]:
            key = (trial["acquisition"], trial["format"], trial["cache_state"])
            cells.setdefault(key, []).append(float(trial["seconds"]))
    return cells


def _candidate_failures(doc: Mapping[str, Any]) -> list[str]:
    status = doc["status"]
    failures = []
    if status["execution"] != "completed":
        failures.append("execution failed")
    if status["correctness"] != "passed":
        failures.append("correctness failed")
    if status["source_stability"] != "stable":
        failures.append("source changed during the run")
    return failures + [f for f in status["failures"] if f not in failures]


def output_changes(baseline_doc: Mapping[str, Any], candidate_doc: Mapping[str, Any]) -> list[str]:
    """Compute reports only: outputs whose SHA-256 differs from a same-backend, same-device baseline.

    Compute outputs are deterministic per backend and device (docs/compute.md), so a
    different hash there means the candidate computes something else. Across backends
    or devices hashes are not expected to match (tolerance checks, reported apart), and
    nothing is listed.
    """
    if "compute" not in (baseline_doc.get("schema") or "") or "compute" not in (
        candidate_doc.get("schema") or ""
    ):
        return []
    base_device = baseline_doc["environment"]["device"]
    cand_device = candidate_doc["environment"]["device"]
    if (
        baseline_doc["conditions"]["backend"] != candidate_doc["conditions"]["backend"]
        or base_device["name"] != cand_device["name"]
        or base_device["uuid"] != cand_device["uuid"]
    ):
        return []
    before = {a["id"]: a["outputs"] for a in baseline_doc["acquisitions"]}
    changed = []
    for acquisition in candidate_doc["acquisitions"]:
        old = before.get(acquisition["id"], {})
        for name, digest in sorted(acquisition["outputs"].items()):
            if name in old and old[name] != digest:
                changed.append(f"{acquisition['id']}/{name}")
    return changed


def _apply_output_rule(
    comparison: Comparison,
    baseline_doc: Mapping[str, Any],
    candidate_doc: Mapping[str, Any],
    accept: bool,
) -> None:
    """Compute reports: changed output hashes fail the candidate (``outputs_changed``)
    unless accepted here (``--accept-output-change``) or recorded as accepted by its run."""
    if accept and candidate_doc["status"]["correctness"] == "outputs_changed":
        # The run recorded the change as its failure; the user accepts it here, explicitly.
        comparison.failures = [
            f
            for f in comparison.failures
            if f != "correctness failed" and not f.startswith("outputs_changed")
        ]
    changed = output_changes(baseline_doc, candidate_doc)
    if not changed:
        return
    recorded = (candidate_doc.get("output_change") or {}).get("accepted", False)
    listing = ", ".join(changed)
    if accept or recorded:
        how = "recorded in the candidate" if recorded else "--accept-output-change"
        comparison.warnings.append(f"outputs changed, accepted ({how}): {listing}")
    elif not any(f.startswith("outputs_changed") for f in comparison.failures):
        comparison.failures.append(f"outputs_changed: {listing}")


def compare_reports(
    baseline_doc: Mapping[str, Any],
    candidate_doc: Mapping[str, Any],
    regression_percent: float = DEFAULT_REGRESSION_PERCENT,
    *,
    baseline_sha256: str | None = None,
    baseline_path: str | None = None,
    candidate_sha256: str | None = None,
    candidate_path: str | None = None,
    calibration: CalibrationUse | None = None,
    alpha: float = DEFAULT_ALPHA,
    recheck: Mapping[CellKey, list[float]] | None = None,
    accept_output_change: bool = False,
) -> Comparison:
    """Compare two parsed (current-version) reports; the verdict follows the module rules.

    Compute reports: output hashes that differ from a same-backend, same-device baseline
    fail the candidate with ``outputs_changed`` unless ``accept_output_change`` (or the
    candidate's run recorded the acceptance).

    ``calibration`` is the host's calibrated null to judge significance against (its
    ``null`` may be None: then the note says why none is used). ``recheck`` holds the
    recheck trials of flagged cells (kept apart from the candidate's trials).

    Raises
    ------
    ValueError
        When ``regression_percent`` is not a positive number.
    """
    if not regression_percent > 0 or regression_percent != regression_percent:
        raise ValueError(
            f"regression percent must be a positive number, not {regression_percent!r}"
        )
    comparison = Comparison(
        verdict=Verdict.PASS,
        regression_percent=float(regression_percent),
        baseline_sha256=baseline_sha256,
        baseline_path=baseline_path,
        candidate_sha256=candidate_sha256,
        candidate_path=candidate_path,
        alpha=alpha,
        calibration=calibration,
    )
    declared = candidate_doc.get("baseline") or {}
    if baseline_sha256 and declared.get("sha256") and declared["sha256"] != baseline_sha256:
        comparison.warnings.append(
            f"the candidate was run against baseline {declared['sha256']}, not {baseline_sha256}"
        )
    comparison.failures = _candidate_failures(candidate_doc)
    _apply_output_rule(comparison, baseline_doc, candidate_doc, accept_output_change)
    differences = collect_differences(baseline_doc, candidate_doc)
    baseline_failures = _candidate_failures(baseline_doc)
    if baseline_failures:
        differences.insert(
            0,
            FieldDifference(
                "baseline status (must be valid evidence)", "; ".join(baseline_failures), ""
            ),
        )
    base_cells = collect_cells(baseline_doc)
    cand_cells = collect_cells(candidate_doc)
    if set(base_cells) != set(cand_cells):
        differences.append(
            FieldDifference(
                "measured cells (acquisition, format, cache state with kept trials)",
                sorted("/".join(k) for k in base_cells),
                sorted("/".join(k) for k in cand_cells),
            )
        )
    comparison.differences = differences
    if not differences:
        paired = None
        delayed = None
        unsettled: set = set()
        if recheck is None and candidate_doc.get("recheck"):
            recheck = collect_cells(candidate_doc["recheck"])  # the report's own recheck block
            paired = _paired_trials(comparison, candidate_doc["recheck"])
            if paired is not None:
                delayed = _delayed_rounds(candidate_doc["recheck"])
                unsettled = delays.unsettled_cells(
                    candidate_doc["recheck"]["paired"]["baseline_trials"],
                    candidate_doc["recheck"]["trials"],
                    regression_percent / 100,
                )
                _say_delays(comparison, delayed)
        looks = int((candidate_doc.get("recheck") or {}).get("looks", 1)) if recheck else 1
        comparison.cells = decide_cells(
            base_cells,
            cand_cells,
            threshold_percent=regression_percent,
            alpha=alpha,
            calibration=calibration.null if calibration else None,
            recheck=recheck,
            paired=paired,
            looks=looks,
            delayed_rounds=delayed,
            contended=delays.contended_cells(baseline_doc["trials"], candidate_doc["trials"]),
            unsettled=unsettled,
        )
    if comparison.failures:
        comparison.verdict = Verdict.FAILED
    elif differences:
        comparison.verdict = Verdict.INCOMPARABLE
    elif comparison.flagged_cells:
        comparison.verdict = Verdict.REVIEW
    return comparison


def _paired_trials(
    comparison: Comparison, block: Mapping[str, Any]
) -> dict[CellKey, list[tuple[float, float]]] | None:
    """(baseline, candidate) seconds per paired round of a paired recheck, per cell, when it
    paired against this baseline: the kept trials of the same cell and trial index."""
    paired = block.get("paired")
    if not paired:
        return None
    if not (comparison.baseline_sha256 and paired["baseline_sha256"] == comparison.baseline_sha256):
        comparison.warnings.append(
            f"the paired recheck was measured against baseline {paired['baseline_sha256'][:12]}, "
            "not this one: its trials are pooled as an unpaired recheck"
        )
        return None
    return pairs_by_round(paired["baseline_trials"], block["trials"])


def _delayed_rounds(block: Mapping[str, Any]) -> dict[CellKey, int]:
    return delays.delayed_rounds(block["paired"]["baseline_trials"], block["trials"])


def _say_delays(comparison: Comparison, delayed: Mapping[CellKey, int]) -> None:
    """A warning naming the paired rounds that other work on the host delayed."""
    if delayed:
        comparison.warnings.append(
            f"paired recheck: {sum(delayed.values())} rounds had a trial that waited for other "
            "work on the host (wall time less CPU time beyond its cell's least by more than "
            f"{delays.DELAY_FRACTION * 100:g}% of its fastest): judged with that delay taken "
            "out (docs/verdicts.md, rounds delayed by other work)"
        )


def pairs_by_round(
    baseline_trials: Sequence[Mapping[str, Any]], candidate_trials: Sequence[Mapping[str, Any]]
) -> dict[CellKey, list[tuple[float, float]]]:
    """(baseline, candidate) seconds of the kept trials of the same cell and trial index,
    each side's delayed trials less their delay (:func:`delays.without_delays`)."""
    baseline_trials = delays.without_delays(baseline_trials)
    candidate_trials = delays.without_delays(candidate_trials)

    def by_round(trials: Sequence[Mapping[str, Any]]) -> dict[tuple[CellKey, int], float]:
        return {
            ((t["acquisition"], t["format"], t["cache_state"]), int(t["trial_index"])): float(
                t["seconds"]
            )
            for t in trials
            if t.get("kept")
        }

    base, cand = by_round(baseline_trials), by_round(candidate_trials)
    pairs: dict[CellKey, list[tuple[float, float]]] = {}
    for (key, index), seconds in sorted(cand.items()):
        if (key, index) in base:
            pairs.setdefault(key, []).append((base[key, index], seconds))
    return pairs


def flagged_for_recheck(
    baseline_doc: Mapping[str, Any],
    trials: list[Mapping[str, Any]],
    regression_percent: float,
    *,
    calibration: CalibrationUse | None = None,
    alpha: float = DEFAULT_ALPHA,
) -> list[CellKey]:
    """The cells a recheck measures again: flagged, or undecided, by the verdict on the
    trials so far.

    Only cells both runs measured are judged (an incomparable pair is never rechecked).
    """
    cells = _decide_run(baseline_doc, trials, regression_percent, calibration, alpha)
    return [cell.key for cell in cells if cell.verdict.needs_recheck]


def _decide_run(
    baseline_doc: Mapping[str, Any],
    trials: list[Mapping[str, Any]],
    regression_percent: float,
    calibration: CalibrationUse | None,
    alpha: float,
    **recheck: Any,
) -> list[CellComparison]:
    """The cells of a run's trials so far against the baseline (none when they measured
    different cells: an incomparable pair is never rechecked); ``recheck`` goes to
    :func:`decide_cells` (its ``recheck``, ``paired`` and ``looks``)."""
    base = collect_cells(baseline_doc)
    cand = collect_cells({"trials": trials})
    if set(base) != set(cand):
        return []
    return decide_cells(
        base,
        cand,
        threshold_percent=regression_percent,
        alpha=alpha,
        calibration=calibration.null if calibration else None,
        contended=delays.contended_cells(baseline_doc["trials"], trials),
        **recheck,
    )


def undecided_after_recheck(
    baseline_doc: Mapping[str, Any],
    trials: list[Mapping[str, Any]],
    regression_percent: float,
    *,
    looks: int,
    recheck_trials: Sequence[Mapping[str, Any]] = (),
    paired_baseline_trials: Sequence[Mapping[str, Any]] | None = None,
    calibration: CalibrationUse | None = None,
    alpha: float = DEFAULT_ALPHA,
) -> list[CellKey]:
    """The rechecked cells that the recheck's trials so far neither clear nor confirm.

    ``recheck_trials`` are the candidate's recheck trials; with ``paired_baseline_trials``
    (the baseline code's, same trial indices) the recheck is paired. The verdict is the
    one the finished report will get, with its alpha split over ``looks``.
    """
    if paired_baseline_trials is not None:
        measured = {
            "paired": pairs_by_round(paired_baseline_trials, recheck_trials),
            "delayed_rounds": delays.delayed_rounds(paired_baseline_trials, recheck_trials),
            "unsettled": delays.unsettled_cells(
                paired_baseline_trials, recheck_trials, regression_percent / 100
            ),
        }
    else:
        measured = {"recheck": collect_cells({"trials": list(recheck_trials)})}
    cells = _decide_run(
        baseline_doc, trials, regression_percent, calibration, alpha, looks=looks, **measured
    )
    return [
        c.key
        for c in cells
        if c.recheck is not None
        and (
            c.verdict is CellVerdict.POSSIBLY_SLOWER
            # undecided with an interval past the threshold: more rounds narrow it (an
            # undecided cell whose stages disagree is not one more rounds can settle)
            or (c.verdict is CellVerdict.UNDECIDED and c.ci_percent[1] > regression_percent)
            # unsettled delays: fresh workers, started the other way round, measure again
            or (c.verdict is CellVerdict.UNDECIDED and c.key in measured.get("unsettled", ()))
        )
    ]


def compare_loaded(
    baseline: Any,
    candidate: Any,
    regression_percent: float = DEFAULT_REGRESSION_PERCENT,
    *,
    calibration: CalibrationUse | None = None,
    accept_output_change: bool = False,
) -> Comparison:
    """:func:`compare_reports` of two reports as looked up (anything with ``doc``,
    ``sha256`` and ``path``, e.g. :class:`harness.history.lookup.LoadedReport`)."""
    return compare_reports(
        baseline.doc,
        candidate.doc,
        regression_percent,
        baseline_sha256=baseline.sha256,
        baseline_path=str(baseline.path),
        candidate_sha256=candidate.sha256,
        candidate_path=str(candidate.path),
        calibration=calibration,
        accept_output_change=accept_output_change,
    )
