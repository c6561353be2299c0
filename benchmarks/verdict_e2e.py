"""The README's regression check against truth: A/A runs and real slowdowns of known size.

From one revision of this repository (``git archive``) the tool makes a baseline tree
and, per slowdown scenario, a candidate tree whose CPU loaders (``load_arina`` and the
CPU ``load_qem``) make P extra passes over the loaded array (``int(data.sum())``, the
kind of change issue 40 measured; P = 0 is the A/A scenario, the baseline tree itself).
Each run of a scenario is the README's workflow, each command its own process:

    harness run io-scale --demo --backend cpu --history-dir H --output-dir RUN/a  # baseline tree
    harness run io-scale --demo --backend cpu --history-dir H --output-dir RUN/b \\
        --baseline SHA --recheck K --baseline-tree BASE                           # candidate tree

(the A/A candidate pairs from its own tree, whose fingerprint is the baseline's). The
true slowdown of each scenario is measured, not assumed: per cell, the median over its
runs of the candidate run's median over the median over its runs of the baseline run's
median (each from its main trials, before any recheck). Per scenario it reports the exit
codes, the rates of exit 2, and the cells' final verdicts (``slower``,
``possibly_slower``, ``unchanged``, ``faster``), against issue 40's goals; every run is
kept in ``WORK/runs.jsonl`` and the summary in ``WORK/summary.json``.

The goals' measurement (20 runs each: A/A, about +50%, about +25%; choose the passes
from a short run's measured factors) needs a quiet host, e.g.:

    flock -x /var/tmp/cpu-measure.lock python benchmarks/verdict_e2e.py \\
        --work /var/tmp/e2e --passes 0,6,3 --runs 20
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
#: The loader modules patched, and the function each rebinds at its end.
SLOWED = {
    "quantem/stem4d/io/arina.py": "load_arina",
    "quantem/stem4d/io/qem/reader.py": "load_qem",
}
PATCH = """

# verdict_e2e: a known slowdown, {passes} extra passes over the loaded array
_unslowed_{name} = {name}


def {name}(*args, **kwargs):  # noqa: F811
    acquisition = _unslowed_{name}(*args, **kwargs)
    if acquisition.data is not None:
        for _ in range({passes}):
            int(np.asarray(acquisition.data).sum(dtype=np.uint64))
    return acquisition
"""
VERDICTS = ("slower", "possibly_slower", "unchanged", "faster")


def export_tree(repo: Path, revision: str, target: Path) -> None:
    """``git archive REVISION`` of ``repo`` into ``target`` (a tree without local changes)."""
    target.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", revision], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)


def slowed_tree(base: Path, target: Path, passes: int) -> None:
    """A copy of ``base`` whose CPU loaders make ``passes`` extra passes over the array."""
    shutil.copytree(base, target)
    for relative, name in SLOWED.items():
        path = target / relative
        text = path.read_text(encoding="utf-8")
        if f"def {name}(" not in text or "import numpy as np" not in text:
            raise SystemExit(f"verdict_e2e: {relative} has no {name} to slow down")
        path.write_text(text + PATCH.format(name=name, passes=passes), encoding="utf-8")


def harness(tree: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m harness ARGS`` running the code of ``tree``, from inside it."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        cwd=tree, env=env, capture_output=True, text=True, check=False, timeout=1800,
    )  # fmt: skip


def _medians(doc: dict) -> dict[str, float]:
    seconds: dict[str, list[float]] = collections.defaultdict(list)
    for t in doc["trials"]:
        if t["kept"]:
            seconds["/".join((t["acquisition"], t["format"], t["cache_state"]))].append(
                t["seconds"]
            )
    return {cell: statistics.median(values) for cell, values in seconds.items()}


def outliers(trials: list[dict], factor: float = 1.5) -> tuple[int, int]:
    """(outliers, trials): kept trials more than ``factor`` times their cell's fastest in
    ``trials`` (one process's, or one paired worker's), issue 40's defect 3 measure."""
    by_cell: dict[tuple, list[float]] = collections.defaultdict(list)
    for t in trials:
        if t.get("kept"):
            by_cell[(t["acquisition"], t["format"], t["cache_state"])].append(t["seconds"])
    slow = sum(1 for values in by_cell.values() for v in values if v > factor * min(values))
    return slow, sum(len(values) for values in by_cell.values())


def one_run(base: Path, candidate: Path, folder: Path, recheck: int, extra: list[str]) -> dict:
    """Baseline run from ``base``, candidate run from ``candidate`` against it."""
    history = folder / "h"
    common = ["run", "io-scale", "--demo", "--backend", "cpu", "--history-dir", str(history)]
    first = harness(base, *common, "--output-dir", str(folder / "a"))
    result: dict = {"run": folder.name, "baseline_exit": first.returncode}
    if first.returncode != 0:
        result["error"] = (first.stdout + first.stderr)[-2000:]
        return result
    baseline_doc = json.loads((folder / "a" / "loading.json").read_bytes())
    sha = hashlib.sha256((folder / "a" / "loading.json").read_bytes()).hexdigest()
    pairing = [] if candidate == base else ["--baseline-tree", str(base)]
    second = harness(candidate, *common, "--output-dir", str(folder / "b"),
                     "--baseline", sha[:12], "--recheck", str(recheck), *pairing, *extra)  # fmt: skip
    result["exit"] = second.returncode
    path = folder / "b" / "loading.json"
    if not path.exists():
        result["error"] = (second.stdout + second.stderr)[-2000:]
        return result
    doc = json.loads(path.read_bytes())
    result["host_load"] = [baseline_doc["status"].get("host_load"), doc["status"].get("host_load")]
    result["baseline_medians"] = _medians(baseline_doc)
    result["candidate_medians"] = _medians(doc)
    block = doc.get("recheck") or {}
    result["pairing"] = block.get("pairing")
    # outliers of the main trials (each run's own process) and of each paired worker's
    main = [outliers(d["trials"]) for d in (baseline_doc, doc)]
    result["outliers_main"] = [sum(m[0] for m in main), sum(m[1] for m in main)]
    workers = [block.get("trials") or [], (block.get("paired") or {}).get("baseline_trials") or []]
    paired = [outliers(w) for w in workers] if block.get("paired") else []
    result["outliers_paired"] = [sum(m[0] for m in paired), sum(m[1] for m in paired)]
    result["cells"] = {
        "/".join((c["acquisition"], c["format"], c["cache_state"])): {
            "verdict": c["verdict"],
            "change_percent": c["change_percent"],
            "ci_percent": c["ci_percent"],
            "rechecked": bool(c.get("recheck")),
        }
        for c in doc["comparison"]["cells"]
    }
    return result


def summarise(passes: int, runs: list[dict]) -> dict:
    """Exit codes, verdict rates and the measured true slowdown of one scenario."""
    done = [r for r in runs if "cells" in r]
    exits = collections.Counter(r.get("exit") for r in runs)
    verdicts = collections.Counter(v["verdict"] for r in done for v in r["cells"].values())
    cells = sum(verdicts.values()) or 1
    truth = {}
    for cell in sorted({c for r in done for c in r["baseline_medians"]}):
        base = [r["baseline_medians"][cell] for r in done if cell in r["baseline_medians"]]
        cand = [r["candidate_medians"][cell] for r in done if cell in r["candidate_medians"]]
        if base and cand:
            truth[cell] = (statistics.median(cand) / statistics.median(base) - 1) * 100
    main = [sum(r.get("outliers_main", [0, 0])[i] for r in done) for i in (0, 1)]
    paired = [sum(r.get("outliers_paired", [0, 0])[i] for r in done) for i in (0, 1)]
    return {
        "outliers_main": main,
        "outliers_paired": paired,
        "passes": passes,
        "runs": len(runs),
        "completed": len(done),
        "contended_runs": sum(1 for r in done if "contended" in (r.get("host_load") or [])),
        "exit_counts": {str(k): v for k, v in sorted(exits.items(), key=str)},
        "exit_2_rate": exits.get(2, 0) / max(len(runs), 1),
        "cells": sum(verdicts.values()),
        "verdict_rates": {v: verdicts.get(v, 0) / cells for v in VERDICTS},
        "measured_slowdown_percent": truth,
    }


def goal_lines(summary: dict) -> list[str]:
    """Issue 40's goals for this scenario (by its measured slowdown), met or not."""
    truth = list(summary["measured_slowdown_percent"].values())
    rates, exit2 = summary["verdict_rates"], summary["exit_2_rate"]
    if not truth:
        return []
    if summary["passes"] == 0:
        return [
            f"  goal A/A exit 2 <= 5% of runs: {exit2:.0%} {'met' if exit2 <= 0.05 else 'NOT met'}",
            f"  goal A/A slower <= 1% of cells: {rates['slower']:.1%} "
            f"{'met' if rates['slower'] <= 0.01 else 'NOT met'}",
        ]
    low = min(truth)
    if low >= 50:
        ok = exit2 == 1 and rates["slower"] >= 0.9 and rates["unchanged"] == 0
        return [f"  goal +50% or more: exit 2 every run, slower >= 90%, unchanged never: "
                f"{'met' if ok else 'NOT met'}"]  # fmt: skip
    if low >= 25:
        return [f"  goal about +25%: exit 2 in >= 80% of runs: {exit2:.0%} "
                f"{'met' if exit2 >= 0.8 else 'NOT met'}"]  # fmt: skip
    return ["  (measured slowdown below +25% in some cell: no goal applies to all cells)"]


def render(summaries: list[dict]) -> str:
    lines = []
    for s in summaries:
        truth = s["measured_slowdown_percent"].values()
        span = f"{min(truth):+.1f}% to {max(truth):+.1f}%" if truth else "-"
        rates = ", ".join(f"{v} {s['verdict_rates'][v]:.1%}" for v in VERDICTS)
        name = "A/A" if s["passes"] == 0 else f"{s['passes']} extra passes"
        lines.append(
            f"{name}: "
            f"measured slowdown per cell {span}; runs {s['runs']} (completed {s['completed']}, "
            f"contended {s['contended_runs']}); exits {s['exit_counts']}, exit 2 "
            f"{s['exit_2_rate']:.0%}; cells {s['cells']}: {rates}"
        )
        lines += goal_lines(s)
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
        default="0,6,3",
        help="extra passes over the loaded array per scenario, comma-separated; 0 is A/A "
        "(default 0,6,3)",
    )
    parser.add_argument("--recheck", type=int, default=5, help="recheck rounds (default 5)")
    parser.add_argument(
        "--repo", type=Path, default=CHECKOUT, help="git repository (default: this)"
    )
    parser.add_argument("--revision", default="HEAD", help="revision to export (default HEAD)")
    parser.add_argument(
        "--no-paired", action="store_true", help="the candidate runs --no-paired (the control)"
    )
    args = parser.parse_args(argv)
    try:
        passes = [int(p) for p in args.passes.split(",")]
    except ValueError:
        parser.error(f"--passes {args.passes!r}: give whole numbers, e.g. 0,6,3")
    if args.runs < 1 or any(p < 0 for p in passes):
        parser.error("--runs must be at least 1 and --passes at least 0")
    if args.work.exists():
        parser.error(f"--work {args.work} exists; give a new folder")
    base = args.work / "trees" / "base"
    export_tree(args.repo, args.revision, base)
    extra = ["--no-paired"] if args.no_paired else []
    summaries = []
    with open(args.work / "runs.jsonl", "w", encoding="utf-8") as out:
        for p in passes:
            candidate = base if p == 0 else args.work / "trees" / f"slow-{p}"
            if p and not candidate.exists():
                slowed_tree(base, candidate, p)
            runs = []
            for i in range(args.runs):
                started = time.time()
                folder = args.work / f"passes-{p}" / f"run-{i:02d}"
                result = one_run(base.resolve(), candidate.resolve(), folder, args.recheck, extra)
                result.update(passes=p, seconds=round(time.time() - started, 1))
                out.write(json.dumps(result, sort_keys=True) + "\n")
                out.flush()
                runs.append(result)
                print(f"passes {p} run {i}: exit {result.get('exit')}, {result['seconds']} s",
                      file=sys.stderr)  # fmt: skip
            summaries.append(summarise(p, runs))
    (args.work / "summary.json").write_text(json.dumps(summaries, indent=1, sort_keys=True))
    print(render(summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
