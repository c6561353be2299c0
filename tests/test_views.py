"""Views at 80 and 200 columns and for scripts (issue 35): no change or verdict is ever
cut, the wide table only where it fits, one unit per table, ``--json``/``--quiet``."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from harness.cli import main
from harness.compare import compare_reports
from harness.report import dump_report
from harness.testing import make_example_report
from harness.verdict.present import VERDICT_LABELS, format_percent, print_text
from harness.views.cells import CellView, cell_lines, print_cells
from harness.views.listing import folded_lines, print_listing

LONG_IDS = ("demo-u8-a-rather-long-acquisition-name", "demo-u16-a-rather-long-acquisition-name")


def _console(width: int, terminal: bool = True) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    console = Console(
        file=out, width=width, force_terminal=terminal, soft_wrap=True, color_system=None
    )
    return console, out


def _comparison(slowdown: float = 1.4):
    base = make_example_report(1, acquisition_ids=LONG_IDS)
    slow = make_example_report(3, acquisition_ids=LONG_IDS, slowdown=slowdown)
    return compare_reports(base, slow, 20.0, baseline_sha256="a" * 64, candidate_sha256="b" * 64)


@pytest.mark.parametrize("terminal", [True, False])
def test_compare_at_80_columns_shows_every_cells_change_and_verdict_uncut(terminal):
    comparison = _comparison()
    console, out = _console(80, terminal)
    print_text(comparison, console)
    text = out.getvalue()
    assert "…" not in text and "┃" not in text  # no cut cell, no table at 80 columns
    lines = text.splitlines()
    for cell in comparison.cells:
        head = f"{cell.acquisition} {cell.format} {cell.cache_state}:"
        first = next(line for line in lines if line.startswith(head))
        # the verdict and the change lead the cell's line, whole
        assert VERDICT_LABELS[cell.verdict] in first
        assert f"change {format_percent(cell.change_percent)}" in first
        assert len(first) <= 80
        assert f"{cell.baseline_median * 1e3:.2f}" in text
        assert f"{cell.candidate_median * 1e3:.2f}" in text


def test_compare_at_200_columns_is_one_table_in_ms():
    comparison = _comparison()
    console, out = _console(200)
    print_text(comparison, console)
    text = out.getvalue()
    assert "baseline ms" in text and "candidate ms" in text and "…" not in text
    table_rows = [line for line in text.splitlines() if line.startswith("│")]
    assert len(table_rows) == len(comparison.cells)
    assert " s " not in "".join(table_rows)  # one unit: ms, in the header


def test_cell_lines_fold_between_fields_never_inside_one():
    view = CellView(key_columns=("id",), value_columns=("a", "b", "c"))
    view.add_row(("cell",), ("x" * 30, "y" * 30, "z" * 30))
    lines = [line.plain for line in cell_lines(view, 50)]
    assert lines[0] == "cell: a " + "x" * 30
    assert lines[1:] == ["    b " + "y" * 30, "    c " + "z" * 30]
    # a table is drawn only where it fits on a terminal
    console, _out = _console(200)
    assert print_cells(console, view) == "table"
    console, _out = _console(200, terminal=False)
    assert print_cells(console, view) == "lines"


def _calibration_document() -> dict:
    cells = []
    for acquisition in LONG_IDS:
        for fmt in ("hdf5", "qem"):
            for cache in ("cold", "cached"):
                cells.append(
                    {
                        "acquisition": acquisition,
                        "format": fmt,
                        "cache_state": cache,
                        "ratio_quantiles": {"0.05": 0.91, "0.95": 1.123},
                        "noise_floor_percent": 13.7,
                        "mdc_percent": 31.4,
                        "false_positive_rule": 0.051,
                        "false_positive_verdict": 0.004,
                    }
                )
    return {
        "runs": [{}] * 8,
        "reps": 3,
        "comparison_key": "f5db000d46b107d6",
        "cells": cells,
        "regression_percent": 20.0,
        "comparison": {"false_positive_rule": 0.2, "false_positive_verdict": 0.01},
    }


@pytest.mark.parametrize("width", [80, 200])
def test_calibrate_table_at_80_and_200_columns(monkeypatch, capsys, width):
    from harness.commands import calibrate

    out = io.StringIO()
    monkeypatch.setattr(
        "harness.views.console.make_console",
        lambda **_: Console(file=out, width=width, force_terminal=True, soft_wrap=True),
    )
    calibrate.print_calibration(_calibration_document(), "c" * 64, "h")
    text = out.getvalue()
    assert "…" not in text
    assert text.count("+13.7%") == 8 and text.count("31.4%") == 8
    assert ("┃" in text) is (width == 200)
    assert f"calibration {'c' * 64}: stored in h" in text  # the whole hash, on one line


@pytest.mark.parametrize("width", [80, 200])
def test_history_changes_at_80_and_200_columns(tmp_path, monkeypatch, width):
    from harness.commands import history_changes
    from harness.history.store import register_reports
    from harness.render import registration_renderer

    paths = []
    for seed, slowdown in enumerate((1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0)):
        doc = make_example_report(
            seed,
            acquisition_ids=LONG_IDS[:1],
            slowdown=slowdown,
            created_utc=f"2026-11-30T0{seed}:00:00Z",
        )
        path = tmp_path / f"r{seed}.json"
        path.write_bytes(dump_report(doc))
        paths.append(path)
    history = tmp_path / "h"
    register_reports(history, paths, render=registration_renderer("defer"))
    out = io.StringIO()
    monkeypatch.setattr(
        history_changes,
        "make_console",
        lambda **_: Console(file=out, width=width, force_terminal=True, soft_wrap=True),
        raising=False,
    )
    monkeypatch.setattr(
        "harness.views.console.make_console",
        lambda **_: Console(file=out, width=width, force_terminal=True, soft_wrap=True),
    )
    assert main(["history", "changes", "--history-dir", str(history)]) == 0
    text = out.getvalue()
    assert "…" not in text
    cells = [f"{LONG_IDS[0]} {f} {c}" for f in ("hdf5", "qem") for c in ("cold", "cached")]
    if width == 80:
        lines = text.splitlines()
        for cell in cells:  # each cell's line, then its change point and change, uncut
            at = next(i for i, line in enumerate(lines) if line.endswith(f"{cell}:"))
            assert lines[at + 1].startswith("    change point ")
        assert all(len(line) <= 80 for line in lines if line.startswith("    "))
    else:
        assert "change point" in text and "before ms" in text and "┃" in text


def test_history_list_folds_on_a_narrow_terminal_and_stays_aligned_in_pipes():
    table = [
        ("record", "created_utc", "revision", "key"),
        ("58719936ce6b", "2026-12-05T03:09:34Z", "4074b6cc0e+", "f5db000d46b107d6"),
    ]

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Terminal()
    print_listing(table, stream=tty, width=40)
    assert tty.getvalue().splitlines() == folded_lines(table, 40)
    assert all(len(line) <= 40 for line in tty.getvalue().splitlines())
    pipe = io.StringIO()
    print_listing(table, stream=pipe, width=40)
    assert pipe.getvalue().splitlines()[0].split() == list(table[0])


def test_history_show_states_ms_and_key(tmp_path, capsys):
    from harness.history.store import register_reports
    from harness.render import registration_renderer

    path = tmp_path / "r.json"
    path.write_bytes(dump_report(make_example_report(1)))
    (stored,) = register_reports(tmp_path / "h", [path], render=registration_renderer("defer"))
    assert main(["history", "show", stored.sha256[:12], "--history-dir", str(tmp_path / "h")]) == 0
    out = capsys.readouterr().out
    assert "median ms" in out and "median s" not in out
    assert "\nkey " in out and "\ngroup " not in out
    assert main(["history", "list", "--key", "nope", "--history-dir", str(tmp_path / "h")]) == 0


# --- scripts: --json and --quiet ---------------------------------------------------------


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    base, slow = tmp_path / "base.json", tmp_path / "slow.json"
    base.write_bytes(dump_report(make_example_report(1)))
    slow.write_bytes(dump_report(make_example_report(3, slowdown=1.4)))
    return base, slow


def test_compare_quiet_is_one_line_of_sha256_and_verdict(pair, capsys):
    from harness.history.records import sha256_bytes

    base, slow = pair
    assert main(["compare", "--baseline", str(base), str(slow), "-q"]) == 2
    out = capsys.readouterr().out
    assert out == f"{sha256_bytes(slow.read_bytes())} review\n"


def test_compare_json_is_one_document(pair, capsys):
    base, slow = pair
    assert main(["compare", "--baseline", str(base), str(slow), "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["verdict"] == "review"


def test_json_and_quiet_exclude_each_other(pair):
    base, slow = pair
    with pytest.raises(SystemExit) as raised:
        main(["compare", "--baseline", str(base), str(slow), "--json", "-q"])
    assert raised.value.code != 0


# --- usage errors before any work --------------------------------------------------------


def _harness(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    return subprocess.run(
        [sys.executable, "-m", "harness", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_demo_reps_0_is_refused_before_any_data_is_written(tmp_path):
    done = _harness("run", "io-scale", "--demo", "--reps", "0", cwd=tmp_path)
    assert done.returncode == 64, done.stderr
    assert "--reps must be at least 1" in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []  # no harness-demo/, no harness-history/


def test_demo_backend_cuda_without_cuda_is_a_usage_error_naming_the_alternative(tmp_path):
    from quantem.stem4d.backends import cuda_available

    if cuda_available():
        pytest.skip("this host has CUDA: --backend cuda is allowed here")
    done = _harness("run", "io-scale", "--demo", "--backend", "cuda", cwd=tmp_path)
    assert done.returncode == 64, done.stderr
    assert "--backend cuda cannot run here" in done.stderr and "--backend cpu" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_native_without_binary_is_refused_before_the_demo_data(tmp_path):
    done = _harness("run", "io-scale", "--demo", "--backend", "native", cwd=tmp_path)
    assert done.returncode == 64, done.stderr
    assert "--native-binary" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_calibrate_too_few_runs_says_what_is_allowed(capsys):
    assert main(["calibrate", "io-scale", "--demo", "--runs", "3"]) == 64
    err = capsys.readouterr().err
    assert "--runs 3: give at least 5" in err and "pairs" not in err.split("(")[0][:10]


# --- the small things --------------------------------------------------------------------


def test_run_help_lists_every_compute_workload():
    from harness.commands.run import COMPUTE_WORKLOADS
    from harness.run.compute.workloads import WORKLOADS

    assert set(COMPUTE_WORKLOADS) == set(WORKLOADS)
    done = subprocess.run(
        [sys.executable, "-m", "harness", "run", "-h"],
        capture_output=True,
        text=True,
        env=dict(os.environ, COLUMNS="200"),
        check=True,
    )
    assert f"({', '.join(COMPUTE_WORKLOADS)})" in done.stdout and "ssb" in done.stdout


def test_load_of_a_directory_says_it_is_a_directory(tmp_path):
    import quantem.stem4d.io
    from quantem.stem4d.errors import SourceIsDirectoryError

    with pytest.raises(SourceIsDirectoryError, match="is a directory"):
        quantem.stem4d.io.load(tmp_path)
    with pytest.raises(IsADirectoryError):
        quantem.stem4d.io.load(tmp_path)


def test_history_readme_counts_in_the_singular(tmp_path):
    from harness.history.store import register_reports
    from harness.render import registration_renderer

    path = tmp_path / "r.json"
    path.write_bytes(dump_report(make_example_report(1)))
    register_reports(tmp_path / "h", [path], render=registration_renderer("now"))
    readme = (tmp_path / "h" / "README.md").read_text()
    assert "1 record in 1 comparison key." in readme and "group" not in readme.lower()
    index = (tmp_path / "h" / "index.html").read_text()
    assert "1 record in 1 comparison key." in index


# --- calibration runs are their own kind of record ---------------------------------------


def test_calibration_runs_are_tagged_and_never_the_default_candidate(tmp_path, capsys):
    from harness.history.store import register_reports
    from harness.render import registration_renderer

    ordinary = make_example_report(1, created_utc="2026-11-30T08:00:00Z")
    calibration = make_example_report(2, created_utc="2026-11-30T09:00:00Z")
    calibration["purpose"] = {"kind": "calibration", "run": 1, "runs": 5}
    paths = []
    for name, doc in (("ordinary", ordinary), ("calibration", calibration)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_bytes(dump_report(doc))  # the schema takes the purpose
    history = tmp_path / "h"
    first, second = register_reports(history, paths, render=registration_renderer("defer"))
    argv = ["compare", "--baseline", first.sha256[:12], "--history-dir", str(history), "-q"]
    assert main(argv) == 0
    # the newest record is the calibration run: the default candidate is the one before it
    assert capsys.readouterr().out == f"{first.sha256} pass\n"
    assert main(["history", "list", "--history-dir", str(history)]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].split()[-1] == "purpose"
    assert listed[1].split()[-1] == "-" and listed[2].split()[-1] == "1/5"
    assert second.sha256 != first.sha256


def test_calibration_run_flag_is_checked():
    from harness.commands.run import _parse_calibration_run
    from harness.errors import UsageError

    assert _parse_calibration_run("3/8") == {"kind": "calibration", "run": 3, "runs": 8}
    for bad in ("9/8", "x", "0/5"):
        with pytest.raises(UsageError, match="--calibration-run"):
            _parse_calibration_run(bad)


def test_a_calibration_on_a_contended_host_is_refused_naming_the_runs():
    from harness.commands.calibrate import check_quiet_host
    from harness.errors import HarnessError

    quiet = make_example_report(1)
    quiet["status"]["host_load"] = "quiet"
    busy = make_example_report(2)
    busy["status"]["host_load"] = "contended"
    busy["contention"] = {"reasons": ["before: CPU pressure % 56.8 > 20"]}
    runs = [(quiet, "a" * 64), (busy, "b" * 64), (quiet, "c" * 64)]
    with pytest.raises(HarnessError, match=r"1 of 3 calibration runs .*run 2: before: CPU"):
        check_quiet_host(runs, False, None)
    console, out = _console(80)
    check_quiet_host(runs, True, console)
    assert "stored anyway (--allow-contended)" in out.getvalue()
    check_quiet_host([(quiet, "a" * 64)] * 3, False, None)  # a quiet host passes


# --- run: the end of a run, and its script outputs ----------------------------------------


def test_a_run_ends_with_what_to_open_and_what_to_run_next(tmp_path):
    import argparse
    from types import SimpleNamespace

    from harness.commands.run import print_run_end
    from harness.history.folder_history import FolderHistory

    report = tmp_path / "loading.json"
    report.write_bytes(dump_report(make_example_report(1)))
    sha = "d" * 64
    outcome = SimpleNamespace(
        report_path=report, report=json.loads(report.read_bytes()), registered=[object()]
    )
    args = argparse.Namespace(json=False, quiet=False, demo=True)
    console, out = _console(80, terminal=False)
    print_run_end(args, outcome, sha, FolderHistory("harness-history"), console)
    lines = out.getvalue().splitlines()
    assert lines[0] == "open: harness-history/index.html (the dashboard)"
    assert f"--baseline {sha[:12]}" in lines[1] and lines[1].startswith("next: ")
    assert f"harness compare --baseline {sha[:12]}" in lines[2]
    # not registered: the report file is the baseline to name
    outcome.registered = []
    args = argparse.Namespace(json=False, quiet=False, demo=False, history_url=None)
    console, out = _console(80, terminal=False)
    print_run_end(args, outcome, None, None, console)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("next: ") and f"--baseline {report} --recheck 5" in lines[0]
    assert f"harness compare --baseline {report} NEW_DIR/loading.json" in lines[1]


@pytest.mark.slow
def test_run_quiet_and_json_print_only_what_scripts_read(tmp_path):
    quiet = _harness("run", "io-scale", "--demo", "--load-only", "-q", cwd=tmp_path)
    assert quiet.returncode in (0, 2), quiet.stderr
    (line,) = quiet.stdout.splitlines()
    sha, verdict = line.split(" ")
    assert len(sha) == 64 and verdict in ("pass", "review")
    assert (tmp_path / "harness-history" / "records" / "sha256" / sha[:2] / f"{sha}.json").is_file()
    as_json = _harness(
        "run", "io-scale", "--demo", "--load-only", "--json", "--baseline", sha[:12], cwd=tmp_path
    )
    assert as_json.returncode in (0, 2), as_json.stderr
    doc = json.loads(as_json.stdout)  # one document, nothing else on stdout
    assert doc["baseline"]["sha256"] == sha and "comparison" in doc
    stored = [ln for ln in as_json.stderr.splitlines() if " stored " in ln]
    assert len(stored) == 1 and stored[0].split(" stored ")[1][:64].isalnum()  # never wrapped


def test_recheck_writes_nothing_into_the_current_folder_unasked(
    pair, tmp_path, monkeypatch, capsys
):
    from harness.commands.recheck import recheck_output_dir
    from harness.history.backend import load_reference

    base, slow = pair
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    argv = ["recheck", str(slow), "--baseline", str(base), "--history-dir", str(tmp_path / "h")]
    assert main(argv) == 64
    assert "--output-dir DIR" in capsys.readouterr().err
    assert list(work.iterdir()) == []
    # a demo candidate's recheck goes beside the demo's reports
    candidate = load_reference(None, str(slow))
    candidate.doc["command"] = ["harness", "run", "io-scale", "--demo"]
    folder = recheck_output_dir(None, candidate)
    assert folder.parent == (work / "harness-demo").absolute()
    assert folder.name.startswith(f"recheck-{candidate.sha256[:12]}-")
    assert recheck_output_dir(tmp_path / "r", candidate) == tmp_path / "r"


def test_run_summary_states_one_unit_at_80_and_200_columns():
    from harness.run.summary import print_summary

    doc = make_example_report(1, reps=2)  # 0.5 s loads: once printed as "0.5xx s"
    for width in (80, 200):
        console, out = _console(width)
        print_summary(doc, console)
        text = out.getvalue()
        assert "…" not in text
        medians = [f"{s['median'] * 1e3:.1f}" for s in doc["summaries"]]
        assert all(m in text for m in medians)
        assert " s " not in text.replace("GB/s", "")  # no load time in seconds
        assert ("median ms" in text) is (width == 200)  # the table's header states the unit


@pytest.mark.parametrize("width", [80, 200])
def test_recheck_prints_its_comparison_uncut_at_80_and_200_columns(tmp_path, monkeypatch, width):
    base, same = tmp_path / "base.json", tmp_path / "same.json"
    base.write_bytes(dump_report(make_example_report(1, acquisition_ids=LONG_IDS)))
    same.write_bytes(dump_report(make_example_report(2, acquisition_ids=LONG_IDS)))
    out = io.StringIO()
    monkeypatch.setattr(
        "harness.views.console.make_console",
        lambda **_: Console(file=out, width=width, force_terminal=True, color_system=None),
    )
    argv = ["recheck", str(same), "--baseline", str(base), "--history-dir", str(tmp_path / "h")]
    assert main([*argv, "--format", "text"]) == 0  # nothing flagged: the comparison only
    text = out.getvalue()
    assert "…" not in text and ("┃" in text) is (width == 200)
    for acquisition in LONG_IDS:
        for fmt in ("hdf5", "qem"):
            for cache in ("cold", "cached"):
                head = f"{acquisition} {fmt} {cache}:"
                assert (head in text) is (width == 80)
    assert text.count("unchanged") >= 8
