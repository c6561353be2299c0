"""``harness history changes``: change points of every cell's medians over a history.

Hooked into ``harness history`` by ``harness/commands/history.py`` (which adds the
subparser and ``--history-dir``, then calls :func:`add_changes_arguments`); the
statistics live in
:mod:`harness.verdict.changes` (E-Divisive means; docs/verdicts.md).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.errors import EXIT_OK, UsageError

CHANGES_HELP = "change points of each cell's median over the records (E-Divisive means)"
CHANGES_DESCRIPTION = (
    "For each comparison key and cell, the per-record medians ordered by source revision "
    "(git commit order of --repo when every revision is in it, else creation time), with "
    "the change points E-Divisive means finds: revision range, magnitude and permutation "
    "p-value."
)


def add_changes_arguments(changes: argparse.ArgumentParser) -> None:
    changes.add_argument("--key", metavar="KEY", help="only this comparison key (or a prefix)")
    changes.add_argument(
        "--repo",
        type=Path,
        default=Path.cwd(),
        metavar="PATH",
        help="git checkout whose commit order orders the records (default: the current folder)",
    )
    changes.add_argument(
        "--p-threshold",
        type=float,
        default=0.01,
        metavar="P",
        help="permutation p-value a change point must reach (default 0.01)",
    )
    changes.add_argument(
        "--format", choices=("text", "json"), default="text", help="output format (default text)"
    )


def run_changes(args: argparse.Namespace, history) -> int:
    """Change points of ``history`` (a :class:`~harness.history.backend.HistoryBackend`)."""
    from harness.verdict.changes import history_changes
    from harness.views.cells import print_cells
    from harness.views.console import make_console

    if not 0 < args.p_threshold < 1:
        raise UsageError(f"--p-threshold must lie in (0, 1), not {args.p_threshold:g}")
    results = history_changes(
        history.where,
        key=args.key,
        repository=args.repo,
        p_threshold=args.p_threshold,
        records=history.iter_reports(),
    )
    if args.key and not results:
        raise UsageError(f"no comparison key in {history.where} starts with {args.key}")
    if args.format == "json":
        print(json.dumps([r.to_dict() for r in results], sort_keys=True, indent=1))
        return EXIT_OK
    print_cells(make_console(), change_view(results, history.where))
    return EXIT_OK


def change_view(results, where: str):
    """Change points as cells: one row per change (or "none") of each key's cell."""
    from harness.views.cells import CellView

    view = CellView(
        key_columns=("key", "acquisition", "format", "cache"),
        value_columns=(
            "records",
            "order",
            "change point",
            "revisions",
            "before ms",
            "after ms",
            "change",
            "p",
        ),
        title=f"change points in {where}",
        line_order=(
            "change point",
            "change",
            "before ms",
            "after ms",
            "p",
            "revisions",
            "records",
            "order",
        ),
        right=frozenset({"before ms", "after ms", "change", "p"}),
    )
    for result in results:
        keys = (result.comparison_key, *result.cell)
        common = (str(len(result.points)), result.ordered_by)
        if not result.changes:
            view.add_row(keys, (*common, "none", "", "", "", "", ""))
        for index, change in enumerate(result.changes):
            data = result.to_dict()["changes"][index]
            start = (data["from_revision"] or data["from_record"])[:10]
            end = (data["to_revision"] or data["to_record"])[:10]
            view.add_row(
                keys,
                (
                    *common,
                    f"#{change.index + 1}",
                    f"{start}..{end}",
                    f"{change.before_median * 1e3:.2f}",
                    f"{change.after_median * 1e3:.2f}",
                    f"{change.change_percent:+.1f}%",
                    f"{change.p_value:.3g}",
                ),
            )
    return view
