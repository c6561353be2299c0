"""``harness calibrate io-scale``: measure this host's noise with N independent A/A runs.

Takes every option of ``harness run io-scale`` (``--demo`` included) plus ``--runs N``
(N >= 5, default 8). Each run is a full ``harness run io-scale`` in its own process,
registered into the history like any run; the calibration report built from them
(``evidence_schema/calibration-report.v1.json``) is written to
``OUTPUT_DIR/calibration.json`` and stored in the history (``--history-url``: the runs
are registered and the calibration stored on that server, where ``compare
--history-url`` finds it). ``harness compare`` and
``harness run --baseline`` then judge significance against it (docs/verdicts.md).
Exit 0 calibrated; 1 a run failed (its log is named) or the runs disagree; 64 usage.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.errors import HarnessError, UsageError

CALIBRATION_NAME = "calibration.json"
#: Options of ``run io-scale`` that a calibration sets itself per run, or uses itself.
_OWN_OPTIONS = (
    "output_dir",
    "history_dir",
    "history_url",
    "regression_percent",
    "json",
    "quiet",
    "calibration_run",
    "allow_contended",
)


def _io_scale_parser() -> argparse.ArgumentParser:
    """The ``run io-scale`` parser, so calibrate takes exactly the same options."""
    from harness.commands import run as run_command

    scratch = argparse.ArgumentParser(add_help=False)
    run_command.add_parser(scratch.add_subparsers())
    run_parser = scratch._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    return run_parser._subparsers._group_actions[0].choices["io-scale"]  # type: ignore[union-attr]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from harness.verdict.calibration import DEFAULT_RUNS, MIN_RUNS

    parser = subparsers.add_parser(
        "calibrate", help="measure this host's A/A noise for significance (calibrate io-scale)"
    )
    kinds = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK")
    io = kinds.add_parser(
        "io-scale",
        parents=[_io_scale_parser()],
        conflict_handler="resolve",
        help="N independent io-scale runs of the same code on the same inputs",
        description=(
            "Run `harness run io-scale` N times, each in its own process, with the options "
            "given, and write one calibration report (OUTPUT_DIR/calibration.json, also "
            "stored in the history) from which comparisons take this host's noise."
        ),
    )
    io.add_argument(
        "--runs",
        type=int,
        default=DEFAULT_RUNS,
        metavar="N",
        help=f"independent runs (at least {MIN_RUNS}; default {DEFAULT_RUNS})",
    )
    io.add_argument(
        "--allow-contended",
        action="store_true",
        help="store the calibration even when the host was contended during some of its runs "
        "(default: refused, exit 1, as its noise would widen every later verdict's floor)",
    )
    io.set_defaults(func=run)
    parser.set_defaults(func=_no_benchmark)


def _no_benchmark(args: argparse.Namespace) -> int:
    raise UsageError("calibrate: choose a benchmark: io-scale")


def run_arguments(args: argparse.Namespace) -> list[str]:
    """``run io-scale`` arguments equivalent to the options given (minus those set per run)."""
    argv: list[str] = []
    for action in _io_scale_parser()._actions:
        if isinstance(action, argparse._HelpAction) or action.dest in _OWN_OPTIONS:
            continue
        value = getattr(args, action.dest, None)
        if value is None or value == action.default:
            continue
        if not action.option_strings:
            argv.append(str(value))
        elif isinstance(action, argparse._StoreTrueAction):
            argv.append(action.option_strings[-1])
        else:
            argv += [action.option_strings[-1], str(value)]
    return argv


def _check_usage(args: argparse.Namespace) -> None:
    from harness.commands.run import check_history_usage
    from harness.verdict.calibration import MIN_RUNS

    check_history_usage(args)
    if args.runs < MIN_RUNS:
        raise UsageError(
            f"--runs {args.runs}: give at least {MIN_RUNS} (default 8): the noise floor is "
            f"the spread of A/A ratios between every pair of runs, and fewer than {MIN_RUNS} "
            "runs give too few pairs for its 5-95% quantiles"
        )
    if args.baseline or args.recheck or args.calibration:
        raise UsageError(
            "calibrate runs without --baseline, --recheck or --calibration: its runs are the "
            "A/A baseline"
        )
    if not args.demo and not args.output_dir:
        raise UsageError("calibrate io-scale needs --output-dir (or --demo)")
    if args.output_dir and (Path(args.output_dir) / CALIBRATION_NAME).exists():
        raise UsageError(
            f"{Path(args.output_dir) / CALIBRATION_NAME} exists; choose a new --output-dir"
        )


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from harness.commands.history import opened_optional_history
    from harness.commands.run import run_history_location
    from harness.history.opening import arguments_for
    from harness.history.records import sha256_bytes
    from harness.report import parse_report
    from harness.verdict.calibration_report import (
        build_calibration,
        dump_calibration,
        store_calibration,
        write_new_file,
    )
    from harness.views.scripted import output_mode, print_json, quiet_line

    _check_usage(args)
    console = Console(stderr=True, soft_wrap=True)
    # the runs register where the calibration is stored: the history (given, or the
    # demo's folder) is named to each run as given
    location = run_history_location(args)
    passed = run_arguments(args)
    with contextlib.ExitStack() as stack:
        history = stack.enter_context(opened_optional_history(location))
        if history is not None:
            history.require_calibrations()  # before the runs: one that cannot hold it, said first
        if args.output_dir:
            out = Path(args.output_dir)
            out.mkdir(parents=True, exist_ok=True)
        else:
            out = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="harness-calibrate-"))
            )
        runs = []
        for index in range(1, args.runs + 1):
            run_dir = out / f"run-{index:02d}"
            command = [sys.executable, "-m", "harness", "run", "io-scale", *passed]
            command += ["--output-dir", str(run_dir), "--calibration-run", f"{index}/{args.runs}"]
            if location is not None:
                command += arguments_for(location)
            log = out / f"run-{index:02d}.log"
            with open(log, "wb") as handle:
                completed = subprocess.run(
                    command, stdout=handle, stderr=subprocess.STDOUT, check=False
                )
            if completed.returncode != 0:
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                raise HarnessError(
                    f"calibration run {index} of {args.runs} exited {completed.returncode} "
                    f"(log {log}): {' | '.join(tail)}"
                )
            data = (run_dir / "loading.json").read_bytes()
            runs.append(
                (parse_report(data, name=str(run_dir / "loading.json")), sha256_bytes(data))
            )
            console.print(
                f"calibration run {index}/{args.runs}: {runs[-1][1][:12]}",
                markup=False,
                highlight=False,
            )
        check_quiet_host(runs, args.allow_contended, console)
        document = build_calibration(
            runs,
            regression_percent=args.regression_percent,
            alpha=0.05,
            command=["harness", "calibrate", "io-scale", *passed, "--runs", str(args.runs)],
        )
        data = dump_calibration(document)
        if args.output_dir:
            write_new_file(out / CALIBRATION_NAME, data)
        stored = store_calibration(history, data) if history is not None else None
    sha256 = stored.sha256 if stored else sha256_bytes(data)
    mode = output_mode(args)
    if mode == "json":
        print_json(data)
    elif mode == "quiet":
        print(quiet_line(sha256, "calibrated"), flush=True)
    else:
        print_calibration(document, sha256, history.where if history is not None else None)
    return 0


def check_quiet_host(runs: list, allow_contended: bool, console) -> None:
    """Refuse a calibration whose runs saw a contended host (HarnessError, exit 1), naming
    the runs and why, unless ``allow_contended``; then say so and go on."""
    contended = [
        (index, doc.get("contention", {}).get("reasons", []))
        for index, (doc, _sha) in enumerate(runs, start=1)
        if doc["status"].get("host_load") == "contended"
    ]
    if not contended:
        return
    named = "; ".join(
        f"run {index}: {', '.join(reasons[:2]) or 'contended'}" for index, reasons in contended
    )
    what = f"{len(contended)} of {len(runs)} calibration runs ran on a contended host ({named})"
    if not allow_contended:
        raise HarnessError(
            f"calibration refused: {what}; its noise would widen every later verdict's floor. "
            "Rerun on a quiet host, or pass --allow-contended to store it anyway (the runs "
            "stay registered, tagged as calibration runs)"
        )
    console.print(
        f"warning: {what}; stored anyway (--allow-contended)", markup=False, highlight=False
    )


def print_calibration(document: dict, sha256: str, history: Path | str | None) -> None:
    """A table of the calibration's figures per cell (stdout)."""
    from harness.views.cells import CellView, print_cells
    from harness.views.console import make_console

    console = make_console()
    view = CellView(
        key_columns=("acquisition", "format", "cache"),
        value_columns=(
            "A/A ratio 5-95%",
            "noise floor",
            "flagged 9/10",
            "MDC",
            "false pos. rule",
            "false pos. verdict",
        ),
        title=f"calibration {sha256[:12]} · {len(document['runs'])} runs × {document['reps']} "
        f"reps · key {document['comparison_key']}",
        right=frozenset({"false pos. rule", "false pos. verdict"}),
    )
    for cell in document["cells"]:
        q = cell["ratio_quantiles"]
        view.add_row(
            (cell["acquisition"], cell["format"], cell["cache_state"]),
            (
                f"{(q['0.05'] - 1) * 100:+.1f}% .. {(q['0.95'] - 1) * 100:+.1f}%",
                f"{cell['noise_floor_percent']:+.1f}%",
                f"{cell['flag_mdc_percent']:.1f}%" if "flag_mdc_percent" in cell else "-",
                f"{cell['mdc_percent']:.1f}%",
                f"{cell['false_positive_rule']:.1%}",
                f"{cell['false_positive_verdict']:.1%}",
            ),
        )
    print_cells(console, view)
    overall = document["comparison"]
    console.print(
        f"per comparison (any of {len(document['cells'])} cells): false positives "
        f"{overall['false_positive_rule']:.1%} by the {document['regression_percent']:g}% rule "
        f"alone, {overall['false_positive_verdict']:.1%} confirmed 'slower'",
        markup=False,
        highlight=False,
    )
    where = f"stored in {history}" if history is not None else "not stored (no --history-dir)"
    console.print(f"calibration {sha256}: {where}", markup=False, highlight=False)
