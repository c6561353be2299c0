"""The README's regression check against truth: A/A runs and real slowdowns of known size.

A thin driver of :mod:`harness.selfbench.e2e` (its docstring says what a run is and how
the true slowdown is measured) that prints one block per scenario and keeps every run in
WORK/runs.jsonl and the summaries in WORK/summary.json. The recorded form of the same
measurement is ``harness run self --verdict-e2e RUNS`` (docs/self-benchmark.md), whose
record the published results cite. The goals' measurement needs a quiet host, e.g.:

    python benchmarks/verdict_e2e.py --work /var/tmp/e2e --passes 0,2,25% --runs 20
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(CHECKOUT))

from harness.selfbench.e2e import VERDICTS, parse_scenario, run_scenarios  # noqa: E402


def render(summaries: list[dict]) -> str:
    lines = []
    for s in summaries:
        truth = s["measured_slowdown_percent"].values()
        span = f"{min(truth):+.1f}% to {max(truth):+.1f}%" if truth else "-"
        rates = ", ".join(f"{v} {s['verdict_rates'][v]:.1%}" for v in VERDICTS)
        name = "A/A" if s["passes"] == 0 else s["scenario"]
        lines.append(
            f"{name}: measured slowdown per cell {span}; runs {s['runs']} (completed "
            f"{s['completed']}, contended {s['contended_runs']}); exits {s['exit_counts']}, "
            f"exit 2 {s['exit_2_rate']:.0%}; cells {s['cells']}: {rates}"
        )
        paired = s.get("paired_slowdown_percent") or {}
        if paired:
            lines.append(
                "  paired rechecks measured: "
                + ", ".join(f"{cell} {value:+.0f}%" for cell, value in paired.items())
            )
        for goal in s["goals"]:
            lines.append(f"  goal {goal['goal']}: {goal['value']:.1%} "
                         f"{'met' if goal['met'] else 'NOT met'}")  # fmt: skip
        if not s["goals"]:
            lines.append("  (measured slowdown below +25% in some cell: no goal applies)")
        lines.append(
            "  trials > 1.5x their cell's fastest (defect 3): main "
            + " of ".join(map(str, s["outliers_main"]))
            + ", paired "
            + " of ".join(map(str, s["outliers_paired"]))
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Prints one block per scenario; WORK/runs.jsonl and WORK/summary.json keep it all.",
    )
    parser.add_argument("--work", type=Path, required=True, help="a new folder for the runs")
    parser.add_argument("--runs", type=int, default=20, help="runs per scenario (default 20)")
    parser.add_argument(
        "--passes",
        default="0,2,25%",
        help="the scenarios, comma-separated: P extra passes over the loaded array (0 is "
        "A/A), or S%% for passes during S%% of the load's own time (about +S%% in every "
        "cell; default 0,2,25%%)",
    )
    parser.add_argument("--recheck", type=int, default=5, help="recheck rounds (default 5)")
    parser.add_argument(
        "--repo", type=Path, default=CHECKOUT, help="git repository (default: this)"
    )
    parser.add_argument("--revision", default="HEAD", help="revision to export (default HEAD)")
    parser.add_argument(
        "--no-paired", action="store_true", help="the candidate runs --no-paired (the control)"
    )
    parser.add_argument(
        "--contend",
        type=int,
        default=0,
        help="N processes of other work at nice 19 during every run (the contended "
        "scenario; default 0)",
    )
    args = parser.parse_args(argv)
    try:
        passes = [p for p in args.passes.split(",") if parse_scenario(p)]
    except ValueError as exc:
        parser.error(f"--passes {args.passes!r}: {exc}")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.contend < 0:
        parser.error("--contend must be 0 or more")
    if args.work.exists():
        parser.error(f"--work {args.work} exists; give a new folder")

    # a timeout's SIGTERM ends the runs as an exception would: the load and the run's
    # process are ended, not left behind
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))

    def progress(stage: str, i: int, result: dict) -> None:
        print(f"{stage} run {i}: exit {result.get('exit')}, {result['seconds']} s",
              file=sys.stderr)  # fmt: skip

    summaries = run_scenarios(
        args.work, args.repo, args.revision, passes, args.runs, args.recheck,
        ["--no-paired"] if args.no_paired else [], on_run=progress, contend=args.contend,
    )  # fmt: skip
    (args.work / "summary.json").write_text(json.dumps(summaries, indent=1, sort_keys=True))
    print(render(summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
