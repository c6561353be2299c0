"""How often the verdict is wrong on this host: false positives and detection rates.

Draws comparisons from real A/A timing samples of this machine (the demo suite run
many times with many reps, each run its own process) and from the same samples with
a slowdown injected into the candidate's trials, then reports for

- the threshold rule alone (a cell more than 20% slower by median: exit 2),
- the verdict without a calibration (Mann-Whitney U, Holm over the 8 cells),
- the verdict with a calibration (8 other runs of the samples as the calibration),
- the calibrated verdict with ``--recheck 5`` (the candidate run's next 5 trials of a
  flagged cell, as a same-process recheck measures them): both the exit-2 rate (any
  flag left standing) and the confirmed ``slower`` rate,
- the demo's own workflow, no calibration with the same-process recheck (exit 2),
- the calibrated verdict with the recheck's 5 trials taken from a third run (another
  process and moment, as ``harness recheck`` later measures them): the exit-2 rate,
- the verdict with a *paired* recheck of 5 (``--recheck 5 --paired``): the flagged
  cells' baseline and candidate trials from one paired session (two worker processes of
  the same code asked in turn, as :mod:`harness.run.paired.coordinator` measures them; the
  slowdown injected into the candidate side): the exit-2 rate and the confirmed
  ``slower`` rate,

the false-positive rate per comparison (any of the 8 cells flagged or confirmed) and
the detection rate per slowdown (the fraction of cells flagged or confirmed) at 3, 5
and 9 reps. Usage::

    python benchmarks/verdict_power.py --collect 24 --samples /var/tmp/aa   # 24 demo runs, 14 reps
    python benchmarks/verdict_power.py --collect-paired 20 --samples /var/tmp/aa  # paired sessions
    python benchmarks/verdict_power.py --samples /var/tmp/aa [--draws 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import source_identity

from harness.run.demo import DEMO_STORAGE_ID, demo_folder, write_demo_suite
from harness.run.paired.baseline_code import BaselineCode
from harness.run.paired.workers import PairedSpec, measure_paired
from harness.run.provenance import SourceTracker
from harness.verdict.calibration import CalibratedNull
from harness.verdict.cells import decide_cells
from harness.verdict.comparison import collect_cells

SLOWDOWNS = (0.0, 0.05, 0.10, 0.20, 0.30, 0.50)
REPS = (3, 5, 9)
RECHECK = 5
CALIBRATION_RUNS = 8
CALIBRATION_SETS = 12
THRESHOLD = 20.0


def collect(samples: Path, runs: int, reps: int) -> None:
    """Run the demo ``runs`` times (own process each) with ``reps`` rounds into ``samples``."""
    samples.mkdir(parents=True, exist_ok=True)
    for i in range(1, runs + 1):
        out = samples / f"run{i:02d}"
        if (out / "loading.json").exists():
            continue
        command = [
            sys.executable,
            "-m",
            "harness",
            "run",
            "io-scale",
            "--demo",
            "--reps",
            str(reps),
        ]
        command += ["--output-dir", str(out), "--history-dir", str(samples / "history")]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        print(f"collected run {i}/{runs}", file=sys.stderr)


def collect_paired(samples: Path, sessions: int, rounds: int) -> None:
    """``sessions`` paired sessions of this code against itself: every demo cell, ``rounds``
    rounds, two worker processes asked in turn (the paired recheck's own measurement)."""
    folder = samples / "paired"
    folder.mkdir(parents=True, exist_ok=True)
    tracker = SourceTracker().start()
    checkout, fingerprint = tracker.checkout, tracker.start_fingerprint
    with demo_folder() as demo:
        suite = write_demo_suite(demo)
        cells = [
            (acq, fmt, cache)
            for acq in ("demo-u8", "demo-u16")
            for fmt in ("hdf5", "qem")
            for cache in ("cold", "cached")
        ]
        spec = PairedSpec(
            root=str(suite.root), manifest=str(suite.manifest), backend="cpu",
            storage_id=DEMO_STORAGE_ID, representation="dense", fresh_index=False,
            threads=None, first_index=1, acquisitions=("demo-u8", "demo-u16"),
        )  # fmt: skip
        for i in range(1, sessions + 1):
            out = folder / f"s{i:02d}.json"
            if out.exists():
                continue
            measured = measure_paired(
                spec, cells, rounds,
                baseline=BaselineCode(checkout, "this checkout"), candidate_tree=checkout,
                expected={"baseline": fingerprint, "candidate": fingerprint},
                scratch=demo / f"workers{i}",
            )  # fmt: skip
            out.write_text(json.dumps(measured))
            print(f"collected paired session {i}/{sessions}", file=sys.stderr)


def load_paired(samples: Path) -> list[dict]:
    """Per cell, the (baseline, candidate) seconds of each round of each paired session
    under ``samples/paired`` (kept trials of the same trial index)."""
    sessions = []
    for path in sorted((samples / "paired").glob("s*.json")):
        doc = json.loads(path.read_text())

        def by_round(trials):
            return {
                ((t["acquisition"], t["format"], t["cache_state"]), t["trial_index"]): t["seconds"]
                for t in trials
                if t["kept"]
            }

        base, cand = by_round(doc["baseline_trials"]), by_round(doc["candidate_trials"])
        pairs: dict = {}
        for (key, index), seconds in sorted(cand.items()):
            if (key, index) in base:
                pairs.setdefault(key, []).append((base[key, index], seconds))
        sessions.append(pairs)
    return sessions


def load_samples(samples: Path) -> list[dict]:
    runs = []
    for path in sorted(samples.glob("*/loading.json")):
        doc = json.loads(path.read_text())
        runs.append(collect_cells(doc))
    return runs


def _rechecked(base, cand, verdict, trials, **options):
    """The verdict after a recheck of the cells ``verdict`` flagged, with ``trials``;
    ``verdict`` itself when none was flagged."""
    flagged = {cell.key: trials[cell.key] for cell in verdict if cell.flagged and trials[cell.key]}
    if not flagged:
        return verdict
    return decide_cells(base, cand, threshold_percent=THRESHOLD, recheck=flagged, **options)


def _paired(base, cand, verdict, session, slowdown, rounds=RECHECK):
    """The verdict after a paired recheck of the flagged cells (``rounds`` rounds), from
    one paired session."""
    flagged = [cell.key for cell in verdict if cell.flagged]
    if not flagged:
        return verdict
    return decide_cells(
        base,
        cand,
        threshold_percent=THRESHOLD,
        paired={k: [(b, c * (1 + slowdown)) for b, c in session[k][:rounds]] for k in flagged},
        bootstrap_resamples=100,
    )


def simulate(
    runs: list[dict], draws: int, seed: int, paired=(), paired_rounds: int = RECHECK
) -> list[dict]:
    rng = np.random.default_rng(seed)
    keys = sorted(runs[0])
    n_runs = len(runs)
    sets = [
        sorted(rng.choice(n_runs, CALIBRATION_RUNS, replace=False).tolist())
        for _ in range(CALIBRATION_SETS)
    ]
    rows = []
    for reps in REPS:
        nulls = [
            CalibratedNull({k: [runs[i][k][:reps] for i in members] for k in keys})
            for members in sets
        ]
        for slowdown in SLOWDOWNS:
            n = draws if slowdown == 0 else max(draws // 3, 100)
            tally = {
                name: [0, 0]
                for name in (
                    "rule",
                    "mwu",
                    "calibrated",
                    "recheck",
                    "recheck_slower",
                    "recheck_plain",
                    "recheck_later",
                    "paired",
                    "paired_slower",
                )
            }
            for _ in range(n):
                s = int(rng.integers(CALIBRATION_SETS))
                others = [i for i in range(n_runs) if i not in sets[s]]
                b, c, d = rng.choice(others, 3, replace=False)
                base = {k: runs[b][k][:reps] for k in keys}
                cand = {k: [v * (1 + slowdown) for v in runs[c][k][:reps]] for k in keys}
                extra = {
                    k: [v * (1 + slowdown) for v in runs[c][k][reps : reps + RECHECK]] for k in keys
                }
                rule = [np.median(cand[k]) / np.median(base[k]) - 1 > THRESHOLD / 100 for k in keys]
                mwu = decide_cells(base, cand, threshold_percent=THRESHOLD, bootstrap_resamples=100)
                cal = decide_cells(base, cand, threshold_percent=THRESHOLD, calibration=nulls[s])
                # calibrated, with the same-process recheck (the candidate run's next trials)
                rechecked = _rechecked(base, cand, cal, extra, calibration=nulls[s])
                # the demo's workflow: no calibration, the same-process recheck
                plain = _rechecked(base, cand, mwu, extra, bootstrap_resamples=100)
                # `harness recheck` later: the recheck's trials from another process and moment
                later_trials = {
                    k: [v * (1 + slowdown) for v in runs[d][k][reps : reps + RECHECK]] for k in keys
                }
                later = _rechecked(base, cand, cal, later_trials, calibration=nulls[s])
                session = paired[int(rng.integers(len(paired)))] if paired else None
                pair = (
                    _paired(base, cand, mwu, session, slowdown, paired_rounds) if session else mwu
                )
                outcomes = {
                    "paired": [x.flagged for x in pair],
                    "paired_slower": [x.verdict.value == "slower" for x in pair],
                    "recheck_plain": [x.flagged for x in plain],
                    "recheck_later": [x.flagged for x in later],
                    "rule": rule,
                    "mwu": [x.verdict.value == "slower" for x in mwu],
                    "calibrated": [x.verdict.value == "slower" for x in cal],
                    "recheck": [x.flagged for x in rechecked],
                    "recheck_slower": [x.verdict.value == "slower" for x in rechecked],
                }
                for name, cells in outcomes.items():
                    tally[name][0] += any(cells)
                    tally[name][1] += sum(cells)
            row = {"reps": reps, "slowdown": slowdown, "draws": n}
            for name, (any_cell, cells) in tally.items():
                row[f"{name}_comparison"] = any_cell / n
                row[f"{name}_cells"] = cells / (n * len(keys))
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
    return rows


def spread_table(runs: list[dict], paired: list[dict], reps: int = RECHECK) -> list[str]:
    """Per cell: the spread (sd of the log ratio of medians of ``reps`` trials) between two
    independent runs; within a paired session of the same code, the sd of the log of the
    median pair ratio (the paired verdict's change) of ``reps`` rounds."""
    lines = [
        f"| cell | between runs: sd of log ratio of medians ({reps} trials each) "
        f"| paired session: sd of log median pair ratio ({reps} rounds) |",
        "|---|---:|---:|",
    ]
    for key in sorted(runs[0]):
        medians = [float(np.median(r[key][:reps])) for r in runs]
        between = [
            np.log(medians[j] / medians[i])
            for i in range(len(runs))
            for j in range(len(runs))
            if i != j
        ]
        within = [np.median([np.log(c / b) for b, c in session[key][:reps]]) for session in paired]
        inside = f"{np.std(within):.3f}" if within else "-"
        lines.append(f"| {'/'.join(key)} | {np.std(between):.3f} | {inside} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=Path, required=True, help="folder of A/A demo runs")
    parser.add_argument("--collect", type=int, default=0, metavar="N", help="collect N runs first")
    parser.add_argument("--collect-reps", type=int, default=max(REPS) + RECHECK)
    parser.add_argument(
        "--collect-paired", type=int, default=0, metavar="N", help="collect N paired sessions"
    )
    parser.add_argument("--draws", type=int, default=1000, help="A/A comparisons per rep count")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument(
        "--paired-rounds",
        type=int,
        default=RECHECK,
        metavar="K",
        help=f"rounds of the simulated paired recheck (default {RECHECK}; sessions hold 10)",
    )
    args = parser.parse_args()
    if args.collect:
        collect(args.samples, args.collect, args.collect_reps)
    if args.collect_paired:
        collect_paired(args.samples, args.collect_paired, RECHECK * 2)
    runs = load_samples(args.samples)
    paired = load_paired(args.samples)
    if len(runs) < CALIBRATION_RUNS + 2:
        parser.error(f"need at least {CALIBRATION_RUNS + 2} runs in {args.samples}")
    started = time.perf_counter()
    rows = simulate(runs, args.draws, args.seed, paired, args.paired_rounds)
    load = os.getloadavg()[0]
    print(
        f"# {len(runs)} A/A runs and {len(paired)} paired sessions from {args.samples}, "
        f"{source_identity()}, "
        f"load average {load:.1f}, {time.perf_counter() - started:.0f} s"
    )
    print(
        "| reps | slowdown | rule: any cell | verdict (no calibration): any / cells "
        "| verdict (calibrated): any / cells | calibrated + recheck 5, exit 2: any / cells "
        "| calibrated + recheck 5, confirmed: any / cells "
        "| no calibration + recheck 5, exit 2: any / cells "
        "| calibrated + recheck 5 in another run, exit 2: any / cells "
        f"| paired recheck {args.paired_rounds}, exit 2: any / cells "
        f"| paired recheck {args.paired_rounds}, confirmed: any / cells |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['reps']} | {r['slowdown']:.0%} | {r['rule_comparison']:.1%} / {r['rule_cells']:.1%} "
            f"| {r['mwu_comparison']:.1%} / {r['mwu_cells']:.1%} "
            f"| {r['calibrated_comparison']:.1%} / {r['calibrated_cells']:.1%} "
            f"| {r['recheck_comparison']:.1%} / {r['recheck_cells']:.1%} "
            f"| {r['recheck_slower_comparison']:.1%} / {r['recheck_slower_cells']:.1%} "
            f"| {r['recheck_plain_comparison']:.1%} / {r['recheck_plain_cells']:.1%} "
            f"| {r['recheck_later_comparison']:.1%} / {r['recheck_later_cells']:.1%} "
            f"| {r['paired_comparison']:.1%} / {r['paired_cells']:.1%} "
            f"| {r['paired_slower_comparison']:.1%} / {r['paired_slower_cells']:.1%} |"
        )
    print()
    for line in spread_table(runs, paired):
        print(line)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
