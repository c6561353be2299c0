"""`harness history` and `harness render` commands, called in-process and as a subprocess."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.render import check_rendered
from harness.report import dump_report
from harness.testing import make_example_report, write_example_reports

FIXTURES = Path(__file__).parent / "report_fixtures"


def test_register_list_show(tmp_path: Path, capsys) -> None:
    paths = write_example_reports(tmp_path / "in", [1, 2])
    history = str(tmp_path / "h")
    assert (
        main(["history", "register", *map(str, paths), "--history-dir", history, "--defer-plots"])
        == 0
    )
    out = capsys.readouterr().out
    assert out.count("stored ") == 2
    assert (
        main(["history", "register", str(paths[0]), "--history-dir", history, "--defer-plots"]) == 0
    )
    assert "already stored" in capsys.readouterr().out
    assert main(["history", "list", "--history-dir", history]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert len(listing) == 3 and "test-nvme" in listing[1]
    sha = listing[1].split()[0]
    assert main(["history", "show", sha[:6], "--history-dir", history]) == 0
    shown = capsys.readouterr().out
    assert "correctness=passed" in shown and "scan-b" in shown
    assert main(["history", "show", sha[:6], "--history-dir", history, "--raw"]) == 0
    raw = capsys.readouterr().out
    assert raw.encode() in {p.read_bytes() for p in paths}


def test_register_refuses_invalid_report_with_json_path(tmp_path: Path, capsys) -> None:
    doc = make_example_report(1)
    doc["trials"][2]["residency_before"] = 3.0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    assert main(["history", "register", str(bad), "--history-dir", str(tmp_path / "h")]) == 1
    err = capsys.readouterr().err
    assert "$.trials[2].residency_before" in err and str(bad) in err
    assert not (tmp_path / "h").exists()


def test_import_earlier_reports_from_folders(tmp_path: Path, capsys) -> None:
    old = tmp_path / "old"
    (old / "run-1").mkdir(parents=True)
    (old / "run-2").mkdir()
    shutil.copy(FIXTURES / "loading-report.v0.json", old / "run-1" / "loading.json")
    (old / "run-2" / "loading.json").write_bytes(dump_report(make_example_report(2)))
    (old / "run-2" / "notes.json").write_text("{}")  # not a report name: ignored
    assert main(["history", "import", str(old), "--out", str(tmp_path / "h"), "--defer-plots"]) == 0
    assert capsys.readouterr().out.count("stored ") == 2
    (old / "run-3").mkdir()
    (old / "run-3" / "loading.json").write_text(
        '{"schema": "quantem-harness/loading-report", "sche'
    )
    assert main(["history", "import", str(old), "--out", str(tmp_path / "h2")]) == 1
    assert "truncated JSON" in capsys.readouterr().err
    assert not (tmp_path / "h2").exists()
    assert (
        main(
            [
                "history",
                "import",
                str(old),
                "--out",
                str(tmp_path / "h2"),
                "--skip-invalid",
                "--defer-plots",
            ]
        )
        == 1
    )
    captured = capsys.readouterr()
    assert captured.out.count("stored ") == 2 and "refused" in captured.err


def test_render_index_to_another_folder(tmp_path: Path) -> None:
    paths = write_example_reports(tmp_path / "in", [1])
    history = tmp_path / "h"
    assert (
        main(["history", "register", str(paths[0]), "--history-dir", str(history), "--defer-plots"])
        == 0
    )
    out = tmp_path / "site"
    assert main(["render", "index", "--history-dir", str(history), "--out", str(out)]) == 0
    assert {p.name for p in out.iterdir()} == {
        "index.json",
        "timings.csv",
        "README.md",
        "index.html",
        "plots",
        "dashboard",
    }
    assert len(list((out / "plots").glob("*.png"))) == 1
    assert not (history / "plots").exists()  # the history's own views are untouched


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse errors
        return int(exc.code)


@pytest.mark.parametrize(
    "argv",
    [
        ["history"],
        ["history", "register"],
        ["history", "show"],
        ["history", "import", "x.json"],  # --out is required
        ["render"],
        ["render", "index", "--all-plots", "--no-plots"],
        ["history", "list", "--limit", "many"],
    ],
)
def test_usage_errors_exit_64(argv: list[str], tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert _exit_code(argv) == 64


def test_usage_error_through_a_subprocess_has_no_traceback(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "harness", "history", "show", "xyz"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert completed.returncode == 64, (completed.stdout, completed.stderr)
    assert "Traceback" not in completed.stderr and "SHA-256 prefix" in completed.stderr


def test_render_index_is_incremental_and_full_rewrites(tmp_path: Path) -> None:
    from harness.history.verify import verify_history

    paths = write_example_reports(tmp_path / "in", [1, 2])
    history = tmp_path / "h"
    assert (
        main(
            [
                "history",
                "register",
                *map(str, paths),
                "--history-dir",
                str(history),
                "--defer-plots",
            ]
        )
        == 0
    )
    csv = history / "timings.csv"
    edited = csv.read_bytes().replace(b"scan-a", b"scan-A", 1)  # same size: bookkeeping cannot tell
    csv.write_bytes(edited)
    assert main(["render", "index", "--history-dir", str(history)]) == 0
    assert csv.read_bytes() == edited
    assert [p.subject for p in verify_history(history, check_rendered=check_rendered).errors] == [
        "timings.csv"
    ]
    assert main(["render", "index", "--history-dir", str(history), "--full"]) == 0
    assert (
        verify_history(history, check_rendered=check_rendered).ok
        and not verify_history(history, check_rendered=check_rendered).problems
    )


def test_history_list_columns_stay_aligned_with_long_names(tmp_path: Path, capsys) -> None:
    from harness.report import dump_report
    from harness.testing import make_example_report

    history = tmp_path / "h"
    folder = tmp_path / "in"
    folder.mkdir()
    for seed, storage in ((1, "nvme"), (2, "a-very-long-storage-identifier-" + "x" * 40)):
        (folder / f"r{seed}.json").write_bytes(
            dump_report(make_example_report(seed, storage_id=storage))
        )
    # --history-dir like every other command (and --out, its older spelling)
    files = [str(p) for p in sorted(folder.iterdir())]
    assert main(["history", "import", *files, "--history-dir", str(history), "--defer-plots"]) == 0
    capsys.readouterr()
    assert main(["history", "list", "--history-dir", str(history)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and "x" * 40 in lines[2]
    starts = [line.index("passed") for line in lines[1:]]
    assert starts[0] == starts[1] == lines[0].index("correctness")
