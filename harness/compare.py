"""Comparing a candidate report with an explicitly named baseline.

The verdict is computed here, as a :class:`Verdict`; templates only display it.
Rules (issue 6, "Comparison"):

1. A candidate whose execution, correctness or source stability failed is
   ``FAILED`` (exit 1), whatever its timings.
2. Otherwise the two reports must be comparable: every field of
   :data:`harness.comparability.COMPARABILITY_FIELDS` equal, the same measured
   cells (cells with kept trials), and a baseline that is itself valid evidence.
   If not: ``INCOMPARABLE`` (exit 2) with the differences field by field.
   Compute reports: outputs whose SHA-256 differ from a baseline of the same backend
   and device make the candidate fail with ``outputs_changed`` (exit 1) unless the
   change is accepted (``--accept-output-change``, or recorded in the candidate).
3. Otherwise each cell (acquisition, format, cache state) compares the medians of
   kept trials; a cell slower by more than ``regression_percent`` is flagged and
   the verdict is ``REVIEW`` (exit 2), else ``PASS`` (exit 0). The threshold is a
   review trigger, not a statistical test: each cell also carries the Mann-Whitney
   U p-value, both spreads (IQR over median) and warnings when the trials are too
   few or too noisy for a difference to mean anything.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.comparability import FieldDifference, collect_differences
from harness.errors import EXIT_FAILURE, EXIT_OK, EXIT_REVIEW
from harness.report import quantile
from harness.stats import mann_whitney_u, relative_spread, smallest_possible_p

DEFAULT_REGRESSION_PERCENT = 20.0
#: Significance level used only to word warnings; verdicts never depend on it.
SIGNIFICANCE_LEVEL = 0.05

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
class CellComparison:
    """Medians, change and context for one (acquisition, format, cache state) cell."""

    acquisition: str
    format: str
    cache_state: str
    n_baseline: int
    n_candidate: int
    baseline_median: float
    candidate_median: float
    change_percent: float
    flagged: bool
    p_value: float
    p_method: str
    baseline_spread: float | None
    candidate_spread: float | None
    warnings: tuple[str, ...] = ()


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

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    @property
    def flagged_cells(self) -> list[CellComparison]:
        return [cell for cell in self.cells if cell.flagged]

    @property
    def performance_status(self) -> str:
        """The report's ``status.performance`` value for this comparison."""
        if self.verdict is Verdict.FAILED:
            if self.differences:
                return "incomparable"
            return "review" if self.flagged_cells else "pass"
        return self.verdict.value

    def to_dict(self) -> dict[str, Any]:
        result = asdict(self)
        result["verdict"] = self.verdict.value
        result["exit_code"] = self.exit_code
        result["cells"] = [dict(asdict(cell), warnings=list(cell.warnings)) for cell in self.cells]
        return result


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


def compare_cell(
    key: CellKey, baseline: list[float], candidate: list[float], regression_percent: float
) -> CellComparison:
    """Compare one cell's kept trials; see the module docstring for the rules."""
    base_median = quantile(sorted(baseline), 0.5)
    cand_median = quantile(sorted(candidate), 0.5)
    change = (cand_median / base_median - 1.0) * 100.0 if base_median > 0 else float("inf")
    test = mann_whitney_u(baseline, candidate)
    base_spread = relative_spread(baseline)
    cand_spread = relative_spread(candidate)
    warnings = []
    if smallest_possible_p(len(baseline), len(candidate)) > SIGNIFICANCE_LEVEL:
        warnings.append(
            f"too few trials ({len(baseline)} vs {len(candidate)}): no difference can reach "
            f"p < {SIGNIFICANCE_LEVEL:g}"
        )
    for side, spread in (("baseline", base_spread), ("candidate", cand_spread)):
        if spread is not None and spread * 100 > regression_percent:
            warnings.append(
                f"{side} too noisy: spread {spread * 100:.1f}% (IQR/median) exceeds the "
                f"{regression_percent:g}% threshold"
            )
    flagged = change > regression_percent
    if flagged and test.p_value >= SIGNIFICANCE_LEVEL:
        warnings.append(f"slowdown not significant (p = {test.p_value:.3g})")
    return CellComparison(
        acquisition=key[0],
        format=key[1],
        cache_state=key[2],
        n_baseline=len(baseline),
        n_candidate=len(candidate),
        baseline_median=base_median,
        candidate_median=cand_median,
        change_percent=change,
        flagged=flagged,
        p_value=test.p_value,
        p_method=test.method,
        baseline_spread=base_spread,
        candidate_spread=cand_spread,
        warnings=tuple(warnings),
    )


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
    same = (
        baseline_doc["conditions"]["backend"] == candidate_doc["conditions"]["backend"]
        and baseline_doc["environment"]["device"]["name"]
        == candidate_doc["environment"]["device"]["name"]
        and baseline_doc["environment"]["device"]["uuid"]
        == candidate_doc["environment"]["device"]["uuid"]
    )
    if not same:
        return []
    before = {a["id"]: a["outputs"] for a in baseline_doc["acquisitions"]}
    changed = []
    for acquisition in candidate_doc["acquisitions"]:
        old = before.get(acquisition["id"], {})
        for name, digest in sorted(acquisition["outputs"].items()):
            if name in old and old[name] != digest:
                changed.append(f"{acquisition['id']}/{name}")
    return changed


def compare_reports(
    baseline_doc: Mapping[str, Any],
    candidate_doc: Mapping[str, Any],
    regression_percent: float = DEFAULT_REGRESSION_PERCENT,
    *,
    baseline_sha256: str | None = None,
    baseline_path: str | None = None,
    candidate_sha256: str | None = None,
    candidate_path: str | None = None,
    accept_output_change: bool = False,
) -> Comparison:
    """Compare two parsed (current-version) reports; the verdict follows the module rules.

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
    )
    declared = candidate_doc.get("baseline") or {}
    if baseline_sha256 and declared.get("sha256") and declared["sha256"] != baseline_sha256:
        comparison.warnings.append(
            f"the candidate was run against baseline {declared['sha256']}, not {baseline_sha256}"
        )
    comparison.failures = _candidate_failures(candidate_doc)
    changed = output_changes(baseline_doc, candidate_doc)
    if accept_output_change and candidate_doc["status"]["correctness"] == "outputs_changed":
        # The run recorded the change as its failure; the user accepts it here, explicitly.
        comparison.failures = [
            f
            for f in comparison.failures
            if f != "correctness failed" and not f.startswith("outputs_changed")
        ]
    if changed:
        recorded = (candidate_doc.get("output_change") or {}).get("accepted", False)
        listing = ", ".join(changed)
        if accept_output_change or recorded:
            how = "recorded in the candidate" if recorded else "--accept-output-change"
            comparison.warnings.append(f"outputs changed, accepted ({how}): {listing}")
        elif "outputs_changed" not in " ".join(comparison.failures):
            comparison.failures.append(f"outputs_changed: {listing}")
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
        comparison.cells = [
            compare_cell(key, base_cells[key], cand_cells[key], regression_percent)
            for key in sorted(base_cells)
        ]
    if comparison.failures:
        comparison.verdict = Verdict.FAILED
    elif differences:
        comparison.verdict = Verdict.INCOMPARABLE
    elif comparison.flagged_cells:
        comparison.verdict = Verdict.REVIEW
    return comparison
