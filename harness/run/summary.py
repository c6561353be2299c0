"""Human summary of a loading report: one table row per measured cell.

Statistics themselves are computed by :func:`harness.report.summarise_trials` (one
definition for the runner, the history and comparisons); this module only shows
them, with throughput relative to the *uncompressed* size so HDF5 and QEM rows are
comparable, and with how many trials kept their cache label.

Identifiers are never cut: on a terminal wide enough for the whole table it is a
table; off a terminal (pipes, CI logs) or when the terminal is narrower than the
table, it is a compact layout, one block per acquisition. Text from the report is
never read as rich markup (it is passed as :class:`rich.text.Text`), and its control
characters are escaped (:mod:`harness.safe_text`).
"""

from __future__ import annotations

from typing import Any

from harness.run.floors.cells import floor_lines
from harness.run.fresh.process import first_load_lines
from harness.run.paired.pairing import describe_pairing
from harness.safe_text import terminal_text

_COLUMNS = ("acquisition", "format", "cache", "kept/n", "first", "median", "p95", "min", "max")
_STATS = ("first", "median", "p95", "min", "max")


def _milliseconds(value: float | None) -> str:
    """A load time in ms (one unit for every load, stated in the header or beside it)."""
    if value is None:
        return "-"
    return f"{value * 1e3:.1f}"


def _raw_bytes(acquisition: dict) -> int:
    import numpy as np

    n = 1
    for side in acquisition["shape"]:
        n *= int(side)
    try:
        return n * np.dtype(acquisition["dtype"]).itemsize
    except TypeError:
        return 0


def _title(doc: dict) -> str:
    cond = doc["conditions"]
    return (
        f"io-scale · backend {cond['backend']} · {doc['environment']['device']['name']} "
        f"· storage {doc['environment']['storage']['storage_id']}"
    )


def _rows(doc: dict) -> list[tuple[dict, str]]:
    """Each summary with its raw-size throughput (``-`` where unknown)."""
    acquisitions = {a["id"]: a for a in doc["acquisitions"]}
    rows = []
    for s in doc["summaries"]:
        raw = _raw_bytes(acquisitions[s["acquisition"]]) if s["acquisition"] in acquisitions else 0
        rows.append((s, f"{raw / s['median'] / 1e9:.2f}" if s["median"] and raw else "-"))
    return rows


def build_summary_table(doc: dict) -> Any:
    """A ``rich`` table of the report's summaries (every cell plain text, never markup)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(terminal_text(_title(doc))), title_justify="left")
    for column in _COLUMNS:
        left = column in ("acquisition", "format", "cache")
        header = column if left or column == "kept/n" else f"{column} ms"
        table.add_column(header, justify="left" if left else "right", no_wrap=True)
    table.add_column("GB/s (raw, median)", justify="right", no_wrap=True)
    for s, rate in _rows(doc):
        table.add_row(
            Text(terminal_text(s["acquisition"])),
            Text(terminal_text(s["format"])),
            Text(terminal_text(s["cache_state"])),
            f"{s['n_kept']}/{s['n']}",
            *(_milliseconds(s[k]) for k in _STATS),
            rate,
        )
    return table


def compact_lines(doc: dict) -> list[str]:
    """The summary as plain lines, one block per acquisition (for pipes and narrow terminals)."""
    lines = [_title(doc)]
    current = None
    for s, rate in _rows(doc):
        if s["acquisition"] != current:
            current = s["acquisition"]
            lines.append(f"{current}:")
        stats = "  ".join(
            f"{k} {_milliseconds(s[k])} ms" for k in ("median", "p95", "min", "max", "first")
        )
        lines.append(
            f"  {s['format']} {s['cache_state']}: kept {s['n_kept']}/{s['n']}  {stats}  "
            f"{rate} GB/s raw"
        )
    return lines


def status_lines(doc: dict) -> list[str]:
    """Status, label counts and failures as plain lines."""
    status = doc["status"]
    n = len(doc["trials"])
    kept = sum(1 for t in doc["trials"] if t["kept"])
    lines = [
        f"execution {status['execution']} · correctness {status['correctness']} · "
        f"source {status['source_stability']} · performance {status['performance']} · "
        f"exit {status['exit_code']}",
        f"{kept} of {n} trials kept their cache label",
    ]
    lines += [f"  - {failure}" for failure in status["failures"]]
    contention = doc.get("contention") or {}
    if status.get("host_load") == "contended":
        lines.append("host contended while measuring (not a failure; timings are less reliable):")
        lines += [f"  - {reason}" for reason in contention.get("reasons", [])[:6]]
    comparison = doc.get("comparison")
    if comparison and doc.get("baseline"):
        lines.append(
            f"baseline {doc['baseline']['sha256'][:12]}: {comparison['verdict']} "
            f"(threshold {doc['baseline']['regression_percent']:g}%)"
        )
        lines += [f"  - not comparable: {d}" for d in comparison.get("differences", [])]
        calibration = comparison.get("calibration")
        if calibration is not None:
            used = calibration.get("sha256")
            lines.append(
                f"  calibration: {used[:12]} ({calibration['note']})"
                if used
                else f"  calibration: none ({calibration['note']})"
            )
        cells = comparison.get("cells")
        if cells is None:  # a report from before per-cell verdicts
            cells = [dict(c, verdict="slower") for c in comparison.get("flagged_cells", [])]
        for c in cells:
            if c["verdict"] == "unchanged" and not c.get("recheck"):
                continue
            lines.append(
                f"  - {c['verdict']}: {c['acquisition']} {c['format']} {c['cache_state']}: median "
                f"{c['baseline_median']:.4g} s -> {c['candidate_median']:.4g} s "
                f"({c['change_percent']:+.1f}%)" + (f"; {c['notes'][0]}" if c.get("notes") else "")
            )
        lines += [f"  - warning: {w}" for w in comparison.get("warnings", [])]
    pairing = describe_pairing(doc.get("recheck"))
    if pairing is not None:
        lines.append(pairing)
    return lines


def print_summary(doc: dict, console: Any = None, *, compact: bool | None = None) -> None:
    """Print the table (or the compact layout) and the status lines (``console``: stdout).

    ``compact=None`` chooses: compact off a terminal or where the table is wider than it.
    """
    from rich.console import Console

    console = console or Console()
    table = build_summary_table(doc)
    if compact is None:
        # measured without the console's width limit: the width the table needs uncut
        unlimited = console.options.update_width(100_000)
        compact = (
            not console.is_terminal
            or console.measure(table, options=unlimited).maximum > console.width
        )
    if compact:
        for line in compact_lines(doc):
            console.print(terminal_text(line), markup=False, highlight=False, soft_wrap=True)
    else:
        console.print(table)
    for line in floor_lines(doc) + first_load_lines(doc) + status_lines(doc):
        console.print(terminal_text(line), markup=False, highlight=False, soft_wrap=True)
