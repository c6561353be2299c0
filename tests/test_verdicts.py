"""The four cell verdicts, recheck clearing, calibrations in a history, and the JSON form."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.compare import Verdict, compare_reports
from harness.history.records import sha256_bytes
from harness.history.store import register_reports
from harness.render import registration_renderer
from harness.report import dump_report, summarise_trials
from harness.testing import make_example_report
from harness.verdict.calibration import CalibratedNull
from harness.verdict.calibration_report import (
    build_calibration,
    dump_calibration,
    find_calibration,
    iter_calibrations,
    parse_calibration,
    register_calibration,
    resolve_calibration,
)
from harness.verdict.cells import CellVerdict, decide_cells

KEY = ("a", "qem", "cold")


def _scaled(doc: dict, factor: float) -> dict:
    for trial in doc["trials"]:
        trial["seconds"] *= factor
    doc["summaries"] = summarise_trials(doc["trials"])
    return doc


def test_words_without_calibration() -> None:
    base = {KEY: [1.0, 1.01, 0.99, 1.02, 0.98]}
    # 50% slower, fully separated at 5 vs 5: confirmed (one cell: no Holm penalty)
    (cell,) = decide_cells(base, {KEY: [1.5, 1.52, 1.49, 1.51, 1.53]}, threshold_percent=20)
    assert cell.verdict is CellVerdict.SLOWER and cell.p_value == pytest.approx(1 / 252)
    assert cell.ci_percent[0] > 20
    # past the threshold but 3 vs 3 over 8 cells can never be significant: possibly slower
    eight = {(f"a{i}", "qem", "cold"): [1.0, 1.01, 0.99] for i in range(8)}
    slow = {k: [1.5, 1.51, 1.49] for k in eight}
    cells = decide_cells(eight, slow, threshold_percent=20)
    assert {c.verdict for c in cells} == {CellVerdict.POSSIBLY_SLOWER}
    assert all("cannot reach significance" in c.notes[0] for c in cells)
    # said once, with the command that can settle it
    assert not any("not enough trials" in w for c in cells for w in c.warnings)
    assert all(
        "harness recheck CANDIDATE --baseline BASELINE --recheck" in c.notes[0] for c in cells
    )
    # significant but within the threshold: unchanged, stated in the notes
    (cell,) = decide_cells(base, {KEY: [1.10, 1.11, 1.09, 1.12, 1.1]}, threshold_percent=20)
    assert cell.verdict is CellVerdict.UNCHANGED and "significant" in cell.notes[0]
    # 40% faster, separated: faster
    (cell,) = decide_cells(base, {KEY: [0.6, 0.61, 0.59, 0.6, 0.62]}, threshold_percent=20)
    assert cell.verdict is CellVerdict.FASTER and not cell.flagged


def test_recheck_clears_or_confirms_a_flag() -> None:
    base = {KEY: [1.0, 1.01, 0.99, 1.02, 0.98]}
    flagged = {KEY: [1.3, 1.0, 1.31, 1.02, 1.29]}
    (before,) = decide_cells(base, flagged, threshold_percent=20)
    assert before.verdict is CellVerdict.POSSIBLY_SLOWER
    (cleared,) = decide_cells(
        base, flagged, threshold_percent=20, recheck={KEY: [1.0, 1.01, 0.99, 1.0, 1.02]}
    )
    assert cleared.verdict is CellVerdict.UNCHANGED
    assert any("flag cleared by the recheck" in n for n in cleared.notes)
    # the recheck's own medians are the row's; the original ones are kept, labelled
    assert cleared.recheck["n"] == 5 and cleared.n_candidate == 5
    assert cleared.candidate_median == 1.0 and cleared.recheck["original_candidate_median"] == 1.29
    (confirmed,) = decide_cells(
        base, flagged, threshold_percent=20, recheck={KEY: [1.5, 1.51, 1.49, 1.52, 1.53]}
    )
    assert confirmed.verdict is CellVerdict.SLOWER and confirmed.n_candidate == 5
    assert confirmed.p_value == pytest.approx(1 / 252) and confirmed.holm_family == 1


def test_calibrated_null_confirms_large_changes_from_three_trials() -> None:
    runs = [[1.0 + 0.01 * ((i * 7 + j) % 5 - 2) for j in range(3)] for i in range(6)]
    null = CalibratedNull({KEY: runs})
    base = {KEY: runs[0]}
    (cell,) = decide_cells(
        base, {KEY: [v * 1.5 for v in runs[1]]}, threshold_percent=20, calibration=null
    )
    assert cell.verdict is CellVerdict.SLOWER and cell.p_method == "calibrated"
    assert cell.noise_floor_percent < 5 and cell.mdc_percent < 30
    (cell,) = decide_cells(
        base, {KEY: [v * 1.05 for v in runs[1]]}, threshold_percent=20, calibration=null
    )
    assert cell.verdict is CellVerdict.UNCHANGED


def _calibration_history(tmp_path: Path, noise: float = 0.02) -> tuple[Path, list]:
    history = tmp_path / "h"
    paths = []
    for seed in range(6):
        path = tmp_path / f"aa{seed}.json"
        path.write_bytes(dump_report(make_example_report(seed, reps=3, noise=noise)))
        paths.append(path)
    results = register_reports(history, paths, render=registration_renderer("defer"))
    runs = [(json.loads(p.read_bytes()), r.sha256) for p, r in zip(paths, results)]
    return history, runs


def test_calibration_document_store_and_lookup(tmp_path: Path) -> None:
    history, runs = _calibration_history(tmp_path)
    doc = build_calibration(runs, regression_percent=20, alpha=0.05, command=["test"])
    data = dump_calibration(doc)
    assert dump_calibration(parse_calibration(data, name="x")) == data  # deterministic bytes
    stored = register_calibration(history, data)
    assert stored.sha256 == sha256_bytes(data) and stored.path.stat().st_mode & 0o777 == 0o444
    assert register_calibration(history, data).sha256 == stored.sha256  # no-op, same record
    assert [c.sha256 for c in iter_calibrations(history)] == [stored.sha256]
    found, note = find_calibration(history, prefix=None, key=doc["comparison_key"])
    assert found.sha256 == stored.sha256 and "most recent" in note
    found, _ = find_calibration(history, prefix=stored.sha256[:8], key=doc["comparison_key"])
    assert found.sha256 == stored.sha256
    none, note = find_calibration(history, prefix=None, key="0" * 16)
    assert none is None and "no calibration" in note
    other = make_example_report(9, storage_id="elsewhere")
    assert resolve_calibration(history, None, other).sha256 is None
    with pytest.raises(Exception, match="comparison key"):
        find_calibration(history, prefix=stored.sha256[:8], key="0" * 16)
    with pytest.raises(Exception, match="at least 5"):
        build_calibration(runs[:4], regression_percent=20, alpha=0.05, command=[])


def test_compare_uses_the_matching_calibration_and_says_so(tmp_path: Path, capsys) -> None:
    history, runs = _calibration_history(tmp_path)
    doc = build_calibration(runs, regression_percent=20, alpha=0.05, command=["test"])
    stored = register_calibration(history, dump_calibration(doc))
    baseline = tmp_path / "aa0.json"
    for factor, code, word in ((1.5, 2, "slower"), (1.05, 0, "unchanged")):
        candidate = tmp_path / f"cand{factor}.json"
        candidate.write_bytes(dump_report(_scaled(make_example_report(1, reps=3), factor)))
        argv = [
            "compare",
            "--baseline",
            str(baseline),
            str(candidate),
            "--history-dir",
            str(history),
        ]
        assert main([*argv, "--format", "json"]) == code
        result = json.loads(capsys.readouterr().out)
        assert result["exit_code"] == code and result["calibration"]["sha256"] == stored.sha256
        assert {c["verdict"] for c in result["cells"]} == {word}
        for cell in result["cells"]:
            assert set(cell) >= {
                "acquisition",
                "format",
                "cache_state",
                "verdict",
                "change_percent",
                "ci_percent",
                "p_value",
            }
            assert len(cell["ci_percent"]) == 2 and cell["noise_floor_percent"] is not None
        assert main([*argv, "--format", "markdown"]) == code
        out = capsys.readouterr().out
        assert f"calibration: {stored.sha256[:12]}" in out
    # without a calibration at 3 reps: possibly slower (never confirmed), exit 2 still
    base_doc = json.loads(baseline.read_bytes())
    plain = compare_reports(base_doc, _scaled(make_example_report(1, reps=3), 1.5))
    assert plain.verdict is Verdict.REVIEW
    assert {c.verdict for c in plain.cells} == {CellVerdict.POSSIBLY_SLOWER}


def test_text_output_never_reads_report_text_as_markup(tmp_path: Path, capsys) -> None:
    base = tmp_path / "b.json"
    cand = tmp_path / "c.json"
    base.write_bytes(dump_report(make_example_report(1, storage_id="[bold red]x[/]")))
    cand.write_bytes(dump_report(make_example_report(2, storage_id="[bold red]x[/]")))
    assert (
        main(
            [
                "compare",
                "--baseline",
                str(base),
                str(cand),
                "--format",
                "text",
                "--history-dir",
                str(tmp_path / "n"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "unchanged" in out and "calibration: none" in out


def test_compare_takes_the_candidates_own_recheck_block() -> None:
    base = make_example_report(1, reps=5)
    candidate = make_example_report(2, reps=5)
    slow = ("scan-a", "qem", "cold")
    for trial in candidate["trials"]:
        if (trial["acquisition"], trial["format"], trial["cache_state"]) == slow:
            trial["seconds"] *= 1.4
    candidate["summaries"] = summarise_trials(candidate["trials"])
    flagged = compare_reports(base, candidate)
    assert [c.key for c in flagged.cells if c.flagged] == [slow]
    recheck_trials = [
        dict(t, trial_index=t["trial_index"] + 5, seconds=t["seconds"] / 1.4)
        for t in candidate["trials"]
        if (t["acquisition"], t["format"], t["cache_state"]) == slow
    ]
    candidate["recheck"] = {"rounds": 5, "cells": [list(slow)], "trials": recheck_trials}
    dump_report(candidate)  # the recheck block is valid report content
    cleared = compare_reports(base, candidate)
    assert cleared.verdict is Verdict.PASS
    (cell,) = [c for c in cleared.cells if c.key == slow]
    assert cell.recheck["n"] == 5 and any("flag cleared by the recheck" in n for n in cell.notes)


def test_calibrate_usage_and_passed_options(tmp_path: Path) -> None:
    import argparse

    from harness.commands.calibrate import run_arguments

    for argv in (
        ["calibrate", "io-scale", "--demo", "--runs", "4"],
        ["calibrate", "io-scale", "--demo", "--baseline", "abcd"],
        ["calibrate", "io-scale", "--runs", "5"],  # no --output-dir without --demo
    ):
        assert main(argv) == 64
    namespace = argparse.Namespace(
        root="ROOT",
        demo=False,
        backend="cpu",
        reps=3,
        load_only=True,
        storage_id="disk",
        output_dir=tmp_path,
        history_dir=tmp_path,
        regression_percent=10.0,
        runs=5,
    )
    passed = run_arguments(namespace)
    assert "ROOT" in passed and passed[passed.index("--backend") + 1] == "cpu"
    assert "--load-only" in passed and passed[passed.index("--reps") + 1] == "3"
    assert "--output-dir" not in passed and "--regression-percent" not in passed
