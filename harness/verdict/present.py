"""How a comparison is shown: a rich table on a terminal, Markdown, or JSON.

The verdicts were decided in :mod:`harness.verdict.comparison` and :mod:`harness.verdict.cells`;
this module only displays them. Every piece of text taken from a report (ids, paths,
field values) goes into rich as a :class:`rich.text.Text`, never parsed as markup, and
into Markdown through the ``md`` escaping filter.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from harness.safe_text import terminal_text
from harness.verdict.comparison import CellVerdict, Comparison
from harness.views.cells import CellView, print_cells

FORMATS = ("text", "markdown", "json")

#: How each cell verdict is written for people (the JSON keeps the enum value).
VERDICT_LABELS = {
    CellVerdict.SLOWER: "SLOWER",
    CellVerdict.POSSIBLY_SLOWER: "possibly slower",
    CellVerdict.FASTER: "faster (improved)",
    CellVerdict.UNCHANGED: "unchanged",
    CellVerdict.UNDECIDED: "undecided",
}
_STYLES = {
    CellVerdict.SLOWER: "bold red",
    CellVerdict.POSSIBLY_SLOWER: "yellow",
    CellVerdict.FASTER: "bold green",
    CellVerdict.UNCHANGED: "",
    CellVerdict.UNDECIDED: "magenta",
}


def format_percent(value: float | None, signed: bool = True) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if math.isinf(value):
        return "+inf%" if value > 0 else "-inf%"
    return f"{value:+.1f}%" if signed else f"{value:.1f}%"


def format_interval(interval: tuple[float, float]) -> str:
    low, high = interval
    return f"[{format_percent(low)}, {format_percent(high)}]"


def format_seconds(value: float) -> str:
    return f"{value * 1e3:.2f} ms" if value < 1 else f"{value:.3f} s"


def format_milliseconds(value: float) -> str:
    return f"{value * 1e3:.2f}"


def calibration_line(comparison: Comparison) -> str:
    use = comparison.calibration
    if use is None or use.sha256 is None:
        note = use.note if use is not None else "no calibration looked up"
        return f"calibration: none ({note})"
    return (
        f"calibration: {use.sha256[:12]} ({use.runs} runs of {use.reps} reps, {use.created_utc})"
        + (f"; {use.note}" if use.note else "")
    )


def rule_line(comparison: Comparison) -> str:
    rechecked = sum(1 for cell in comparison.cells if cell.recheck)
    return (
        f"rule: a cell more than {comparison.regression_percent:g}% slower (change: ratio of "
        f"medians) is flagged; 'slower' when significant at alpha {comparison.alpha:g} after "
        f"Holm correction over {len(comparison.cells)} cells"
        + (f" (a rechecked cell: over the {rechecked} rechecked)" if rechecked else "")
        + ", else 'possibly slower'"
    )


def render_json(comparison: Comparison) -> str:
    return json.dumps(comparison.to_dict(), sort_keys=True, indent=1, allow_nan=False, default=str)


def render_markdown(comparison: Comparison) -> str:
    from harness.templating import render_template

    return render_template(
        "compare.md.j2",
        c=comparison,
        labels=VERDICT_LABELS,
        percent=format_percent,
        interval=format_interval,
        seconds=format_seconds,
        calibration_line=calibration_line(comparison),
        rule_line=rule_line(comparison),
    )


def print_text(comparison: Comparison, console: Any) -> None:
    """The comparison as rich output: header lines, one table row per cell, notes."""
    from rich.text import Text

    def plain(value: object, style: str = "") -> Text:
        return Text(terminal_text(value), style=style)  # report text: controls escaped

    verdict = comparison.verdict.value.upper()
    console.print(
        Text(f"Comparison: {verdict} (exit {comparison.exit_code})", style="bold"),
    )
    for label, sha, path in (
        ("baseline", comparison.baseline_sha256, comparison.baseline_path),
        ("candidate", comparison.candidate_sha256, comparison.candidate_path),
    ):
        console.print(plain(f"{label}: {(sha or '')[:16]} {path or ''}"))
    console.print(plain(rule_line(comparison)))
    console.print(plain(calibration_line(comparison)))
    for failure in comparison.failures:
        console.print(plain(f"candidate failed: {failure}", "red"))
    if comparison.differences:
        differences = CellView(
            key_columns=("field",),
            value_columns=("baseline", "candidate"),
            title="not comparable: fields that differ",
        )
        for d in comparison.differences:
            differences.add_row((d.field,), (d.baseline, d.candidate))
        print_cells(console, differences)
    if comparison.cells:
        print_cells(console, comparison_cell_view(comparison))
        counts = {v: sum(1 for c in comparison.cells if c.verdict is v) for v in CellVerdict}
        console.print(
            plain(
                ", ".join(f"{n} {VERDICT_LABELS[v]}" for v, n in counts.items() if n)
                + f" of {len(comparison.cells)} cells"
            )
        )
        for cell in comparison.cells:
            for text in (*cell.notes, *cell.warnings):
                console.print(
                    plain(f"  {cell.acquisition} {cell.format} {cell.cache_state}: {text}")
                )
    for warning in comparison.warnings:
        console.print(plain(f"warning: {warning}", "yellow"))


#: What a cell's line shows first where the table does not fit: its verdict and change.
_LINE_ORDER = ("verdict", "change", "95% CI", "baseline ms", "candidate ms", "n b/c", "p (Holm)")
_LINE_ORDER += ("noise floor", "MDC")


def comparison_cell_view(comparison: Comparison) -> CellView:
    """The comparison's cells, one row each; times in ms (one unit per table)."""
    from rich.text import Text

    calibrated = any(c.noise_floor_percent is not None for c in comparison.cells)
    values = ["n b/c", "baseline ms", "candidate ms", "change", "95% CI", "p (Holm)", "verdict"]
    if calibrated:
        values += ["noise floor", "MDC"]
    view = CellView(
        key_columns=("acquisition", "format", "cache"),
        value_columns=tuple(values),
        line_order=tuple(name for name in _LINE_ORDER if name in values),
        right=frozenset(values) - {"verdict"},
        bare=frozenset({"verdict"}),
    )
    for cell in comparison.cells:
        row = [
            f"{cell.n_baseline}/{cell.n_candidate}",
            format_milliseconds(cell.baseline_median),
            format_milliseconds(cell.candidate_median),
            format_percent(cell.change_percent),
            format_interval(cell.ci_percent),
            f"{cell.p_value:.3g} ({cell.p_adjusted:.3g})",
            Text(VERDICT_LABELS[cell.verdict], _STYLES[cell.verdict]),
        ]
        if calibrated:
            row += [
                format_percent(cell.noise_floor_percent),
                format_percent(cell.mdc_percent, signed=False),
            ]
        view.add_row((cell.acquisition, cell.format, cell.cache_state), tuple(row))
    return view


def print_comparison(comparison: Comparison, output: str | None) -> None:
    """Print ``comparison`` as ``json``, ``markdown`` or ``text`` (a rich table); ``None``
    picks text on a terminal and Markdown elsewhere (``compare`` and ``recheck`` alike)."""
    if output is None:
        output = "text" if sys.stdout.isatty() else "markdown"
    if output == "json":
        print(render_json(comparison))
    elif output == "markdown":
        print(render_markdown(comparison), end="")
    else:
        from harness.views.console import make_console

        print_text(comparison, make_console())
