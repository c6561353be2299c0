"""timings.csv is written without pandas; its bytes stay those pandas' ``to_csv`` wrote.

The reference below is the writer it replaced (a frame of the joined index rows, typed
as before, through ``to_csv``), run on text that the CSV writer must quote: commas,
quotes, line breaks, a carriage return, tabs and non-ASCII letters, and floats that
print in exponent form.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from harness.history.index_db import open_index
from harness.history.layout import HistoryLayout
from harness.history.store import register_reports
from harness.render import TIMINGS_COLUMNS, build_timings_csv, registration_renderer
from harness.report import dump_report
from harness.testing import make_example_report

pd = pytest.importorskip("pandas")

_REFERENCE_SQL = (
    "SELECT r.sha256, r.created_utc, r.git_revision, r.git_dirty, r.comparison_key, "
    "t.acquisition, t.format, t.cache_state, t.trial_index, t.label, t.kept, t.seconds, "
    "t.read_bytes, t.file_bytes, t.residency_before "
    "FROM trials AS t JOIN records AS r ON r.seq = t.record_seq ORDER BY t.id"
)
CRAFTED_IDS = ("comma,id", 'quote"id', "line\nbreak", "carriage\rreturn", "tab\tü é")


def _reference_csv(index_db: Path) -> bytes:
    """What ``timings_csv_text`` wrote through pandas before (the same typing)."""
    with sqlite3.connect(index_db) as connection:
        rows = connection.execute(_REFERENCE_SQL).fetchall()
    frame = pd.DataFrame.from_records(rows, columns=list(TIMINGS_COLUMNS))
    frame = frame.astype(
        {
            "git_dirty": "bool",
            "trial_index": "int64",
            "kept": "bool",
            "seconds": "float64",
            "read_bytes": "int64",
            "file_bytes": "int64",
            "residency_before": "float64",
        }
    )
    return frame.to_csv(index=False, header=True, lineterminator="\n").encode("utf-8")


def test_timings_csv_matches_the_pandas_bytes_on_crafted_text(tmp_path: Path) -> None:
    history = tmp_path / "h"
    reports = [
        make_example_report(0, reps=2, base_seconds=3e-6, storage_id="plain"),
        make_example_report(
            1,
            reps=2,
            acquisition_ids=CRAFTED_IDS[:3],
            storage_id='st,"orage"',
            git_revision="a" * 40,
            base_seconds=12345678.9,
        ),
        make_example_report(2, reps=3, acquisition_ids=CRAFTED_IDS[3:], noise=0.3),
    ]
    register_reports(
        history, [dump_report(r) for r in reports], render=registration_renderer("defer")
    )
    layout = HistoryLayout.at(history)
    engine = open_index(layout.index_db, create=False)
    try:
        with engine.begin() as connection:
            ours = build_timings_csv(connection)
    finally:
        engine.dispose()
    reference = _reference_csv(layout.index_db)
    assert ours == reference
    text = ours.decode()
    assert '"comma,id"' in text and '"quote""id"' in text and '"line\nbreak"' in text
    assert "e-06" in text  # floats in exponent form, as repr writes them
    # the registration's appended file is the same bytes as the full rewrite
    assert (history / "timings.csv").read_bytes() == reference


@pytest.mark.parametrize("batch", [1, 3, 1000])
def test_the_streamed_file_is_the_bytes_built_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    """A render writes timings.csv a batch of trials at a time; batch boundaries (also
    between a record's rows, and among rows that need quoting) change no byte."""
    from harness.render import timings

    history = tmp_path / "h"
    reports = [
        make_example_report(0, reps=2, acquisition_ids=CRAFTED_IDS[:2]),
        make_example_report(1, reps=3, storage_id="plain"),
        make_example_report(2, reps=2, acquisition_ids=CRAFTED_IDS[2:]),
    ]
    register_reports(
        history, [dump_report(r) for r in reports], render=registration_renderer("defer")
    )
    monkeypatch.setattr(timings, "_TIMINGS_BATCH", batch)
    engine = open_index(HistoryLayout.at(history).index_db, create=False)
    out = tmp_path / "timings.csv"
    try:
        with engine.begin() as connection:
            whole = build_timings_csv(connection)
            size = timings.stream_timings_csv(connection, out)
    finally:
        engine.dispose()
    assert out.read_bytes() == whole == _reference_csv(HistoryLayout.at(history).index_db)
    assert size == len(whole) and whole.count(b"\n") > 10  # more rows than a small batch
