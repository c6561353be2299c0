"""``harness compare``: compare a candidate report with an explicitly named baseline.

Exit 0: comparable and no cell slower than the threshold; 1: the candidate failed
(execution, correctness, source stability); 2: a cell ``slower`` or
``possibly_slower`` (past the threshold), or not comparable (with the differing
fields); 64: usage error. Significance is judged against the named or most recent
matching calibration (docs/verdicts.md).
"""

from __future__ import annotations

import argparse
import math

from harness.errors import UsageError
from harness.views.scripted import add_output_arguments


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from harness.commands.history import add_history_location_arguments

    parser = subparsers.add_parser(
        "compare",
        help="compare a candidate report with a named baseline (exit 0/1/2)",
        description=(
            "Compare CANDIDATE (a report path or record SHA-256 prefix; default: the newest record "
            "in the history) with the baseline named by --baseline. The baseline is never chosen "
            "for you."
        ),
    )
    parser.add_argument(
        "candidate", nargs="?", metavar="CANDIDATE", help="report path or SHA-256 prefix"
    )
    parser.add_argument(
        "--baseline", required=True, metavar="SHA_PREFIX_OR_PATH", help="baseline report (required)"
    )
    add_history_location_arguments(parser, access="read")
    parser.add_argument(
        "--regression-percent",
        type=float,
        default=20.0,
        metavar="P",
        help="flag cells whose median is more than P%% slower (default 20)",
    )
    parser.add_argument(
        "--accept-output-change",
        action="store_true",
        help="compute reports: accept output hashes that differ from a same-backend baseline",
    )
    parser.add_argument(
        "--calibration",
        metavar="SHA_PREFIX",
        help="calibration to judge significance against (default: the most recent one in the "
        "history whose comparison key matches)",
    )
    parser.add_argument(
        "--format",
        choices=("text", "markdown", "json"),
        default=None,
        help="output: text (a table; the default on a terminal), markdown (the default "
        "otherwise) or json",
    )
    add_output_arguments(parser, "the comparison (the same as --format json)")
    parser.set_defaults(func=run)


def newest_candidate(history) -> str:
    """The newest record of ``history`` that is not a calibration run (the default
    CANDIDATE); UsageError when there is none."""
    if not history.exists():
        raise UsageError(
            f"no CANDIDATE given and {history.where} is not a history to take the newest from"
        )
    sha = history.newest_candidate()
    if sha is None:
        raise UsageError(
            f"{history.where}: the history holds no record but calibration runs; name a CANDIDATE"
        )
    return sha


def load_compared(history, args: argparse.Namespace):
    """Baseline, candidate and calibration of a comparison, looked up in ``history``
    (a :class:`~harness.history.backend.HistoryBackend`): a file is read as a report,
    anything else is a SHA-256 prefix of a record there. The calibration is the one
    ``--calibration`` names (a calibration file, or a prefix of one in ``history``),
    else the newest there whose comparison key is the candidate's. ``harness recheck``
    looks its records up here too (``args.candidate`` is then required)."""
    from harness.history.backend import load_reference
    from harness.verdict.calibration_report import resolve_calibration

    baseline = load_reference(history, args.baseline, what="--baseline")
    candidate = load_reference(history, args.candidate or newest_candidate(history))
    calibration = resolve_calibration(history, args.calibration, candidate.doc)
    return baseline, candidate, calibration


def run(args: argparse.Namespace) -> int:

    from harness.commands._output import show_comparison
    from harness.compare import compare_loaded

    percent = args.regression_percent
    if not math.isfinite(percent) or percent <= 0:
        raise UsageError(f"--regression-percent must be a positive number, not {percent:g}")
    history = args.history
    baseline, candidate, calibration = load_compared(history, args)
    comparison = compare_loaded(
        baseline,
        candidate,
        percent,
        calibration=calibration,
        accept_output_change=args.accept_output_change,
    )
    if baseline.sha256 == candidate.sha256:
        comparison.warnings.append("baseline and candidate are the same record")
    show_comparison(comparison, args, candidate.sha256)
    return comparison.exit_code
