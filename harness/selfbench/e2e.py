"""The verdict judged against truth: A/A runs and real slowdowns of known size.

From one revision of a git repository (``git archive``) a baseline tree is made and, per
slowdown scenario, a candidate tree whose CPU loaders (``load_arina`` and the CPU
``load_qem``) do extra work over the loaded array after loading it:

- ``P`` (a whole number): P extra passes (``int(data.sum())``, the kind of change issue 40
  measured); P = 0 is the A/A scenario, the baseline tree itself. A pass costs the same
  in every cell, so the slowdown differs per cell (the heavier a cell's decode, the less);
- ``S%``: passes over slices of the array until S% of the load's own time has passed
  again, a slowdown of about S% in every cell (stage ``share-S``).

Each run
of a scenario is the README's workflow, each command its own process running that tree's
code:

    harness run io-scale --demo --backend cpu --history-dir H --output-dir RUN/a
    harness run io-scale --demo --backend cpu --history-dir H --output-dir RUN/b \\
        --baseline SHA --recheck K --baseline-tree BASE

(the A/A candidate pairs from its own tree). The true slowdown of each scenario is
measured, not assumed: per cell, the median over its runs of the candidate run's median
over the median over its runs of the baseline run's median (main trials, before any
recheck; beside it, ``paired_slowdown_percent``, the median change of the cell's paired
rechecks, the slowdown as both codes measured one after the other in worker processes).
Per scenario: exit codes, the rate of exit 2 and the cells' final verdicts,
against issue 40's goals (:func:`goals`). ``harness run self --verdict-e2e RUNS`` records
it (docs/self-benchmark.md); ``benchmarks/verdict_e2e.py`` prints it.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

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
SHARE_PATCH = """

# verdict_e2e: a known slowdown, passes over slices of the loaded array for {share}% of
# the load's own time
import time as _e2e_time  # noqa: E402
_unslowed_{name} = {name}


def {name}(*args, **kwargs):  # noqa: F811
    started = _e2e_time.perf_counter()
    acquisition = _unslowed_{name}(*args, **kwargs)
    if acquisition.data is not None:
        flat = np.asarray(acquisition.data).reshape(-1)
        step = max(1, flat.size // 64)
        now = _e2e_time.perf_counter()
        until, start = now + (now - started) * {share} / 100, 0
        while _e2e_time.perf_counter() < until:
            int(flat[start:start + step].sum(dtype=np.uint64))
            start = (start + step) % flat.size
    return acquisition
"""
VERDICTS = ("slower", "possibly_slower", "undecided", "unchanged", "faster")
#: Other work for a contended host: sums over a 64 MB array, the CPU and memory traffic of
#: another engineer's tests, at the lowest priority (nice 19), as those ran.
CONTENDER = """
import numpy as np
a = np.ones(8_000_000, dtype=np.uint64)
while True:
    int(a.sum())
    a[::4096] += 1
"""
CONTENDER_NICE = 19


def _contender_setup() -> None:
    """In the contender before it runs: the lowest priority, and an end with its parent
    (Linux ``PR_SET_PDEATHSIG``), so that a killed e2e run leaves no load behind."""
    os.nice(CONTENDER_NICE)
    with contextlib.suppress(OSError, AttributeError):
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@contextlib.contextmanager
def contending(workers: int):
    """``workers`` processes of :data:`CONTENDER` at nice 19 while the block runs (0: none),
    ended afterwards however the block ends."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", CONTENDER],
            preexec_fn=_contender_setup,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(workers)
    ]
    try:
        yield [p.pid for p in processes]
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def parse_scenario(token: str | int) -> tuple[str, int]:
    """``("passes", P)`` for a whole number P >= 0, ``("share", S)`` for ``S%`` (S >= 1).

    Raises ValueError naming the token otherwise.
    """
    text = str(token).strip()
    try:
        if text.endswith("%"):
            share = int(text[:-1])
            if share >= 1:
                return ("share", share)
        else:
            passes = int(text)
            if passes >= 0:
                return ("passes", passes)
    except ValueError:
        pass
    raise ValueError(
        f"scenario {text!r}: give extra passes (a whole number, 0 for A/A) or a share of the "
        "load's own time (e.g. 25%)"
    )


def stage_name(token: str | int) -> str:
    """The scenario's stage in the record: ``passes-P`` or ``share-S``."""
    kind, amount = parse_scenario(token)
    return f"{kind}-{amount}"


def export_tree(repo: Path, revision: str, target: Path) -> None:
    """``git archive REVISION`` of ``repo`` into ``target`` (a tree without local changes)."""
    target.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", revision], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)


def slowed_tree(base: Path, target: Path, scenario: str | int) -> None:
    """A copy of ``base`` whose CPU loaders do the extra work of ``scenario``
    (:func:`parse_scenario`: P extra passes, or passes for S% of the load's own time)."""
    kind, amount = parse_scenario(scenario)
    shutil.copytree(base, target)
    for relative, name in SLOWED.items():
        path = target / relative
        text = path.read_text(encoding="utf-8")
        if f"def {name}(" not in text or "import numpy as np" not in text:
            raise ValueError(f"verdict e2e: {relative} has no {name} to slow down")
        patch = (
            PATCH.format(name=name, passes=amount)
            if kind == "passes"
            else SHARE_PATCH.format(name=name, share=amount)
        )
        path.write_text(text + patch, encoding="utf-8")


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
            "original_change_percent": (c.get("recheck") or {}).get("original_change_percent"),
            "notes": c.get("notes", []),
        }
        for c in doc["comparison"]["cells"]
    }
    return result


def summarise(scenario: str | int, runs: list[dict]) -> dict:
    """Exit codes, verdict rates and the measured true slowdown of one scenario."""
    kind, amount = parse_scenario(scenario)
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
    # the same slowdown as the paired rechecks saw it: both codes at one moment, in worker
    # processes (a second measurement of the truth, to hold the first against)
    paired_changes: dict[str, list[float]] = collections.defaultdict(list)
    for r in done:
        if (r.get("pairing") or {}).get("paired"):
            for cell, v in r["cells"].items():
                if v.get("rechecked"):
                    paired_changes[cell].append(v["change_percent"])
    main = [sum(r.get("outliers_main", [0, 0])[i] for r in done) for i in (0, 1)]
    paired = [sum(r.get("outliers_paired", [0, 0])[i] for r in done) for i in (0, 1)]
    return {
        "outliers_main": main,
        "outliers_paired": paired,
        "scenario": stage_name(scenario),
        "passes": amount if kind == "passes" else None,
        "share_percent": amount if kind == "share" else None,
        "large_not_flagged": _large_not_flagged(done, truth),
        "paired_slowdown_percent": {
            cell: statistics.median(values) for cell, values in sorted(paired_changes.items())
        },
        "runs": len(runs),
        "completed": len(done),
        "contended_runs": sum(1 for r in done if "contended" in (r.get("host_load") or [])),
        "exit_counts": {str(k): v for k, v in sorted(exits.items(), key=str)},
        "exit_2_rate": exits.get(2, 0) / max(len(runs), 1),
        "cells": sum(verdicts.values()),
        "verdict_rates": {v: verdicts.get(v, 0) / cells for v in VERDICTS},
        "measured_slowdown_percent": truth,
        "cell_verdicts": {
            cell: dict(
                collections.Counter(r["cells"][cell]["verdict"] for r in done if cell in r["cells"])
            )
            for cell in truth
        },
    }


def _large_not_flagged(done: list[dict], truth: dict[str, float]) -> list[dict]:
    """Every verdict of a cell measured +50% or more that was not flagged, with what the
    run saw (its change, interval, original change and notes): the record keeps why."""
    return [
        {"run": r["run"], "cell": cell, **r["cells"][cell]}
        for r in done
        for cell, slowdown in sorted(truth.items())
        if slowdown >= LARGE_SLOWDOWN_PERCENT
        and cell in r["cells"]
        and r["cells"][cell]["verdict"] not in ("slower", "possibly_slower")
    ]


#: Issue 40's goals on this workflow; a cell's class is its measured true slowdown.
AA_MAX_EXIT_2 = 0.05
AA_MAX_SLOWER_CELLS = 0.01
LARGE_SLOWDOWN_PERCENT = 50.0
LARGE_MIN_SLOWER_CELLS = 0.9
MODERATE_SLOWDOWN_PERCENT = 25.0
MODERATE_MIN_EXIT_2 = 0.8


def scenario_class(summary: dict) -> str:
    """``aa``; ``large`` (some cell measured +50% or more), ``moderate`` (some +25% or
    more) or ``small``."""
    if summary.get("passes") == 0:
        return "aa"
    high = max(summary["measured_slowdown_percent"].values(), default=float("-inf"))
    if high >= LARGE_SLOWDOWN_PERCENT:
        return "large"
    if high >= MODERATE_SLOWDOWN_PERCENT:
        return "moderate"
    return "small"


def large_cell_rates(summary: dict) -> dict[str, float] | None:
    """Verdict rates over the cells measured +50% or more (None: there are none)."""
    counts: collections.Counter = collections.Counter()
    for cell, truth in summary["measured_slowdown_percent"].items():
        if truth >= LARGE_SLOWDOWN_PERCENT:
            counts.update(summary["cell_verdicts"].get(cell, {}))
    total = sum(counts.values())
    return {v: counts.get(v, 0) / total for v in VERDICTS} if total else None


def goals(summary: dict) -> list[dict]:
    """The goals that apply to this scenario, each ``{"goal", "value", "met"}``."""
    rates, exit2 = summary["verdict_rates"], summary["exit_2_rate"]
    kind = scenario_class(summary)
    if kind == "aa":
        return [
            {"goal": f"A/A: exit 2 in at most {AA_MAX_EXIT_2:.0%} of runs", "value": exit2,
             "met": exit2 <= AA_MAX_EXIT_2},
            {"goal": f"A/A: slower in at most {AA_MAX_SLOWER_CELLS:.0%} of cells",
             "value": rates["slower"], "met": rates["slower"] <= AA_MAX_SLOWER_CELLS},
        ]  # fmt: skip
    if kind == "large":
        large = large_cell_rates(summary) or {v: 0.0 for v in VERDICTS}
        return [
            {"goal": "cells +50% or more: exit 2 in every run", "value": exit2,
             "met": exit2 == 1},
            {"goal": f"cells +50% or more: slower in at least {LARGE_MIN_SLOWER_CELLS:.0%} "
                     "of them", "value": large["slower"],
             "met": large["slower"] >= LARGE_MIN_SLOWER_CELLS},
            {"goal": "cells +50% or more: unchanged never", "value": large["unchanged"],
             "met": large["unchanged"] == 0},
        ]  # fmt: skip
    if kind == "moderate":
        return [
            {"goal": f"cells +25% or more: exit 2 in at least {MODERATE_MIN_EXIT_2:.0%} of "
                     "runs", "value": exit2, "met": exit2 >= MODERATE_MIN_EXIT_2},
        ]  # fmt: skip
    return []


def keep_runs(work: Path, target: Path) -> int:
    """Copy every run's reports (``STAGE/run-NN/{a,b}/loading.json``: trials, recheck
    trials, contention samples, verdicts) and ``runs.jsonl`` from ``work`` to ``target``,
    a new folder; returns the number of reports copied."""
    target.mkdir(parents=True)
    copied = 0
    for report in sorted(work.glob("*/run-*/[ab]/loading.json")):
        destination = target / report.relative_to(work)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(report, destination)
        copied += 1
    if (work / "runs.jsonl").exists():
        shutil.copyfile(work / "runs.jsonl", target / "runs.jsonl")
    return copied


def run_scenarios(
    work: Path,
    repo: Path,
    revision: str,
    passes: list[str | int],
    runs: int,
    recheck: int,
    extra: list[str] = (),
    on_run=None,
    contend: int = 0,
) -> list[dict]:
    """Every scenario's runs (``WORK/runs.jsonl``) and summaries, in ``passes`` order
    (each a :func:`parse_scenario` token).

    ``on_run(stage, index, result)`` is told of each finished run (progress), ``stage``
    being :func:`stage_name`. ``contend`` processes of other work (:func:`contending`)
    share the host during every run: the contended scenario, repeatable.
    """
    import time

    base = work / "trees" / "base"
    export_tree(repo, revision, base)
    summaries = []
    with open(work / "runs.jsonl", "w", encoding="utf-8") as out:
        for p in passes:
            stage = stage_name(p)
            candidate = base if stage == "passes-0" else work / "trees" / f"slow-{stage}"
            if candidate != base and not candidate.exists():
                slowed_tree(base, candidate, p)
            results = []
            for i in range(runs):
                started = time.monotonic()
                folder = work / stage / f"run-{i:02d}"
                with contending(contend):
                    result = one_run(
                        base.resolve(), candidate.resolve(), folder, recheck, list(extra)
                    )
                result.update(
                    scenario=stage, seconds=round(time.monotonic() - started, 3), contend=contend
                )
                out.write(json.dumps(result, sort_keys=True) + "\n")
                out.flush()
                results.append(result)
                if on_run is not None:
                    on_run(stage, i, result)
            summary = summarise(p, results)
            summary["class"] = scenario_class(summary)
            summary["goals"] = goals(summary)
            summary["run_seconds"] = [r["seconds"] for r in results]
            summaries.append(summary)
    return summaries
