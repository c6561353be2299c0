"""``timings.csv``: every measured trial with its record's identity.

Each row carries the record's SHA-256, creation time, git revision and dirty flag
and comparison key, so a spreadsheet or notebook can order and group trials by
revision without opening the records.
"""

from __future__ import annotations

import csv
import io
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

#: Text that the ``csv`` writer would quote (or might, in another Python version) holds one
#: of these; such rows are written by the writer itself, all others by plain joins.
_CSV_SPECIAL = "'*[,\"' || char(10) || char(13) || ']*'"
_TRIAL_TEXT = "(t.acquisition || t.format || t.cache_state || t.label)"
_RECORDS_SQL = (
    "SELECT seq, sha256, created_utc, git_revision, git_dirty, comparison_key "
    f"FROM {RecordRow.__tablename__} WHERE seq >= ?"
)
#: One row per trial, in trial id order (ids grow with seq: a record's trials follow its row):
#: the record's seq, the trial's text fields already joined (NULL when one needs quoting),
#: the floats (written as Python's shortest repr, as pandas writes them) and the counts.
_TRIALS_SQL = (
    "SELECT t.record_seq, "
    f"CASE WHEN {_TRIAL_TEXT} GLOB {_CSV_SPECIAL} THEN NULL ELSE "
    "t.acquisition || ',' || t.format || ',' || t.cache_state || ',' || t.trial_index || ',' "
    "|| t.label || ',' || CASE WHEN t.kept THEN 'True' ELSE 'False' END END, "
    "t.seconds, t.read_bytes || ',' || t.file_bytes, t.residency_before "
    f"FROM {TrialRow.__tablename__} AS t WHERE t.record_seq >= ? ORDER BY t.id"
)
_SPECIAL_TRIALS_SQL = (
    "SELECT t.acquisition, t.format, t.cache_state, t.trial_index, t.label, t.kept "
    f"FROM {TrialRow.__tablename__} AS t WHERE t.record_seq >= ? "
    f"AND {_TRIAL_TEXT} GLOB {_CSV_SPECIAL} ORDER BY t.id"
)


def _csv_line(fields: tuple) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(fields)
    return buffer.getvalue()[:-1]


def _bool_text(value: object) -> str:
    return "True" if value else "False"


def _timings_rows(connection: Connection, min_seq: int | None = None) -> list[str]:
    """The lines of timings.csv (without its header) for the trials of records from ``min_seq``.

    Each line is what pandas' ``to_csv`` wrote for the row before this replaced it (it
    spent most of a 10,000-record render building a frame of 400,000 rows and writing it
    back out): the ``csv`` module's minimal quoting, booleans as ``True``/``False``, floats
    as their shortest repr, NULL as an empty field (``tests/test_timings_csv.py`` compares
    both on crafted text). A record's own fields are formatted once, not once per trial.
    """
    cursor = connection.connection.driver_connection.cursor()
    start = min_seq or 0
    prefixes = {
        seq: _csv_line((sha, created, revision, _bool_text(dirty), key)) + ","
        for seq, sha, created, revision, dirty, key in cursor.execute(_RECORDS_SQL, (start,))
    }
    rows = cursor.execute(_TRIALS_SQL, (start,)).fetchall()
    special = None
    lines = []
    for seq, text, seconds, counts, residency in rows:
        if text is None:
            if special is None:
                special = iter(cursor.execute(_SPECIAL_TRIALS_SQL, (start,)).fetchall())
            *fields, kept = next(special)
            text = _csv_line((*fields, _bool_text(kept)))
        lines.append(
            f"{prefixes[seq]}{text},{seconds!r},{counts},"
            f"{'' if residency is None else repr(residency)}\n"
        )
    return lines


def timings_csv_text(rows: list[str], *, header: bool) -> bytes:
    """timings.csv (``header``) or lines to append to it, from :func:`_timings_rows`."""
    text = "".join(rows)
    if header:
        text = ",".join(TIMINGS_COLUMNS) + "\n" + text
    return text.encode("utf-8")


def build_timings_csv(connection: Connection) -> bytes:
    return timings_csv_text(_timings_rows(connection), header=True)


def update_timings_csv(connection: Connection, path: Path, new_seqs: list[int]) -> None:
    """Append the new records' trials when the file is as last rendered, else rewrite it."""
    state = read_meta_json(connection, META_TIMINGS)
    size = path.stat().st_size if path.exists() else -1
    newest = max_seq(connection)
    if appendable(connection, state, size, new_seqs, newest):
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
