"""The io-scale summary table and status lines, from a schema-valid example report."""

from __future__ import annotations

import io

from rich.console import Console

from harness.run.summary import build_summary_table, print_summary, status_lines
from harness.testing import make_example_report


def test_table_has_one_row_per_cell_and_raw_throughput():
    doc = make_example_report(reps=3)
    table = build_summary_table(doc)
    assert table.row_count == len(doc["summaries"]) == 8
    out = io.StringIO()
    print_summary(doc, Console(file=out, width=200))
    text = out.getvalue()
    assert "scan-a" in text and "kept their cache label" in text
    first = doc["summaries"][0]
    acquisition = next(a for a in doc["acquisitions"] if a["id"] == first["acquisition"])
    raw = 1
    for side in acquisition["shape"]:
        raw *= side
    raw *= 2  # uint16
    assert f"{raw / first['median'] / 1e9:.2f}" in text


def test_status_lines_count_kept_labels_and_show_failures():
    doc = make_example_report(reps=2)
    doc["trials"][0]["kept"] = False
    doc["status"]["failures"] = ["correctness: scan-a: product differs"]
    lines = status_lines(doc)
    assert f"{len(doc['trials']) - 1} of {len(doc['trials'])} trials kept" in lines[1]
    assert lines[2] == "  - correctness: scan-a: product differs"
