"""timings.csv written from index rows as a snapshot copies them (a first server render)
is the file the renderer writes from the finished index, byte for byte.

The rows are handed over as ``take_snapshot``'s ``rows_copied`` hook hands them: each
table's rows in primary-key order, in the model's column order, in batches (sizes that
split a record's trials and the rows needing quotes), booleans as the server's driver
gives them or as SQLite holds them.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from harness.history.index_db import IndexMetaRow, RecordRow, SummaryRow, TrialRow, open_index
from harness.history.layout import HistoryLayout
from harness.history.store import register_reports
from harness.render import build_timings_csv, registration_renderer, timings
from harness.render.timings import TimingsFromRows
from harness.report import dump_report
from harness.testing import make_example_report

CRAFTED_IDS = ("comma,id", 'quote"id', "line\nbreak", "carriage\rreturn", "tab\tü é")


def _history(tmp_path: Path) -> Path:
    history = tmp_path / "h"
    reports = [
        make_example_report(0, reps=2, base_seconds=3e-6, storage_id="plain"),
        make_example_report(1, reps=3, acquisition_ids=CRAFTED_IDS[:3]),
        make_example_report(2, reps=2, acquisition_ids=CRAFTED_IDS[3:]),
    ]
    register_reports(
        history, [dump_report(r) for r in reports], render=registration_renderer("defer")
    )
    return history


def _table_rows(index_db: Path, model, as_driver: bool) -> list[tuple]:
    table = model.__table__
    names = [column.name for column in table.columns]
    keys = ", ".join(column.name for column in table.primary_key.columns)
    with sqlite3.connect(index_db) as connection:
        rows = connection.execute(f"SELECT {', '.join(names)} FROM {table.name} ORDER BY {keys}")
        rows = rows.fetchall()
    if as_driver:  # psycopg gives booleans as bool, SQLite as 0/1
        flags = [i for i, c in enumerate(table.columns) if c.type.python_type is bool]
        rows = [tuple(bool(v) if i in flags else v for i, v in enumerate(r)) for r in rows]
    return rows


@pytest.mark.parametrize(
    ("batch", "as_driver", "texts_held"),
    [(1, True, None), (3, False, None), (1000, True, None), (1000, True, 1)],
)
def test_timings_from_copied_rows_are_the_rendered_bytes(
    tmp_path: Path, batch: int, as_driver: bool, texts_held: int | None, monkeypatch
) -> None:
    """``texts_held``: the formatted text parts held at most (1: the held one dropped
    before each new one)."""
    if texts_held is not None:
        monkeypatch.setattr(timings, "_TEXTS_HELD", texts_held)
    history = _history(tmp_path)
    index_db = HistoryLayout.at(history).index_db
    engine = open_index(index_db, create=False)
    try:
        with engine.begin() as connection:
            expected = build_timings_csv(connection)
    finally:
        engine.dispose()
    out = tmp_path / "timings.csv"
    writer = TimingsFromRows(out)
    for model in (IndexMetaRow, RecordRow, TrialRow, SummaryRow):
        rows = _table_rows(index_db, model, as_driver)
        for first in range(0, len(rows), batch):
            writer.rows(model.__tablename__, rows[first : first + batch])
    assert not out.exists()  # in place only when finished
    if texts_held is not None:  # the formatted parts held stay bounded
        assert len(writer._texts) <= texts_held
    size = writer.finish()
    assert out.read_bytes() == expected and size == len(expected)
    text = expected.decode("utf-8")
    assert '"comma,id"' in text and '"line\nbreak"' in text and "e-06" in text


def test_an_aborted_timings_writer_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "timings.csv"
    out.write_bytes(b"old")
    writer = TimingsFromRows(out)
    writer.rows(TrialRow.__tablename__, [])
    writer.abort()
    assert out.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["timings.csv"]  # no temporary left
