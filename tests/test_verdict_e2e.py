"""End to end: history change points, demo A/A pairs with rechecks, calibrate then compare."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.history.store import register_reports
from harness.render import registration_renderer
from harness.report import dump_report, summarise_trials
from harness.testing import make_example_report

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # registering 20 reports and 8 permutation-tested series: seconds
def test_history_changes_reports_a_step_at_the_twelfth_record(tmp_path: Path, capsys) -> None:
    paths = []
    for i in range(20):
        doc = make_example_report(
            i,
            slowdown=1.3 if i >= 11 else 1.0,
            noise=0.03,
            created_utc=f"2026-11-{i + 1:02d}T08:00:00Z",
        )
        paths.append(tmp_path / f"r{i:02d}.json")
        paths[-1].write_bytes(dump_report(doc))
    history = tmp_path / "h"
    register_reports(history, paths, render=registration_renderer("defer"))
    argv = ["history", "changes", "--history-dir", str(history), "--repo", str(tmp_path)]
    assert main([*argv, "--format", "json"]) == 0
    series = json.loads(capsys.readouterr().out)
    assert len(series) == 8
    for cell in series:
        assert cell["ordered_by"] == "created_utc" and len(cell["series"]) == 20
        step = [c for c in cell["changes"] if c["index"] == 11]
        assert step, cell["changes"]  # the 12th record starts the new level
        assert step[0]["change_percent"] == pytest.approx(30, abs=8)
        assert step[0]["p_value"] <= 0.01
        assert step[0]["to_record"] == cell["series"][11]["sha256"]
    assert main(argv) == 0
    assert "#12" in capsys.readouterr().out
    assert main([*argv, "--key", "ffff"]) == 64


def _harness(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        check=False,
        timeout=900,
    )


@pytest.mark.slow
def test_demo_aa_pair_with_recheck_never_confirms_a_slowdown(tmp_path: Path) -> None:
    history = tmp_path / "h"
    first = _harness(
        "run",
        "io-scale",
        "--demo",
        "--history-dir",
        str(history),
        "--output-dir",
        str(tmp_path / "a"),
        cwd=tmp_path,
    )
    assert first.returncode == 0, first.stdout + first.stderr
    sha = hashlib.sha256((tmp_path / "a" / "loading.json").read_bytes()).hexdigest()
    second = _harness(
        "run",
        "io-scale",
        "--demo",
        "--history-dir",
        str(history),
        "--output-dir",
        str(tmp_path / "b"),
        "--baseline",
        sha[:12],
        "--recheck",
        "5",
        cwd=tmp_path,
    )
    report = json.loads((tmp_path / "b" / "loading.json").read_bytes())
    verdicts = {c["verdict"] for c in report["comparison"]["cells"]}
    assert "slower" not in verdicts  # an A/A pair never confirms a slowdown
    assert report["baseline"]["sha256"] == sha
    if "recheck" in report:  # flagged cells were measured again, as their own block
        assert all(t["trial_index"] >= 3 for t in report["recheck"]["trials"])
    # Never exit 1. Exit 0 is the usual outcome, but not a guarantee even on a quiet host:
    # the recheck (paired by default here: both codes are this checkout) measures both
    # sides at one moment, yet a flag can stand (archive/performance-diary.md: 1 of 20 real demo A/A pairs),
    # and that is review (exit 2) by design. How often that happens is measured, not
    # asserted: see benchmarks/verdict_power.py, benchmarks/verdict_e2e.py and
    # archive/performance-diary.md (verdict power).
    assert second.returncode in (0, 2), second.stdout + second.stderr
    cells = report["comparison"]["cells"]
    standing = [c for c in cells if c["verdict"] in ("possibly_slower", "slower")]
    assert (second.returncode == 2) == bool(standing), second.stdout
    rechecked = {tuple(key) for key in (report.get("recheck") or {}).get("cells", [])}
    baseline = json.loads((tmp_path / "a" / "loading.json").read_bytes())
    same_code = (
        report["provenance"]["source_fingerprint_start"]
        == baseline["provenance"]["source_fingerprint_end"]
    )  # False only when the shared checkout was edited between the two runs
    if "recheck" in report:  # the same code: paired by default, from this checkout
        pairing = report["recheck"]["pairing"]
        assert pairing["paired"] is same_code and pairing["requested"] == "default", pairing
        if same_code:
            assert report["recheck"]["paired"]["baseline_code"].endswith("(same fingerprint)")
        assert f"recheck: {'paired' if same_code else 'unpaired'} by default" in second.stdout
    for cell in standing:  # every flag left standing was measured again and says so
        key = (cell["acquisition"], cell["format"], cell["cache_state"])
        assert key in rechecked, key
        n = cell["recheck"]["n"]  # 5 rounds a look, up to 8 looks; undecided ones use all
        assert n % 5 == 0 and n <= 40 and (cell["verdict"] != "possibly_slower" or n == 40)
        assert bool(cell["recheck"].get("paired")) is same_code
        what = "paired recheck" if same_code else "recheck"
        said = (f"not cleared: the {what}'s", f"confirmed by the {what}", "on the original trials")
        assert any(s in note for note in cell["notes"] for s in said), cell


@pytest.mark.slow
def test_calibrate_demo_then_scaled_candidates(tmp_path: Path) -> None:
    history = tmp_path / "h"
    done = _harness(
        "calibrate",
        "io-scale",
        "--demo",
        "--allow-contended",  # a test host is often busy; the refusal is tested apart
        "--runs",
        "5",
        "--history-dir",
        str(history),
        "--output-dir",
        str(tmp_path / "cal"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    calibration = json.loads((tmp_path / "cal" / "calibration.json").read_bytes())
    assert len(calibration["runs"]) == 5 and len(calibration["cells"]) == 8
    baseline = tmp_path / "cal" / "run-01" / "loading.json"
    for factor, code in ((1.5, 2), (1.05, 0)):
        doc = json.loads(baseline.read_bytes())
        for trial in doc["trials"]:
            trial["seconds"] *= factor
        doc["summaries"] = summarise_trials(doc["trials"])
        candidate = tmp_path / f"candidate-{factor}.json"
        candidate.write_bytes(dump_report(doc))
        result = _harness(
            "compare",
            "--baseline",
            str(baseline),
            str(candidate),
            "--history-dir",
            str(history),
            "--format",
            "json",
            cwd=tmp_path,
        )
        assert result.returncode == code, result.stdout + result.stderr
        comparison = json.loads(result.stdout)
        assert comparison["calibration"]["sha256"] is not None
        cells = comparison["cells"]
        if factor == 1.05:
            # within the threshold: unchanged, or undecided where the 3-vs-3 interval of a
            # noisy cell reaches past it (never flagged, so exit 0)
            assert {c["verdict"] for c in cells} <= {"unchanged", "undecided"}
            for cell in cells:
                if cell["verdict"] == "undecided":
                    assert cell["ci_percent"][1] > 20.0, cell
            continue
        assert all(c["verdict"] in ("slower", "possibly_slower") for c in cells)
        for cell in cells:  # confirmed exactly when the calibrated, Holm-adjusted p allows it
            assert (cell["verdict"] == "slower") == (cell["p_adjusted"] <= 0.05)
        quiet = all(c["noise_floor_percent"] < 10 for c in calibration["cells"])
        if quiet:  # on a quiet host a 50% slowdown is confirmed from 3 trials in every cell
            assert {c["verdict"] for c in cells} == {"slower"}
