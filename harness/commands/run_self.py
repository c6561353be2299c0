"""``harness run self``: the harness's own scale as a recorded benchmark.

Times registration, index query, full render and verify of a folder history of N
synthetic records (and a PostgreSQL registration with ``--postgres-url``), and the
verdict-power table; writes OUTPUT_DIR/self.json. See docs/self-benchmark.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.errors import UsageError


def add_self_parser(benchmarks: argparse._SubParsersAction) -> None:
    parser = benchmarks.add_parser(
        "self",
        help="the harness's own scale: history, render, verify, PostgreSQL, verdict power",
        description=(
            "Build a folder history of N synthetic records per --records value, then time "
            "registering one more record, an index query, a full dashboard render and a verify "
            "(and a PostgreSQL registration with --postgres-url), each checked outside its "
            "timer, and the verdict-power table. Writes OUTPUT_DIR/self.json. Exit 0 passed, "
            "1 failure, 2 review/incomparable, 64 usage error. See docs/self-benchmark.md."
        ),
    )
    parser.add_argument("--output-dir", type=Path, required=True, metavar="DIR")
    parser.add_argument(
        "--records",
        type=int,
        nargs="+",
        default=[40],
        metavar="N",
        help="history sizes to measure (default 40; the published scale is 10000)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="warm rounds per stage (default 3)")
    parser.add_argument(
        "--verdict-draws",
        type=int,
        default=20,
        metavar="D",
        help="comparisons drawn per slowdown for the verdict-power table (default 20)",
    )
    parser.add_argument(
        "--plots",
        action="store_true",
        help="also time a full render that redraws every key's plot (stage render_plots)",
    )
    parser.add_argument(
        "--postgres-url",
        metavar="URL",
        help="also time registration into this PostgreSQL evidence store (set up by "
        "`harness history init-db`); synthetic records are added to it",
    )
    parser.add_argument(
        "--work-dir", type=Path, metavar="DIR", help="where the histories are built (temporary)"
    )
    parser.add_argument(
        "--verdict-e2e",
        type=int,
        default=0,
        metavar="RUNS",
        help="also judge the verdict against truth: RUNS runs of the README's regression check "
        "per scenario (A/A and real slowdowns of this checkout's HEAD; minutes per run; "
        "docs/self-benchmark.md)",
    )
    parser.add_argument(
        "--e2e-passes",
        default="0,2,25%",
        metavar="P,P,...",
        help="with --verdict-e2e: the scenarios: P extra passes over the loaded array (0 for "
        "A/A), or S%% for passes during S%% of the load's own time, a slowdown of about S%% "
        "in every cell (default 0,2,25%%)",
    )
    parser.add_argument(
        "--e2e-recheck", type=int, default=5, metavar="K",
        help="with --verdict-e2e: the candidate's --recheck K (default 5)",
    )  # fmt: skip
    parser.add_argument(
        "--e2e-contend", type=int, default=0, metavar="N",
        help="with --verdict-e2e: N processes of other work (numpy sums over 64 MB) at nice 19 "
        "share the host during every run: the contended scenario, repeatable (default 0)",
    )  # fmt: skip
    parser.add_argument(
        "--e2e-keep", type=Path, metavar="DIR",
        help="with --verdict-e2e: a new folder that keeps every run's reports (trials, "
        "recheck trials, contention samples, verdicts) and runs.jsonl",
    )  # fmt: skip
    parser.add_argument("--storage-id", default="local", metavar="ID", help="storage name")
    parser.add_argument("--history-dir", type=Path, metavar="H")
    parser.add_argument("--baseline", metavar="SHA_OR_PATH")
    parser.add_argument("--regression-percent", type=float, default=20.0)
    parser.add_argument("--calibration", metavar="SHA_PREFIX")
    parser.set_defaults(func=run_self_command)


def run_self_command(args: argparse.Namespace) -> int:
    if args.repeat < 1 or min(args.records) < 1 or args.verdict_draws < 0:
        raise UsageError("--repeat and --records must be at least 1, --verdict-draws at least 0")
    from harness.selfbench.e2e import parse_scenario, stage_name

    try:
        passes = tuple(
            amount if kind == "passes" else f"{amount}%"
            for kind, amount in map(parse_scenario, args.e2e_passes.split(","))
        )
    except ValueError as exc:
        raise UsageError(f"--e2e-passes {args.e2e_passes!r}: {exc}, e.g. 0,2,25%") from None
    if args.verdict_e2e < 0 or args.e2e_recheck < 1 or args.e2e_contend < 0:
        raise UsageError(
            "--verdict-e2e and --e2e-contend must be at least 0, --e2e-recheck at least 1"
        )
    if args.e2e_keep is not None and args.e2e_keep.exists():
        raise UsageError(f"--e2e-keep {args.e2e_keep}: exists; give a new folder")
    if len({stage_name(p) for p in passes}) != len(passes):
        raise UsageError(f"--e2e-passes {args.e2e_passes!r}: each scenario once")
    if args.work_dir is not None and not args.work_dir.is_dir():
        raise UsageError(f"--work-dir {args.work_dir}: no such folder")
    from harness.commands.history import opened_optional_history

    with opened_optional_history(args.history_dir) as history:
        return _run_self(args, history, passes)


def _run_self(args: argparse.Namespace, history, passes: tuple[int, ...]) -> int:
    from harness.render import registration_renderer
    from harness.selfbench.kind import SelfConfig, run_self
    from harness.views.console import make_console, print_line

    config = SelfConfig(
        output_dir=args.output_dir,
        records=tuple(args.records),
        repeat=args.repeat,
        verdict_draws=args.verdict_draws,
        postgres_url=args.postgres_url,
        plots=args.plots,
        work_dir=args.work_dir,
        storage_id=args.storage_id,
        history=history,
        baseline=args.baseline,
        regression_percent=args.regression_percent,
        calibration=args.calibration,
        render=registration_renderer(),
        command=["harness", *sys.argv[1:]],
        verdict_e2e_runs=args.verdict_e2e,
        e2e_passes=passes,
        e2e_recheck=args.e2e_recheck,
        e2e_contend=args.e2e_contend,
        e2e_keep=args.e2e_keep,
    )
    console = make_console()
    outcome = run_self(config)
    print_self_summary(outcome.report, console)
    print_line(console, f"report: {outcome.report_path}")
    for result in outcome.registered:
        print_line(console, f"history {history.where}: {result.message}")
    return outcome.exit_code


def print_self_summary(doc: dict, console) -> None:
    """Per scale and stage the first and warm median seconds, the verdict-power table and
    any failure (plain text, never markup)."""
    from harness.safe_text import terminal_text

    status = doc["status"]
    lines = [
        f"self-benchmark: execution {status['execution']}, correctness {status['correctness']}, "
        f"performance {status['performance']}, host {status.get('host_load', 'unknown')}"
    ]
    for summary in doc["summaries"]:
        median, first = summary["median"], summary["first"]
        warm = "" if median is None else f"  warm median {median:.4g} s"
        lines.append(
            f"  {summary['acquisition']:<14} {summary['stage']:<18} "
            + ("" if first is None else f"first {first:.4g} s")
            + warm
        )
    for acquisition in doc["acquisitions"]:
        for row in (acquisition.get("fitted") or {}).get("table", []):
            lines.append(
                f"  verdict power: slowdown {row['slowdown']:.0%}: comparisons judged slower "
                f"{row['comparisons_slower']:.1%}, cells {row['cells_slower']:.1%} "
                f"({row['draws']} draws)"
            )
        for s in (acquisition.get("fitted") or {}).get("scenarios", []):
            span = list(s["measured_slowdown_percent"].values())
            what = s.get("scenario") or f"passes-{s['passes']}"
            lines.append(
                f"  verdict e2e: {what} ({s['class']}, measured "
                + (f"{min(span):+.0f}% to {max(span):+.0f}%" if span else "nothing")
                + f"): exit 2 in {s['exit_2_rate']:.0%} of {s['runs']} runs; cells slower "
                f"{s['verdict_rates']['slower']:.0%}, possibly slower "
                f"{s['verdict_rates']['possibly_slower']:.0%}, undecided "
                f"{s['verdict_rates'].get('undecided', 0):.0%}, unchanged "
                f"{s['verdict_rates']['unchanged']:.0%}"
            )
            for goal in s["goals"]:
                lines.append(
                    f"    goal {goal['goal']}: {goal['value']:.1%}, "
                    + ("met" if goal["met"] else "NOT met")
                )
    for failure in status["failures"]:
        lines.append(f"  failure: {failure}")
    console.print("\n".join(map(terminal_text, lines)), markup=False, highlight=False)
