"""Building, judging and writing a run's report (``loading.json``).

The report builder takes what the steps measured and the run's status; the baseline
comparison adds ``baseline`` and ``comparison``; the exit code follows
docs/io-scale.md ("Exit codes"). A report is written as a new file (temporary name,
fsync, link, fsync of the folder) and never overwrites one; a report that fails its
own schema is kept under :data:`REJECTED_REPORT_NAME` for diagnosis, never registered.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.compare import CalibrationUse, cell_to_dict, compare_reports
from harness.errors import EXIT_FAILURE, EXIT_OK, EXIT_REVIEW, ReportValidationError
from harness.fsio import write_new
from harness.history.lookup import LoadedReport
from harness.report import dump_report
from harness.run.checks import FailureLog

REPORT_NAME = "loading.json"
#: Where a report that fails its own schema is kept for diagnosis (never registered).
REJECTED_REPORT_NAME = "loading.rejected.json"


@dataclass
class RunOutcome:
    """Result of a run: the report document, where it was written, the exit code."""

    report: dict
    report_path: Path | None
    exit_code: int
    registered: list = field(default_factory=list)


def status_section(log: FailureLog, stable: bool) -> dict:
    """``status`` before the baseline comparison (``performance`` is filled in after)."""
    return {
        "execution": "failed" if log.execution_failed else "completed",
        "correctness": "failed" if log.failed else "passed",
        "source_stability": "stable" if stable else "changed",
        "performance": "no_baseline",
        "exit_code": 0,
        "failures": list(log.failures),
    }


def compare_with_baseline(
    doc: dict,
    baseline: LoadedReport,
    regression_percent: float,
    *,
    calibration: CalibrationUse | None = None,
    recheck: dict | None = None,
) -> str:
    """Compare ``doc`` with the baseline; record both in ``doc``; return ``status.performance``.

    ``calibration`` is the host's calibrated null (docs/verdicts.md); ``recheck`` holds the
    recheck trial seconds of flagged cells, by (acquisition, format, cache state).
    """
    sha, path = baseline.sha256, str(baseline.path)
    doc["baseline"] = {"sha256": sha, "path": path, "regression_percent": regression_percent}
    comparison = compare_reports(
        baseline.doc,
        doc,
        regression_percent,
        baseline_sha256=sha,
        baseline_path=path,
        calibration=calibration,
        recheck=recheck,
    )
    doc["comparison"] = {
        "verdict": comparison.verdict.value,
        "calibration": comparison.calibration.to_dict() if comparison.calibration else None,
        "cells": [cell_to_dict(c) for c in comparison.cells],
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


def exit_code_of(status: dict, performance: str) -> int:
    if (
        status["execution"] == "failed"
        or status["correctness"] != "passed"  # "failed", or compute's "outputs_changed"
        or status["source_stability"] == "changed"
    ):
        return EXIT_FAILURE
    if performance in ("review", "incomparable"):
        return EXIT_REVIEW
    return EXIT_OK


def judge(
    doc: dict,
    baseline: LoadedReport | None,
    regression_percent: float,
    *,
    calibration: CalibrationUse | None = None,
    recheck: dict | None = None,
    hook: Callable[[dict, LoadedReport], None] | None = None,
) -> int:
    """Fill ``status.performance`` and ``status.exit_code`` (comparing when there is a baseline).

    ``hook`` (a kind's extra baseline rule: compute's output hashes) runs first and may
    mark ``status.correctness``.
    """
    performance = "no_baseline"
    if baseline is not None:
        if hook is not None:
            hook(doc, baseline)
        performance = compare_with_baseline(
            doc, baseline, regression_percent, calibration=calibration, recheck=recheck
        )
    exit_code = exit_code_of(doc["status"], performance)
    doc["status"]["performance"] = performance
    doc["status"]["exit_code"] = exit_code
    return exit_code


def write_report(doc: dict, output_dir: Path, name: str = REPORT_NAME) -> Path:
    """Validate and write ``doc`` as ``output_dir/name`` (``loading.json``); never overwrite."""
    try:
        data = dump_report(doc)
    except ReportValidationError:
        # keep what was measured for diagnosis, under a name no tool takes for evidence
        rejected = output_dir / REJECTED_REPORT_NAME
        write_new_file(rejected, (json.dumps(doc, sort_keys=True, default=str) + "\n").encode())
        raise
    report_path = output_dir / name
    write_new_file(report_path, data)
    return report_path


def write_new_file(path: Path, data: bytes) -> None:
    """Write a new file via a temporary name, fsync, link, fsync the folder; never overwrite."""
    write_new(path, data, step=f"writing {path.name}")
