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
import sys
from pathlib import Path

from harness.errors import ReportValidationError, UsageError
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
    add_history_location_arguments(parser)
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


def _newest_record(history_dir: str) -> str:
    from harness.commands.history import _open_for_reading
    from harness.history.index_db import newest_candidate

    if not Path(history_dir, "history.json").exists():
        raise UsageError(
            f"no CANDIDATE given and {history_dir} is not a history to take the newest from"
        )
    _layout, engine = _open_for_reading(history_dir)
    try:
        with engine.connect() as connection:
            sha = newest_candidate(connection)
    finally:
        engine.dispose()
    if sha is None:
        raise UsageError(
            f"{history_dir}: the history holds no record but calibration runs; name a CANDIDATE"
        )
    return sha


def load_from_server(url: str, args: argparse.Namespace):
    """Baseline, candidate and calibration with the records on a server (``--history-url``).

    The calibration is the one ``--calibration`` names (a SHA-256 prefix of a calibration
    on the server, or a calibration file), else the newest on the server whose comparison
    key is the candidate's (``harness calibrate --history-url`` stores them there), as a
    folder's lookup chooses. ``harness recheck --history-url`` looks its records up here
    too (``args.candidate`` is then required).
    """
    from harness.commands.history import url_store
    from harness.history.remote import load_server_report, newest_server_record, server_name

    with url_store(url) as store:
        where = server_name(store.engine.url)
        baseline = load_server_report(store, args.baseline, what="--baseline")
        reference = args.candidate or newest_server_record(store)
        if reference is None:
            raise UsageError(f"{where}: the history is empty; name a CANDIDATE")
        candidate = load_server_report(store, reference)
        calibration = resolve_server_calibration(store, args.calibration, candidate.doc)
    return baseline, candidate, calibration


def resolve_server_calibration(store, prefix: str | None, candidate_doc: dict):
    """:func:`harness.verdict.calibration_report.resolve_calibration` with the
    calibrations on a server (a file named by ``prefix`` is read as a file)."""
    from harness.comparability import comparison_key
    from harness.history.lookup import parse_sha_prefix
    from harness.history.records import sha256_bytes
    from harness.history.remote import (
        iter_server_calibrations,
        server_calibration_label,
        server_name,
    )
    from harness.verdict.calibration_report import (
        StoredCalibration,
        calibration_use,
        check_calibration_key,
        parse_calibration,
    )

    key = comparison_key(candidate_doc)
    where = server_name(store.engine.url)
    if prefix is not None and Path(prefix).is_file():
        data = Path(prefix).read_bytes()
        stored = StoredCalibration(
            parse_calibration(data, name=prefix), sha256_bytes(data), Path(prefix)
        )
        check_calibration_key(stored, key)
        return calibration_use(stored, "named with --calibration")
    wanted = parse_sha_prefix(prefix, what="calibration") if prefix is not None else None
    found = []
    for sha256, data in iter_server_calibrations(store):
        if wanted is not None and not sha256.startswith(wanted):
            continue
        label = server_calibration_label(store, sha256)
        try:
            doc = parse_calibration(data, name=label)
        except ReportValidationError as exc:
            if wanted is not None:
                raise  # the one asked for: its error
            # let in by an older server or an owner's edit: never trusted, never fatal
            print(f"warning: skipped {exc} (history verify names it)", file=sys.stderr)
            continue
        found.append(StoredCalibration(doc, sha256, Path(label)))
    if wanted is not None:
        if not found:
            raise UsageError(f"calibration {wanted}: no calibration in {where} starts with it")
        if len(found) > 1:
            names = ", ".join(c.sha256[:16] for c in found[:5])
            raise UsageError(
                f"calibration SHA-256 prefix {wanted} is ambiguous in {where} ({names}); "
                "give more digits"
            )
        check_calibration_key(found[0], key)
        return calibration_use(found[0], "named with --calibration")
    matching = sorted(
        (c for c in found if c.doc["comparison_key"] == key),
        key=lambda c: (c.doc["created_utc"], c.sha256),
    )
    if not matching:
        return calibration_use(None, f"no calibration in {where} matches comparison key {key}")
    return calibration_use(matching[-1], "the most recent matching calibration")


def run(args: argparse.Namespace) -> int:

    from harness.commands._output import show_comparison
    from harness.commands.history import default_history_dir, history_url
    from harness.compare import compare_loaded
    from harness.history.lookup import load_report
    from harness.verdict.calibration_report import resolve_calibration

    percent = args.regression_percent
    if not math.isfinite(percent) or percent <= 0:
        raise UsageError(f"--regression-percent must be a positive number, not {percent:g}")
    url = history_url(args)
    if url is not None:
        baseline, candidate, calibration = load_from_server(url, args)
    else:
        history_dir = args.history_dir or default_history_dir()
        baseline = load_report(args.baseline, history_dir=history_dir)
        candidate_reference = args.candidate or _newest_record(history_dir)
        candidate = load_report(candidate_reference, history_dir=history_dir)
        calibration = resolve_calibration(history_dir, args.calibration, candidate.doc)
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
