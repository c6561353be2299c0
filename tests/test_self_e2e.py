"""The verdict's end-to-end check as a recorded self-benchmark (issue 40): scenario goals
judged from the measured slowdown, the record's rows carrying the rates that the
published results cite."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness.report import parse_report
from harness.selfbench import e2e
from harness.selfbench.kind import SelfConfig, SelfRun

REPO = Path(__file__).resolve().parents[1]


def _summary(passes: int, truth: list[float], exit2: float, **rates: float) -> dict:
    """A scenario whose every cell had the verdicts in ``rates`` (of 100 runs)."""
    verdict_rates = dict.fromkeys(e2e.VERDICTS, 0.0)
    verdict_rates.update(rates)
    cells = {f"c{i}": t for i, t in enumerate(truth)}
    return {
        "scenario": e2e.stage_name(passes),
        "passes": passes,
        "measured_slowdown_percent": cells,
        "exit_2_rate": exit2,
        "verdict_rates": verdict_rates,
        "cell_verdicts": {
            c: {v: round(r * 100) for v, r in verdict_rates.items() if r} for c in cells
        },
    }


@pytest.mark.parametrize(
    ("summary", "kind", "met"),
    [
        (_summary(0, [3, -2], 0.05, unchanged=1.0), "aa", [True, True]),
        (_summary(0, [3, -2], 0.10, unchanged=0.99, slower=0.01), "aa", [False, True]),
        (_summary(0, [3, -2], 0.0, unchanged=0.98, slower=0.02), "aa", [True, False]),
        (_summary(2, [55, 80], 1.0, slower=0.9, possibly_slower=0.1), "large", [True] * 3),
        (_summary(2, [55, 80], 1.0, slower=0.95, unchanged=0.05), "large", [True, True, False]),
        (_summary(2, [55, 80], 0.95, slower=0.95), "large", [False, True, True]),
        (_summary(1, [26, 40], 0.8, slower=0.5), "moderate", [True]),
        (_summary(1, [26, 40], 0.75, slower=0.5), "moderate", [False]),
        (_summary(1, [12, 20], 0.2), "small", []),
        (_summary(1, [12, 40], 0.8), "moderate", [True]),
    ],
)
def test_goals_follow_the_measured_slowdown(summary, kind, met) -> None:
    assert e2e.scenario_class(summary) == kind
    assert [g["met"] for g in e2e.goals(summary)] == met


def test_the_large_goals_count_only_the_cells_measured_fifty_percent_or_more() -> None:
    summary = _summary(2, [80, 30], 1.0, slower=1.0)
    # the +30% cell was called unchanged every time: no concern of the +50% goal
    summary["cell_verdicts"]["c1"] = {"unchanged": 100}
    assert e2e.large_cell_rates(summary) == {
        "slower": 1.0,
        "possibly_slower": 0.0,
        "undecided": 0.0,
        "unchanged": 0.0,
        "faster": 0.0,
    }
    assert all(g["met"] for g in e2e.goals(summary))
    summary["cell_verdicts"]["c0"] = {"slower": 9, "unchanged": 1}
    assert [g["met"] for g in e2e.goals(summary)] == [True, True, False]


def _fake_scenarios(work, repo, revision, passes, runs, recheck, extra=(), on_run=None, contend=0):
    _fake_scenarios.contend = contend
    summaries = []
    for p in passes:
        for i in range(runs):
            on_run(e2e.stage_name(p), i, {"cells": {}, "seconds": 10.0 + i, "exit": 2 if p else 0})
        summary = _summary(p, [60.0] if p else [1.0], 1.0 if p else 0.0,
                           slower=1.0 if p else 0.0, unchanged=0.0 if p else 1.0)  # fmt: skip
        summary.update(runs=runs, completed=runs)
        summary["class"] = e2e.scenario_class(summary)
        summary["goals"] = e2e.goals(summary)
        summaries.append(summary)
    return summaries


def test_the_e2e_scenarios_are_trials_and_rated_rows_of_a_valid_record(tmp_path, monkeypatch):
    monkeypatch.setattr(e2e, "run_scenarios", _fake_scenarios)
    config = SelfConfig(
        output_dir=tmp_path / "out", records=(3,), repeat=1, verdict_draws=0,
        verdict_e2e_runs=2, e2e_passes=(0, 2), e2e_repo=REPO, progress=False,
    )  # fmt: skip
    outcome = SelfRun(config).execute()
    doc = parse_report(outcome.report_path)  # the schema
    rows = {s["stage"]: s for s in doc["summaries"] if s["acquisition"] == "verdict-e2e"}
    assert set(rows) == {"passes-0", "passes-2"}
    assert rows["passes-0"]["exit_2_rate"] == 0.0 and rows["passes-0"]["unchanged_rate"] == 1.0
    assert rows["passes-2"]["exit_2_rate"] == 1.0 and rows["passes-2"]["slower_rate"] == 1.0
    assert rows["passes-2"]["n"] == 2 and rows["passes-2"]["median"] == pytest.approx(10.5)
    fitted = next(a for a in doc["acquisitions"] if a["id"] == "verdict-e2e")["fitted"]
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    assert fitted["tree"]["revision"] == head
    assert [s["class"] for s in fitted["scenarios"]] == ["aa", "large"]
    assert doc["conditions"]["parameters"]["verdict_e2e"] == {
        "runs": 2, "passes": [0, 2], "recheck": 5,
    }  # fmt: skip


@pytest.mark.slow  # one real A/A run of the README's workflow: two demo runs, a recheck
def test_one_real_aa_run_is_recorded(tmp_path) -> None:
    config = SelfConfig(
        output_dir=tmp_path / "out", records=(3,), repeat=1, verdict_draws=0,
        verdict_e2e_runs=1, e2e_passes=(0,), e2e_repo=REPO, progress=False,
    )  # fmt: skip
    outcome = SelfRun(config).execute()
    doc = json.loads(outcome.report_path.read_bytes())
    assert not doc["status"]["failures"], doc["status"]["failures"]
    (row,) = [s for s in doc["summaries"] if s["acquisition"] == "verdict-e2e"]
    assert row["n"] == row["n_kept"] == 1 and 0 <= row["exit_2_rate"] <= 1
    (scenario,) = next(a for a in doc["acquisitions"] if a["id"] == "verdict-e2e")["fitted"][
        "scenarios"
    ]
    assert scenario["completed"] == 1 and len(scenario["measured_slowdown_percent"]) == 8


def test_an_undecided_large_cell_is_not_unchanged_and_its_run_is_kept() -> None:
    runs = [
        {"run": f"run-{i:02d}", "exit": 2, "baseline_medians": {"c0": 1.0, "c1": 1.0},
         "candidate_medians": {"c0": 1.6, "c1": 1.6},
         "cells": {"c0": {"verdict": "slower"},
                   "c1": {"verdict": "undecided" if i == 0 else "slower", "notes": ["why"]}}}
        for i in range(10)
    ]  # fmt: skip
    summary = e2e.summarise("2", runs)
    summary["class"] = e2e.scenario_class(summary)
    assert summary["scenario"] == "passes-2" and summary["class"] == "large"
    assert e2e.large_cell_rates(summary)["undecided"] == pytest.approx(0.05)
    assert [g["met"] for g in e2e.goals(summary)] == [True, True, True]  # unchanged never
    # the record keeps what the run saw for every unflagged verdict of a large cell
    assert summary["large_not_flagged"] == [
        {"run": "run-00", "cell": "c1", "verdict": "undecided", "notes": ["why"]}
    ]


def test_the_paired_rechecks_give_a_second_measure_of_the_slowdown() -> None:
    def run(i: int, paired: bool) -> dict:
        cells = {
            "c0": {"verdict": "slower", "rechecked": True, "change_percent": 20.0 + i},
            "c1": {"verdict": "slower", "rechecked": False, "change_percent": 99.0},
        }
        return {"run": f"run-{i:02d}", "exit": 2, "pairing": {"paired": paired},
                "baseline_medians": {"c0": 1.0, "c1": 1.0},
                "candidate_medians": {"c0": 1.5, "c1": 1.5}, "cells": cells}  # fmt: skip

    summary = e2e.summarise(2, [run(0, True), run(1, True), run(2, True), run(3, False)])
    # the median of the paired rechecks' changes; unpaired and unrechecked runs are not in it
    assert summary["paired_slowdown_percent"] == {"c0": pytest.approx(21.0)}
    assert summary["measured_slowdown_percent"]["c0"] == pytest.approx(50.0)


@pytest.mark.parametrize(
    ("token", "parsed"),
    [("0", ("passes", 0)), (2, ("passes", 2)), ("25%", ("share", 25)), (" 40% ", ("share", 40))],
)
def test_scenarios_are_passes_or_a_share_of_the_load(token, parsed) -> None:
    assert e2e.parse_scenario(token) == parsed
    assert e2e.stage_name(token) == f"{parsed[0]}-{parsed[1]}"


@pytest.mark.parametrize("token", ["-1", "0%", "x", "2.5", "25%%", ""])
def test_a_bad_scenario_is_refused_naming_it(token) -> None:
    with pytest.raises(ValueError, match=f"scenario {token.strip()!r}"):
        e2e.parse_scenario(token)


_LOADER = """import time

import numpy as np


class _Acquisition:
    data = np.arange(1 << 16, dtype=np.uint16)


def {name}(path):
    until = time.perf_counter() + 0.04
    while time.perf_counter() < until:
        pass
    return _Acquisition()
"""


def test_a_share_scenario_slows_each_loader_by_its_share_of_the_load(tmp_path) -> None:
    import importlib.util
    import time

    base = tmp_path / "base"
    for relative, name in e2e.SLOWED.items():
        (base / relative).parent.mkdir(parents=True, exist_ok=True)
        (base / relative).write_text(_LOADER.replace("{name}", name), encoding="utf-8")
    e2e.slowed_tree(base, tmp_path / "slow", "50%")
    for relative, name in e2e.SLOWED.items():
        spec = importlib.util.spec_from_file_location(
            f"slowed_{name}", tmp_path / "slow" / relative
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        started = time.perf_counter()
        acquisition = getattr(module, name)("unused")
        seconds = time.perf_counter() - started
        assert acquisition.data.size == 1 << 16
        # the extra work lasts half the load's own time: at least +50%, and it stops
        assert 0.06 <= seconds < 0.2, seconds
    # a tree without the loader is refused, naming it
    (base / "quantem/stem4d/io/arina.py").write_text("import numpy as np\n", encoding="utf-8")
    with pytest.raises(ValueError, match="has no load_arina"):
        e2e.slowed_tree(base, tmp_path / "again", "25%")


def test_run_self_refuses_a_bad_scenario_naming_it(tmp_path, capsys) -> None:
    from harness.cli import main

    code = main(["run", "self", "--output-dir", str(tmp_path / "out"), "--verdict-e2e", "1",
                 "--e2e-passes", "0,fast"])  # fmt: skip
    assert code == 64
    assert "'fast'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_share_scenario_is_a_stage_of_a_valid_record(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(e2e, "run_scenarios", _fake_scenarios)
    config = SelfConfig(
        output_dir=tmp_path / "out", records=(3,), repeat=1, verdict_draws=0,
        verdict_e2e_runs=1, e2e_passes=(0, "25%"), e2e_repo=REPO, progress=False,
    )  # fmt: skip
    doc = parse_report(SelfRun(config).execute().report_path)  # the schema
    rows = {s["stage"] for s in doc["summaries"] if s["acquisition"] == "verdict-e2e"}
    assert rows == {"passes-0", "share-25"}
    assert doc["conditions"]["parameters"]["verdict_e2e"]["passes"] == [0, "25%"]


def test_the_contended_scenario_is_recorded_and_its_runs_kept(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(e2e, "run_scenarios", _fake_scenarios)
    config = SelfConfig(
        output_dir=tmp_path / "out", records=(3,), repeat=1, verdict_draws=0,
        verdict_e2e_runs=1, e2e_passes=(0,), e2e_repo=REPO, progress=False, e2e_contend=1,
    )  # fmt: skip
    doc = parse_report(SelfRun(config).execute().report_path)
    assert _fake_scenarios.contend == 1
    assert doc["conditions"]["parameters"]["verdict_e2e"]["contend"] == 1
    # every run's reports are kept, nothing else of the work folder
    work = tmp_path / "work"
    for side in "ab":
        (work / "passes-0" / "run-00" / side).mkdir(parents=True)
        (work / "passes-0" / "run-00" / side / "loading.json").write_text("{}")
    (work / "passes-0" / "run-00" / "h").mkdir()
    (work / "runs.jsonl").write_text("{}\n")
    assert e2e.keep_runs(work, tmp_path / "kept") == 2
    kept = sorted(
        str(p.relative_to(tmp_path / "kept")) for p in (tmp_path / "kept").rglob("*.json*")
    )
    assert kept == [
        "passes-0/run-00/a/loading.json",
        "passes-0/run-00/b/loading.json",
        "runs.jsonl",
    ]


def test_contending_starts_low_priority_work_and_ends_it() -> None:
    import os

    with e2e.contending(1) as pids:
        (pid,) = pids
        assert os.getpriority(os.PRIO_PROCESS, pid) == e2e.CONTENDER_NICE
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with e2e.contending(0) as pids:
        assert pids == []


def test_run_self_refuses_negative_contention_and_an_existing_keep_folder(tmp_path, capsys):
    from harness.cli import main

    common = ["run", "self", "--output-dir", str(tmp_path / "out"), "--verdict-e2e", "1"]
    assert main([*common, "--e2e-contend", "-1"]) == 64
    assert "--e2e-contend" in capsys.readouterr().err
    (tmp_path / "kept").mkdir()
    assert main([*common, "--e2e-keep", str(tmp_path / "kept")]) == 64
    assert "exists" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
