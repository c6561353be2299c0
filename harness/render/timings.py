"""``timings.csv``: every measured trial with its record's identity (pandas).

Each row carries the record's SHA-256, creation time, git revision and dirty flag
and comparison key, so a spreadsheet or notebook can order and group trials by
revision without opening the records.
"""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import Connection

from harness.history.entries import TRIAL_FIELDS
from harness.history.index_db import RecordRow, TrialRow, read_meta_json, write_meta
from harness.render.targets import appendable, max_seq, write_atomic

#: Columns of timings.csv, in order (``docs/history-format.md`` "timings.csv"): the record's
#: identity, then every trial field.
TIMINGS_COLUMNS = (
    "record_sha256",
    "created_utc",
    "git_revision",
    "git_dirty",
    "comparison_key",
    *TRIAL_FIELDS,
)
META_TIMINGS = "render.timings_csv"

_TIMINGS_SQL = (
    "SELECT r.sha256, r.created_utc, r.git_revision, r.git_dirty, r.comparison_key, "
    "t.acquisition, t.format, t.cache_state, "
    "t.trial_index, t.label, t.kept, t.seconds, t.read_bytes, t.file_bytes, t.residency_before "
    f"FROM {TrialRow.__tablename__} AS t JOIN {RecordRow.__tablename__} AS r ON r.seq = t.record_seq "
    "WHERE t.record_seq >= ? ORDER BY t.id"  # trial ids grow with seq: a record's trials follow its row
)

_TIMINGS_TEXT_COLUMNS = (
    "record_sha256",
    "created_utc",
    "git_revision",
    "comparison_key",
    "acquisition",
    "format",
    "cache_state",
    "label",
)


def _timings_rows(connection: Connection, min_seq: int | None = None) -> list[tuple]:
    """Trial rows for timings.csv, fetched through the DB-API cursor (hundreds of thousands)."""
    cursor = connection.connection.driver_connection.execute(_TIMINGS_SQL, (min_seq or 0,))
    return cursor.fetchall()


def timings_csv_text(rows: list[tuple], *, header: bool) -> bytes:
    """CSV of trial rows through pandas; the same code for full and appended renders."""
    import pandas as pd

    frame = pd.DataFrame.from_records(rows, columns=list(TIMINGS_COLUMNS))
    # object columns write about twice as fast as pandas' string dtype; bytes are identical
    if len(rows) > 10_000:
        frame = frame.astype({column: object for column in _TIMINGS_TEXT_COLUMNS})
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
    return frame.to_csv(index=False, header=header, lineterminator="\n").encode("utf-8")


def build_timings_csv(connection: Connection) -> bytes:
    return timings_csv_text(_timings_rows(connection), header=True)


def update_timings_csv(connection: Connection, path: Path, new_seqs: list[int]) -> None:
    """Append the new records' trials when the file is as last rendered, else rewrite it."""
    state = read_meta_json(connection, META_TIMINGS)
    size = path.stat().st_size if path.exists() else -1
    newest = max_seq(connection)
    if appendable(state, size, new_seqs, newest):
        data = timings_csv_text(_timings_rows(connection, min_seq=min(new_seqs)), header=False)
        with open(path, "ab") as handle:
            handle.write(data)
        size += len(data)
    elif state is not None and state.get("bytes") == size and state.get("seq") == newest:
        return  # already current
    else:
        data = build_timings_csv(connection)
        write_atomic(path, data)
        size = len(data)
    write_meta(connection, META_TIMINGS, json.dumps({"bytes": size, "seq": newest}))


def write_timings_csv(connection: Connection, path: Path, *, record_state: bool) -> None:
    data = build_timings_csv(connection)
    write_atomic(path, data)
    if record_state:
        write_meta(
            connection, META_TIMINGS, json.dumps({"bytes": len(data), "seq": max_seq(connection)})
        )
