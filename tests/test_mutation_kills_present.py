"""How a comparison is shown (harness/verdict/present.py), line by line: the tests that
kill the survivors of the mutmut run over it (tests/mutation-survivors.md)."""

from __future__ import annotations

import io
import json
import math
import re

import pytest
from rich.console import Console

from harness.comparability import FieldDifference
from harness.verdict import present
from harness.verdict.cells import CellComparison, CellVerdict
from harness.verdict.comparison import CalibrationUse, Comparison, Verdict


def _cell(acquisition: str, verdict: CellVerdict, **fields) -> CellComparison:
    values = {
        "acquisition": acquisition,
        "format": "hdf5",
        "cache_state": "cold",
        "n_baseline": 5,
        "n_candidate": 7,
        "baseline_median": 0.0123,
        "candidate_median": 0.01845,
        "change_percent": 50.0,
        "ci_percent": (41.25, 58.75),
        "p_value": 0.00123456,
        "p_adjusted": 0.0024691,
        "p_method": "permutation",
        "verdict": verdict,
    }
    values.update(fields)
    return CellComparison(**values)


def _comparison(**fields) -> Comparison:
    values = {
        "verdict": Verdict.REVIEW,
        "regression_percent": 20.0,
        "baseline_sha256": "a" * 64,
        "baseline_path": "/h/base.json",
        "candidate_sha256": "b" * 64,
        "candidate_path": None,
        "cells": [
            _cell("scan-a", CellVerdict.SLOWER, notes=("note one",), warnings=("warn one",)),
            _cell("scan-b", CellVerdict.UNCHANGED, change_percent=-2.5, ci_percent=(-5.0, 1.0)),
            _cell("scan-c", CellVerdict.UNCHANGED, change_percent=1.0),
        ],
        "warnings": ["run warning"],
        "alpha": 0.05,
    }
    values.update(fields)
    return Comparison(**values)


def _text(comparison: Comparison, width: int = 200, terminal: bool = False) -> str:
    out = io.StringIO()
    console = Console(
        file=out, width=width, color_system=None, force_terminal=terminal, soft_wrap=True
    )
    present.print_text(comparison, console)
    return out.getvalue()


def test_percentages_intervals_and_durations_are_formatted_exactly():
    assert present.format_percent(None) == "-"
    assert present.format_percent(math.nan) == "-"
    assert present.format_percent(math.inf) == "+inf%"
    assert present.format_percent(-math.inf) == "-inf%"
    assert present.format_percent(12.345) == "+12.3%"
    assert present.format_percent(-0.04) == "-0.0%"
    assert present.format_percent(12.345, signed=False) == "12.3%"
    assert present.format_percent(7) == "+7.0%"  # an int is not a nan check's float
    assert present.format_interval((-1.25, 3.0)) == "[-1.2%, +3.0%]"
    assert present.format_seconds(0.5) == "500.00 ms"
    assert present.format_seconds(0.99999) == "999.99 ms"
    assert present.format_seconds(1.0) == "1.000 s"
    assert present.format_seconds(12.3456) == "12.346 s"
    assert present.format_milliseconds(0.0123456) == "12.35"


def test_the_calibration_line_says_which_calibration_or_why_none():
    assert present.calibration_line(_comparison()) == (
        "calibration: none (no calibration looked up)"
    )
    unused = _comparison(calibration=CalibrationUse(None, note="no calibration for this key"))
    assert present.calibration_line(unused) == "calibration: none (no calibration for this key)"
    used = CalibrationUse("c" * 64, runs=6, reps=5, created_utc="2026-12-05T08:00:00Z")
    assert present.calibration_line(_comparison(calibration=used)) == (
        f"calibration: {'c' * 12} (6 runs of 5 reps, 2026-12-05T08:00:00Z)"
    )
    noted = CalibrationUse("d" * 64, runs=6, reps=5, created_utc="T", note="older host")
    assert present.calibration_line(_comparison(calibration=noted)) == (
        f"calibration: {'d' * 12} (6 runs of 5 reps, T); older host"
    )


def test_the_rule_line_names_the_threshold_alpha_and_holm_family():
    assert present.rule_line(_comparison(regression_percent=12.5, alpha=0.01)) == (
        "rule: a cell more than 12.5% slower (change: ratio of medians) is flagged; 'slower' "
        "when significant at alpha 0.01 after Holm correction over 3 cells, else 'possibly "
        "slower'"
    )
    rechecked = _comparison()
    rechecked.cells[0] = _cell("scan-a", CellVerdict.SLOWER, recheck={"rounds": 5})
    rechecked.cells[1] = _cell("scan-b", CellVerdict.SLOWER, recheck={"rounds": 5})
    assert present.rule_line(rechecked) == (
        "rule: a cell more than 20% slower (change: ratio of medians) is flagged; 'slower' "
        "when significant at alpha 0.05 after Holm correction over 3 cells (a rechecked "
        "cell: over the 2 rechecked), else 'possibly slower'"
    )


def test_print_text_writes_every_part_in_order():
    comparison = _comparison(
        failures=["workload crashed"],
        differences=[FieldDifference("host.cpu", "A", "B")],
    )
    lines = _text(comparison).splitlines()
    assert lines == [
        "Comparison: REVIEW (exit 2)",
        f"baseline: {'a' * 16} /h/base.json",
        f"candidate: {'b' * 16} ",
        present.rule_line(comparison),
        present.calibration_line(comparison),
        "candidate failed: workload crashed",
        "not comparable: fields that differ",
        "host.cpu: baseline A  candidate B",
        "scan-a hdf5 cold: SLOWER  change +50.0%  95% CI [+41.2%, +58.8%]  baseline ms 12.30  "
        "candidate ms 18.45  n b/c 5/7  p (Holm) 0.00123 (0.00247)",
        "scan-b hdf5 cold: unchanged  change -2.5%  95% CI [-5.0%, +1.0%]  baseline ms 12.30  "
        "candidate ms 18.45  n b/c 5/7  p (Holm) 0.00123 (0.00247)",
        "scan-c hdf5 cold: unchanged  change +1.0%  95% CI [+41.2%, +58.8%]  baseline ms 12.30  "
        "candidate ms 18.45  n b/c 5/7  p (Holm) 0.00123 (0.00247)",
        "1 SLOWER, 2 unchanged of 3 cells",
        "  scan-a hdf5 cold: note one",
        "  scan-a hdf5 cold: warn one",
        "warning: run warning",
    ]


def test_print_text_without_shas_cells_or_differences():
    comparison = _comparison(
        verdict=Verdict.PASS, baseline_sha256=None, baseline_path=None, cells=[], warnings=[]
    )
    assert _text(comparison).splitlines() == [
        "Comparison: PASS (exit 0)",
        "baseline:  ",
        f"candidate: {'b' * 16} ",
        present.rule_line(comparison),
        present.calibration_line(comparison),
    ]


def test_print_text_styles_on_a_terminal():
    from rich.console import Console

    comparison = _comparison(failures=["boom"], differences=[FieldDifference("host.cpu", 1, 2)])
    out = io.StringIO()
    console = Console(file=out, width=400, color_system="standard", force_terminal=True)
    present.print_text(comparison, console)
    text = out.getvalue()
    assert "\x1b[1mComparison: REVIEW (exit 2)" in text  # bold header
    assert "\x1b[31mcandidate failed: boom" in text  # red failure
    assert "\x1b[33mwarning: run warning" in text  # yellow warning
    assert "\x1b[1;31mSLOWER" in text  # the verdict's own style, in the table
    plain = re.sub("\x1b\\[[0-9;]*m", "", text)
    assert "┃ field    ┃ baseline ┃ candidate ┃" in plain  # the differences' table header


def test_the_cell_view_has_its_columns_order_and_styles():
    calibrated = _comparison()
    calibrated.cells[0] = _cell(
        "scan-a", CellVerdict.POSSIBLY_SLOWER, noise_floor_percent=6.25, mdc_percent=33.0
    )
    calibrated.cells[1] = _cell("scan-b", CellVerdict.FASTER, change_percent=-30.0)
    view = present.comparison_cell_view(calibrated)
    values = ("n b/c", "baseline ms", "candidate ms", "change", "95% CI", "p (Holm)", "verdict")
    assert view.key_columns == ("acquisition", "format", "cache")
    assert view.value_columns == (*values, "noise floor", "MDC")
    assert view.line_order == present._LINE_ORDER
    assert view.right == frozenset(view.value_columns) - {"verdict"}
    assert view.bare == frozenset({"verdict"})
    assert view.title is None
    keys, row = view.rows[0]
    assert keys == ("scan-a", "hdf5", "cold")
    assert row[:6] == ("5/7", "12.30", "18.45", "+50.0%", "[+41.2%, +58.8%]", "0.00123 (0.00247)")
    assert (row[6].plain, str(row[6].style)) == ("possibly slower", "yellow")
    assert row[7:] == ("+6.2%", "33.0%")
    assert (view.rows[1][1][6].plain, str(view.rows[1][1][6].style)) == (
        "faster (improved)",
        "bold green",
    )
    assert view.rows[2][1][7:] == ("-", "-")
    plain = present.comparison_cell_view(_comparison())
    assert plain.value_columns == values
    assert plain.line_order == present._LINE_ORDER[:7]
    assert (plain.rows[0][1][6].plain, str(plain.rows[0][1][6].style)) == ("SLOWER", "bold red")
    assert str(plain.rows[1][1][6].style) == ""


def test_print_comparison_picks_markdown_off_a_terminal(capsys, monkeypatch):
    comparison = _comparison()
    present.print_comparison(comparison, "json")
    assert json.loads(capsys.readouterr().out) == json.loads(present.render_json(comparison))
    assert "after Holm correction over 3 cells" in present.render_markdown(comparison)
    present.print_comparison(comparison, "markdown")
    assert capsys.readouterr().out == present.render_markdown(comparison)
    present.print_comparison(comparison, None)  # captured: not a terminal
    assert capsys.readouterr().out == present.render_markdown(comparison)
    present.print_comparison(comparison, "text")
    assert capsys.readouterr().out.startswith("Comparison: REVIEW (exit 2)\n")
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    present.print_comparison(comparison, None)  # a terminal: the rich text
    out = capsys.readouterr().out
    assert "Comparison: REVIEW (exit 2)" in out.splitlines()[0]
    assert out != present.render_markdown(comparison) and "calibration: none" in out


def test_render_json_is_sorted_indented_and_refuses_nan():
    comparison = _comparison()
    text = present.render_json(comparison)
    assert text.startswith('{\n "alpha": 0.05,\n "baseline_path": "/h/base.json",')
    assert json.loads(text) == json.loads(json.dumps(comparison.to_dict(), default=str))
    comparison.regression_percent = math.nan
    with pytest.raises(ValueError):
        present.render_json(comparison)
