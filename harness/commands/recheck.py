"""``harness recheck``: measure an earlier report's flagged cells again, as a new record.

``harness recheck CANDIDATE --baseline SHA_OR_PATH [--recheck K]`` compares CANDIDATE
(a report path or record SHA-256 prefix) with the baseline as ``harness compare``
does; when cells are flagged it measures only those K more rounds (default 5),
interleaved, on the candidate's inputs, with its code, host, device and storage
(refused with exit 2 otherwise), writes the candidate's content plus a ``recheck``
block as a new record in ``--output-dir`` and registers it (``--history-url``: the
records are looked up and the new one registered on that server); then prints the final
verdict on original plus recheck trials. Exit codes as ``harness compare``: 0 pass,
1 failed, 2 review or incomparable, 64 usage error. See docs/verdicts.md ("Rechecks").
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from harness.commands._output import show_comparison
from harness.errors import UsageError
from harness.verdict import DEFAULT_RECHECK_LOOKS
from harness.views.scripted import add_output_arguments, say

DEFAULT_RECHECK_ROUNDS = 5


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from harness.commands.history import add_history_location_arguments

    parser = subparsers.add_parser(
        "recheck",
        help="measure a report's flagged cells again and record the final verdict",
        description=(
            "Compare CANDIDATE with --baseline as `harness compare` does; measure each flagged "
            "cell K more times, interleaved, on the candidate's inputs (its manifest and "
            "master files, checked by SHA-256), with its code (source fingerprint) on its "
            "host, device and storage; write the candidate plus a `recheck` block as a new "
            "record (the candidate is never rewritten) and print the final verdict. Exit 0 "
            "pass, 1 failed, 2 review or incomparable, 64 usage error."
        ),
    )
    parser.add_argument("candidate", metavar="CANDIDATE", help="report path or SHA-256 prefix")
    parser.add_argument(
        "--baseline", required=True, metavar="SHA_PREFIX_OR_PATH", help="baseline report (required)"
    )
    parser.add_argument(
        "--recheck",
        type=int,
        default=DEFAULT_RECHECK_ROUNDS,
        metavar="K",
        help=f"rounds of the flagged cells (default {DEFAULT_RECHECK_ROUNDS})",
    )
    parser.add_argument(
        "--recheck-looks",
        type=int,
        default=DEFAULT_RECHECK_LOOKS,
        metavar="L",
        help="measure the cells still undecided K rounds more, up to L batches in all (the "
        f"verdict splits alpha over the L looks; default {DEFAULT_RECHECK_LOOKS})",
    )
    parser.add_argument(
        "--paired",
        action="store_true",
        help="require the paired recheck, the default whenever the baseline's code can be had: "
        "the baseline's code measured too, alternately with the candidate's, and the flagged "
        "cells judged on those pairs (its code: --baseline-tree, else this checkout when it "
        "fingerprints as the baseline, else its git revision exported from this repository; "
        "checked by source fingerprint); exit 2 when it cannot be had",
    )
    parser.add_argument(
        "--no-paired",
        action="store_true",
        help="recheck the candidate's code alone, against the baseline's original trials",
    )
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        metavar="DIR",
        help="a folder holding the baseline's code, for the paired recheck (default: this "
        "checkout when it fingerprints as the baseline, else git archive of its revision)",
    )
    parser.add_argument(
        "--regression-percent",
        type=float,
        default=20.0,
        metavar="P",
        help="flag cells whose median is more than P%% slower (default 20)",
    )
    parser.add_argument(
        "--calibration",
        metavar="SHA_PREFIX",
        help="calibration to judge significance against (default: the most recent one in the "
        "history whose comparison key matches the candidate's; with --history-url a "
        "calibration file)",
    )
    add_history_location_arguments(parser, access="write")
    parser.add_argument(
        "--output-dir",
        type=Path,
        metavar="DIR",
        help="where the new loading.json is written (needed unless the candidate is a demo "
        "run; then ./harness-demo/recheck-SHA12-TIME)",
    )
    parser.add_argument(
        "--root",
        type=Path,
        metavar="ROOT",
        help="the candidate's data folder (default: the ROOT of its recorded command)",
    )
    parser.add_argument(
        "--selection-manifest",
        type=Path,
        metavar="M.json",
        help="the candidate's manifest (default: the one of its recorded command)",
    )
    parser.add_argument(
        "--native-binary", type=Path, metavar="PATH", help="qem-native-load for --backend native"
    )
    parser.add_argument(
        "--no-verify-source",
        action="store_true",
        help="do not check the shard files against the manifest's size and SHA-256 before "
        "measuring (the loads check chunks as the candidate's did); recorded in the record's "
        "recheck.source_check",
    )
    parser.add_argument(
        "--lock-dir",
        type=Path,
        metavar="DIR",
        help="host lock folder (as `harness run`; $HARNESS_LOCK_DIR overrides the default)",
    )
    parser.add_argument(
        "--lock-timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="seconds to wait for another run on the same GPU or storage (default 600)",
    )
    parser.add_argument(
        "--format",
        choices=("text", "markdown", "json"),
        default=None,
        help="output: text (the default on a terminal), markdown (otherwise) or json",
    )
    add_output_arguments(parser, "the final comparison (the same as --format json)")
    parser.set_defaults(func=run)


def recheck_output_dir(given: Path | None, candidate) -> Path:
    """Where the new record goes: ``--output-dir``; for a demo candidate a new folder under
    ``./harness-demo/`` (where the demo keeps its reports); else a usage error, so that
    nothing is written into the current folder unasked."""
    import time

    from harness.commands.run import DEFAULT_DEMO_REPORTS

    if given is not None:
        return given
    _root, _manifest, demo = _recorded_inputs(candidate.doc.get("command") or ())
    if not demo:
        raise UsageError(
            f"recheck of {candidate.sha256[:12]} writes a new record: name its folder with "
            "--output-dir DIR (it must not hold a loading.json)"
        )
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return Path(DEFAULT_DEMO_REPORTS, f"recheck-{candidate.sha256[:12]}-{stamp}").absolute()


def _recorded_inputs(command: Sequence[str]) -> tuple[Path | None, Path | None, bool]:
    """ROOT, manifest and ``--demo`` of a recorded ``harness run io-scale`` command line."""
    from harness.commands import run as run_command

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> None:  # type: ignore[override]
            raise UsageError(f"cannot read the candidate's recorded command: {message}")

    parser = _Parser(prog="harness", add_help=False)
    run_command.add_parser(parser.add_subparsers(dest="command", parser_class=_Parser))
    words = [str(w) for w in command]
    if len(words) < 3 or words[1:3] != ["run", "io-scale"]:
        return None, None, False
    known, _rest = parser.parse_known_args(words[1:])
    root = Path(known.root) if known.root else None
    return root, known.selection_manifest, bool(known.demo)


@contextlib.contextmanager
def _candidate_inputs(args: argparse.Namespace, candidate) -> Iterator[tuple[Path, Path]]:
    """(ROOT, manifest): given, else from the candidate's command (a demo's is written again)."""
    if args.root and args.selection_manifest:
        yield args.root, args.selection_manifest
        return
    root, manifest, demo = _recorded_inputs(candidate.doc.get("command") or ())
    if demo and not (args.root or args.selection_manifest):
        from harness.run.demo import demo_folder, write_demo_suite

        # the demo suite is deterministic; the master SHA-256 check proves it is the same
        with demo_folder() as folder:
            suite = write_demo_suite(folder)
            yield suite.root, suite.manifest
        return
    root = args.root or root
    manifest = args.selection_manifest or manifest
    if root is None or manifest is None:
        raise UsageError(
            f"candidate {candidate.sha256[:12]}: its recorded command does not name "
            f"{'ROOT' if root is None else 'the selection manifest'}; pass --root and "
            "--selection-manifest"
        )
    yield root, manifest


def run(args: argparse.Namespace) -> int:
    from harness.run.paired.pairing import parse_pairing_flags
    from harness.run.provenance import check_code_origin

    percent = args.regression_percent
    if not math.isfinite(percent) or percent <= 0:
        raise UsageError(f"--regression-percent must be a positive number, not {percent:g}")
    if args.recheck < 1:
        raise UsageError(f"--recheck must be at least 1, not {args.recheck}")
    if args.recheck_looks < 1:
        raise UsageError(f"--recheck-looks must be at least 1, not {args.recheck_looks}")
    if args.lock_timeout < 0:
        raise UsageError("--lock-timeout must not be negative")
    paired = parse_pairing_flags(args.paired, args.no_paired, args.baseline_tree)
    check_code_origin()
    return _check_and_recheck(args, args.history, paired, percent)


def _check_and_recheck(args, history, paired: bool | None, percent: float) -> int:
    """Compare the candidate with the baseline, both looked up in ``history``; measure
    the flagged cells again when there are any."""
    from harness.commands.compare import load_compared
    from harness.compare import Verdict, compare_loaded
    from harness.report import BENCHMARK

    baseline, candidate, calibration = load_compared(history, args)
    if candidate.doc.get("benchmark") != BENCHMARK:
        raise UsageError(
            f"candidate {candidate.sha256[:12]} is a {candidate.doc.get('benchmark')!r} report; "
            f"harness recheck measures {BENCHMARK} reports"
        )
    if candidate.doc.get("recheck"):
        linked = candidate.doc["recheck"].get("candidate_sha256")
        raise UsageError(
            f"candidate {candidate.sha256[:12]} already holds a recheck"
            + (f" (of {linked[:12]}); recheck that record instead" if linked else "")
        )
    first = compare_loaded(baseline, candidate, percent, calibration=calibration)
    if first.verdict in (Verdict.FAILED, Verdict.INCOMPARABLE) or not first.recheck_cells:
        show_comparison(first, args, candidate.sha256)
        why = (
            "no cell is flagged or undecided"
            if first.verdict is Verdict.PASS
            else f"it is {first.verdict.value}"
        )
        say(f"recheck: nothing measured and no record written: {why}", args)
        return first.exit_code
    return _recheck(args, candidate, baseline, calibration, first, history, paired)


def _recheck(args, candidate, baseline, calibration, first, history, paired: bool | None) -> int:
    """Measure the flagged cells; the new record is registered in ``history``."""
    from harness.compare import compare_loaded
    from harness.history.backend import load_reference
    from harness.run.paired.pairing import describe_pairing
    from harness.run.recheck.measure import RecheckConfig, run_recheck

    cells = [cell.key for cell in first.recheck_cells]
    output_dir = recheck_output_dir(args.output_dir, candidate)
    say(
        f"recheck: {len(cells)} flagged or undecided cell(s) of {candidate.sha256[:12]}, "
        f"{args.recheck} more round(s): " + ", ".join("/".join(key) for key in cells),
        args,
    )
    with _candidate_inputs(args, candidate) as (root, manifest):
        outcome = run_recheck(
            RecheckConfig(
                candidate=candidate,
                baseline=baseline,
                calibration=calibration,
                cells=cells,
                root=root,
                manifest=manifest,
                output_dir=output_dir,
                rounds=args.recheck,
                looks=args.recheck_looks,
                regression_percent=args.regression_percent,
                history=history,
                native_binary=args.native_binary,
                lock_dir=args.lock_dir,
                lock_timeout=args.lock_timeout,
                command=["harness", *sys.argv[1:]],
                paired=paired,
                baseline_tree=args.baseline_tree,
                check_source_files=not args.no_verify_source,
            )
        )
    record = load_reference(None, str(outcome.report_path))
    final = compare_loaded(baseline, record, args.regression_percent, calibration=calibration)
    say(
        describe_pairing(record.doc["recheck"]) or "recheck: how it ran is not recorded",
        args,
    )
    say(f"report: {outcome.report_path}", args)
    for result in outcome.registered:
        say(f"history {history.where}: {result.message}", args)
    show_comparison(final, args, record.sha256)
    return final.exit_code
