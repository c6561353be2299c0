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


def _render(doc, **console_kwargs) -> str:
    out = io.StringIO()
    print_summary(doc, Console(file=out, **console_kwargs))
    return out.getvalue()


def test_long_identifiers_are_never_cut_at_80_columns_or_off_a_terminal():
    ids = ("demo-u8-very-long-acquisition-identifier", "demo-u16-very-long-acquisition-identifier")
    doc = make_example_report(reps=2, acquisition_ids=ids, storage_id="nvme-" + "x" * 60)
    for kwargs in ({"width": 80, "force_terminal": True}, {"width": 80}, {"width": 300}):
        text = _render(doc, **kwargs)
        assert "…" not in text, kwargs
        for name in (*ids, "nvme-" + "x" * 60):
            assert name in text, (kwargs, name)
    # a wide terminal gets the table; off a terminal the compact blocks
    assert "GB/s (raw, median)" in _render(doc, width=300, force_terminal=True)
    piped = _render(doc, width=300)
    assert f"{ids[0]}:" in piped.splitlines() and "GB/s (raw, median)" not in piped


def test_user_text_is_never_read_as_markup():
    doc = make_example_report(
        reps=2, acquisition_ids=("[/bold]", "[red]x[/red]"), storage_id="[/bold]"
    )
    for force in (True, False):
        text = _render(doc, width=300, force_terminal=force)
        assert "[red]x[/red]" in text and "storage [/bold]" in text
