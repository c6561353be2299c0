"""Comparing a candidate report with a baseline: the public names, kept at their old place.

The comparison itself lives in :mod:`harness.verdict.comparison` (the verdicts package
owns the rules); this module re-exports it so that ``harness.compare`` stays the one
import for commands, the runner and users' scripts.
"""

from harness.verdict.calibration_report import resolve_calibration
from harness.verdict.comparison import (
    DEFAULT_REGRESSION_PERCENT,
    SIGNIFICANCE_LEVEL,
    CalibrationUse,
    CellComparison,
    CellVerdict,
    Comparison,
    Verdict,
    cell_to_dict,
    collect_cells,
    compare_loaded,
    compare_reports,
    flagged_for_recheck,
    output_changes,
    undecided_after_recheck,
)

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
    "output_changes",
    "resolve_calibration",
    "undecided_after_recheck",
]
