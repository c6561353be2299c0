"""A key page's data from trial rows gathered as a snapshot copies them (a first server
render) is the data drawn from the trials read back out of the finished index.

The rows are handed over as ``take_snapshot``'s ``rows_copied`` hook hands them (each
table in primary-key order, in the model's column order, in batches that split a
record's trials; booleans as the server's driver gives them or as SQLite holds them),
over several keys, text that needs quoting, lost trials, a key of one record.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_render_timings_rows import _table_rows

from harness.history.index_db import IndexMetaRow, RecordRow, SummaryRow, TrialRow, open_index
from harness.history.layout import HistoryLayout
from harness.history.store import register_reports
from harness.render import registration_renderer
from harness.render.key_trials import TRIAL_FRAME_COLUMNS, KeyTrialsFromRows
from harness.render.keys import TRIAL_POINT_RECORDS, collect_key_data
from harness.render.targets import all_keys
from harness.report import dump_report
from harness.testing import make_example_report

CRAFTED_IDS = ("comma,id", 'quote"id', "line\nbreak", "tab\tü é")


def _history(tmp_path: Path) -> Path:
    reports = [
        make_example_report(
            seed, reps=3, slowdown=1 + seed / 10, created_utc=f"2026-11-30T08:{seed:02d}:00Z"
        )
        for seed in range(6)
    ]
    reports += [
        make_example_report(10, reps=2, backend="cuda", acquisition_ids=CRAFTED_IDS[:2]),
        make_example_report(11, reps=2, backend="cuda", acquisition_ids=CRAFTED_IDS[2:],
                            updates={"trials.0.kept": False, "trials.0.label": "not-cold"}),
        make_example_report(12, reps=4, storage_id="alone", base_seconds=3e-6),
    ]  # fmt: skip
    history = tmp_path / "h"
    register_reports(
        history, [dump_report(r) for r in reports], render=registration_renderer("defer")
    )
    return history


@pytest.mark.parametrize(("batch", "as_driver", "points"), [(1, True, 400), (7, False, 2)])
def test_key_data_from_copied_rows_is_the_data_from_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int, as_driver: bool, points: int
) -> None:
    import harness.render.keys as keys_module

    # points drawn for the newest few records only: the frame's rows must select them too
    monkeypatch.setattr(keys_module, "TRIAL_POINT_RECORDS", points)
    assert TRIAL_POINT_RECORDS == 400
    history = _history(tmp_path)
    index_db = HistoryLayout.at(history).index_db
    gathered = KeyTrialsFromRows()
    for model in (IndexMetaRow, RecordRow, TrialRow, SummaryRow):
        rows = _table_rows(index_db, model, as_driver)
        for first in range(0, len(rows), batch):
            gathered.rows(model.__tablename__, rows[first : first + batch])
    engine = open_index(index_db, create=False)
    try:
        with engine.connect() as connection:
            keys = all_keys(connection)
            assert len(keys) == 4
            for key in keys:
                expected = collect_key_data(connection, key)
                got = collect_key_data(connection, key, trials=gathered.frame(key))
                assert got == expected, key
            lost = [
                kept
                for key in keys
                for panel in collect_key_data(connection, key)["panels"]
                for series in panel["series"]
                for kept in series["trials"]["kept"]
                if not kept
            ]
            assert lost  # the lost trials are among the drawn ones
            empty = gathered.frame("no such key")
            assert len(empty) == 0 and tuple(empty.columns) == TRIAL_FRAME_COLUMNS
    finally:
        engine.dispose()


def test_no_rows_copied_gives_empty_frames() -> None:
    frame = KeyTrialsFromRows().frame("k")
    assert len(frame) == 0 and len(frame.columns) == 8
