"""Every verdict table shows a change that follows from the medians beside it (issue 35).

After a paired recheck the row's medians are the two codes' paired trials, the change is
their ratio (the row names its estimator), and the original medians are labelled as such.
Checked for the terminal table, Markdown, the record page's HTML and the JSON.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from harness.compare import compare_reports
from harness.history.records import sha256_bytes
from harness.history.store import register_reports
from harness.render import registration_renderer
from harness.report import dump_report
from harness.testing import make_example_report
from harness.verdict.present import print_text, render_json, render_markdown

KEY = ("scan-a", "hdf5", "cold")
SECONDS = re.compile(r"([0-9.]+) (ms|s)\b")
PERCENT = re.compile(r"([+-][0-9.]+)%")


def _docs() -> tuple[dict, str, dict]:
    """A baseline and a +50% candidate whose flagged cell carries a paired recheck in
    which the baseline's code ran 30% slower than in the baseline record: the paired
    medians and the original ones disagree, so a row mixing them would show."""
    base = make_example_report(1, reps=5)
    base_sha = sha256_bytes(dump_report(base))
    cand = make_example_report(2, reps=5, slowdown=1.5, baseline={"sha256": base_sha,
                               "path": None, "regression_percent": 20.0})  # fmt: skip
    trials = [t for t in cand["trials"] if (t["acquisition"], t["format"], t["cache_state"]) == KEY]
    again = [dict(t, trial_index=5 + i) for i, t in enumerate(trials)]
    cand["recheck"] = {
        "rounds": len(again),
        "cells": [list(KEY)],
        "trials": again,
        "paired": {
            "baseline_sha256": base_sha,
            "baseline_code": "tree /somewhere",
            "order": "alternating",
            "baseline_trials": [dict(t, seconds=t["seconds"] / 1.5 * 1.3) for t in again],
            "workers": {},
        },
    }
    return base, base_sha, cand


def _seconds(text: str) -> tuple[float, float]:
    """The value of a printed duration and half its last digit (the rounding)."""
    number, unit = SECONDS.search(text).groups()
    scale = 1e-3 if unit == "ms" else 1.0
    decimals = len(number.partition(".")[2])
    return float(number) * scale, 0.5 * 10**-decimals * scale


def _follows(base_text: str, cand_text: str, change_text: str) -> bool:
    (b, db), (c, dc) = _seconds(base_text), _seconds(cand_text)
    change = float(PERCENT.search(change_text).group(1))
    low = ((c - dc) / (b + db) - 1) * 100 - 0.05
    high = ((c + dc) / (b - db) - 1) * 100 + 0.05
    return low <= change <= high


@pytest.fixture(scope="module")
def comparison():
    base, base_sha, cand = _docs()
    result = compare_reports(base, cand, 20.0, baseline_sha256=base_sha)
    cell = next(c for c in result.cells if c.key == KEY)
    assert cell.recheck["paired"] is True  # the case of issue 35's first item
    return result


def test_json_changes_follow_from_their_medians(comparison) -> None:
    cells = json.loads(render_json(comparison))["cells"]
    for cell in cells:
        ratio = cell["candidate_median"] / cell["baseline_median"]
        assert cell["change_percent"] == pytest.approx((ratio - 1) * 100, rel=1e-9)
        assert cell["estimator"] == "ratio of medians"
    rechecked = next(c for c in cells if c["recheck"])
    original = rechecked["recheck"]
    ratio = original["original_candidate_median"] / original["original_baseline_median"]
    assert original["original_change_percent"] == pytest.approx((ratio - 1) * 100)
    assert rechecked["change_percent"] == pytest.approx(30.0 / 1.3 * 1.0, abs=25)  # paired


def test_markdown_rows_follow_from_their_medians(comparison) -> None:
    rows = [line for line in render_markdown(comparison).splitlines() if "| scan-" in line]
    assert len(rows) == len(comparison.cells)
    for row in rows:
        fields = [f.strip() for f in row.strip("|").split("|")]
        assert _follows(fields[4], fields[5], fields[6]), row
    paired_row = next(r for r in rows if "paired recheck" in r)
    assert "original medians" in paired_row


def test_terminal_rows_follow_from_their_medians(comparison) -> None:
    from rich.console import Console

    out = io.StringIO()
    wide = Console(file=out, width=320, color_system=None, force_terminal=True)
    print_text(comparison, wide)
    rows = [line for line in out.getvalue().splitlines() if "│ scan-" in line]
    assert len(rows) == len(comparison.cells)
    assert "baseline ms" in out.getvalue()  # the table's one unit, in its header
    for row in rows:
        fields = [f.strip() for f in row.strip("│ ").split("│")]
        assert _follows(f"{fields[4]} ms", f"{fields[5]} ms", fields[6]), row
    assert "original medians" in out.getvalue()


def test_terminal_lines_at_80_columns_follow_from_their_medians(comparison) -> None:
    from rich.console import Console

    out = io.StringIO()
    print_text(comparison, Console(file=out, width=80, color_system=None))
    text = out.getvalue()
    for cell in comparison.cells:
        head = f"{cell.acquisition} {cell.format} {cell.cache_state}:"
        start = text.index(head)
        block = text[
            start : text.index("\n" + "scan-", start) if "\nscan-" in text[start:] else None
        ]
        base = re.search(r"baseline ms ([0-9.]+)", block).group(1)
        cand = re.search(r"candidate ms ([0-9.]+)", block).group(1)
        change = re.search(r"change ([+-][0-9.]+%)", block).group(1)
        assert _follows(f"{base} ms", f"{cand} ms", change), block


@pytest.mark.slow
def test_record_page_rows_follow_from_their_medians(tmp_path: Path) -> None:
    from harness.history.index_db import open_index
    from harness.history.layout import HistoryLayout
    from harness.render.record_pages import write_record_pages
    from harness.render.targets import RenderTargets

    base, _, cand = _docs()
    history = tmp_path / "h"
    register_reports(history, [dump_report(base)], render=registration_renderer("defer"))
    (result,) = register_reports(
        history, [dump_report(cand)], render=registration_renderer("defer")
    )
    layout = HistoryLayout.at(history)
    engine = open_index(layout.index_db, create=False)
    try:
        with engine.begin() as connection:
            write_record_pages(
                connection, layout, RenderTargets(tmp_path / "out"), None, rewrite=True
            )
    finally:
        engine.dispose()
    page = (tmp_path / "out" / "dashboard" / "records" / f"{result.sha256}.html").read_text()
    rows = [
        r for r in re.findall(r"<tr class=\"[a-z]*\"><td>scan-.*?</tr>", page) if "verdict-" in r
    ]
    assert len(rows) == 8
    for row in rows:
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
        assert _follows(cells[4], cells[5], cells[6]), cells
