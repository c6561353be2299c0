"""``harness run self``: the harness's own scale as a recorded kind (docs/self-benchmark.md).

A run at a tiny size registers, renders (its own record page), verifies and compares
against a baseline of the same kind; a stage whose check fails makes the run a
correctness failure; the report's schema refuses what its stages cannot hold.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _postgres import postgres_socket, postgres_url  # noqa: F401 (fixtures)

from harness.cli import main
from harness.errors import ReportValidationError
from harness.history.verify import verify_history
from harness.report import validate_report
from harness.selfbench import stages
from harness.selfbench.power import MAX_FALSE_POSITIVE, power_table

REPO = Path(__file__).resolve().parents[1]
TINY = ["--records", "3", "--repeat", "1", "--verdict-draws", "2"]


def _run(tmp_path: Path, name: str, *extra: str) -> tuple[int, dict]:
    out = tmp_path / name
    code = main(["run", "self", "--output-dir", str(out), *TINY, *extra])
    return code, json.loads((out / "self.json").read_text())


@pytest.mark.slow
def test_a_tiny_run_registers_renders_verifies_and_compares(tmp_path: Path, capsys) -> None:
    history = tmp_path / "history"
    code, doc = _run(tmp_path, "a", "--history-dir", str(history))
    assert code == 0, doc["status"]["failures"]
    assert doc["schema"] == "quantem-harness/self-report"
    stages_run = {(s["acquisition"], s["stage"]) for s in doc["summaries"]}
    assert stages_run == {
        *(("records-3", s) for s in ("register", "query", "render_full", "verify")),
        ("verdict-power", "verdict_draws"),
    }
    scale = next(a for a in doc["acquisitions"] if a["id"] == "records-3")
    assert scale["outputs"]["records"]["shape"] == [3]
    assert scale["fitted"]["records_at_end"] == 3 + 2  # one more record per round
    code, second = _run(tmp_path, "b", "--history-dir", str(history), "--baseline", str(
        tmp_path / "a" / "self.json"))  # fmt: skip
    assert code in (0, 2) and second["status"]["performance"] in ("pass", "review")
    # same generator and size: the same scale identity, so the two are comparable
    assert second["acquisitions"][0]["source_master_sha256"] == scale["source_master_sha256"]
    result = verify_history(history)
    assert result.records == 2 and not result.errors
    sha = next(history.glob("records/**/*.json")).stem
    assert main(["render", "index", "--history-dir", str(history)]) == 0
    page = next(history.glob(f"dashboard/records/{sha[:8]}*.html")).read_text()
    assert "the harness measuring itself" in page  # the self kind's own template
    capsys.readouterr()
    compare = main(["compare", str(tmp_path / "b" / "self.json"), "--baseline",
                    str(tmp_path / "a" / "self.json"), "--format", "json"])  # fmt: skip
    verdict = json.loads(capsys.readouterr().out)
    assert compare in (0, 2) and "incomparable" not in json.dumps(verdict.get("performance"))
    bigger = _run(tmp_path, "c", "--records", "4", "--baseline", str(tmp_path / "a" / "self.json"))
    assert bigger[1]["status"]["performance"] == "incomparable"  # another size


@pytest.mark.slow
def test_a_stage_whose_check_fails_is_a_correctness_failure(tmp_path, monkeypatch) -> None:
    real = stages.ScaleStages.render_full

    def render_dropping_a_record(self, plots="none"):
        render = real(self, plots)
        return lambda: {**render(), "records": render()["records"][1:]}

    monkeypatch.setattr(stages.ScaleStages, "render_full", render_dropping_a_record)
    code, doc = _run(tmp_path, "a")
    assert code == 1
    assert doc["status"]["correctness"] == "failed"
    assert any("index.json lists" in failure for failure in doc["status"]["failures"])


@pytest.mark.slow
def test_the_postgres_stage_registers_new_records(tmp_path, postgres_url) -> None:  # noqa: F811
    assert main(["history", "init-db", postgres_url]) == 0
    code, doc = _run(tmp_path, "a", "--postgres-url", postgres_url)
    assert code == 0, doc["status"]["failures"]
    assert doc["conditions"]["representation"] == "folder+postgres"
    assert any(s["stage"] == "postgres_register" for s in doc["summaries"])


def test_the_schema_refuses_a_trial_of_an_unknown_stage() -> None:
    doc = json.loads((REPO / "tests" / "report_fixtures" / "self-report.v1.json").read_text())
    validate_report(doc)
    doc["trials"][0]["stage"] = doc["trials"][0]["cache_state"] = "not-a-stage"
    with pytest.raises(ReportValidationError, match="unknown acquisition or stage"):
        validate_report(doc)


def test_the_verdict_power_table_holds_its_bounds() -> None:
    table = {row["slowdown"]: row for row in power_table(8)}
    assert table[0.0]["comparisons_slower"] <= MAX_FALSE_POSITIVE
    assert table[0.30]["cells_slower"] > 0.0  # a 30% slowdown is seen at all
    assert power_table(3) == power_table(3)  # seeded: the same table every time


def test_bad_sizes_are_usage_errors(tmp_path: Path) -> None:
    assert main(["run", "self", "--output-dir", str(tmp_path), "--records", "0"]) == 64
    assert not (tmp_path / "self.json").exists()


BENCHMARKS = sorted(p for p in (REPO / "benchmarks").iterdir() if p.name != "__pycache__")


def test_benchmarks_holds_at_most_8_files() -> None:
    assert len(BENCHMARKS) <= 8, [p.name for p in BENCHMARKS]


@pytest.mark.slow
@pytest.mark.parametrize(
    "script", [p for p in BENCHMARKS if p.suffix == ".py" and not p.name.startswith("_")],
    ids=lambda p: p.name,
)  # fmt: skip
def test_every_benchmark_script_has_a_working_help(script: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and "usage" in done.stdout.lower(), done.stderr[-2000:]
