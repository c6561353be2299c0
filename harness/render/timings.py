"""``timings.csv``: every measured trial with its record's identity.

Each row carries the record's SHA-256, creation time, git revision and dirty flag
and comparison key, so a spreadsheet or notebook can order and group trials by
revision without opening the records.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import operator
from collections.abc import Iterator, Sequence
from pathlib import Path

from sqlalchemy import Connection

from harness.fsio import FileWriteError, replacing
from harness.history.entries import TRIAL_FIELDS
from harness.history.index_db import RecordRow, TrialRow, read_meta_json, write_meta
from harness.render.targets import RENDERED_MODE, appendable, max_seq

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
#: A record's fields at the start of each of its trials' lines (after its seq).
_RECORD_FIELDS = ("seq", "sha256", "created_utc", "git_revision", "git_dirty", "comparison_key")
_RECORDS_SQL = f"SELECT {', '.join(_RECORD_FIELDS)} FROM {RecordRow.__tablename__} WHERE seq >= ?"
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


def _record_prefix(sha: str, created: str, revision: object, dirty: object, key: str) -> str:
    """A record's fields as they start each of its trials' lines."""
    return _csv_line((sha, created, revision, _bool_text(dirty), key)) + ","


#: Trials read from the index per batch while timings.csv is written (and lines per write).
_TIMINGS_BATCH = 20_000


def iter_timings_batches(connection: Connection, min_seq: int | None = None) -> Iterator[list[str]]:
    """The lines of timings.csv (without its header) for the trials of records from
    ``min_seq``, a batch of lines at a time, read from the index in batches (4,000,000
    trials at 100,000 records: held all at once they were most of a render's 3.1 GB peak).

    Each line is what pandas' ``to_csv`` wrote for the row before this replaced it (it
    spent most of a 10,000-record render building a frame of 400,000 rows and writing it
    back out): the ``csv`` module's minimal quoting, booleans as ``True``/``False``, floats
    as their shortest repr, NULL as an empty field (``tests/test_timings_csv.py`` compares
    both on crafted text). A record's own fields are formatted once, not once per trial,
    and a batch without text that needs quoting is formatted in one comprehension.
    """
    driver = connection.connection.driver_connection
    start = min_seq or 0
    prefixes = {
        seq: _record_prefix(*fields) for seq, *fields in driver.execute(_RECORDS_SQL, (start,))
    }
    trials = driver.execute(_TRIALS_SQL, (start,))
    # the trials whose text needs quoting, in the same order, on a cursor of their own
    special = None
    while rows := trials.fetchmany(_TIMINGS_BATCH):
        if any(row[1] is None for row in rows):
            fixed = []
            for seq, text, seconds, counts, residency in rows:
                if text is None:
                    if special is None:
                        special = driver.execute(_SPECIAL_TRIALS_SQL, (start,))
                    *fields, kept = special.fetchone()
                    text = _csv_line((*fields, _bool_text(kept)))
                fixed.append((seq, text, seconds, counts, residency))
            rows = fixed
        yield [
            f"{prefixes[seq]}{text},{seconds!r},{counts},"
            f"{'' if residency is None else repr(residency)}\n"
            for seq, text, seconds, counts, residency in rows
        ]


def iter_timings_lines(connection: Connection, min_seq: int | None = None) -> Iterator[str]:
    """The lines of :func:`iter_timings_batches`, one at a time."""
    for batch in iter_timings_batches(connection, min_seq):
        yield from batch


def _timings_rows(connection: Connection, min_seq: int | None = None) -> list[str]:
    """Every line of :func:`iter_timings_lines` (few: the rows a registration appends)."""
    return list(iter_timings_lines(connection, min_seq))


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
        try:
            with open(path, "ab") as handle:
                handle.write(data)
        except OSError as exc:
            raise FileWriteError(path, "appending the new trials to timings.csv", exc) from exc
        size += len(data)
    elif state is not None and state.get("bytes") == size and state.get("seq") == newest:
        return  # already current
    else:
        size = stream_timings_csv(connection, path)
    write_meta(connection, META_TIMINGS, json.dumps({"bytes": size, "seq": newest}))


def stream_timings_csv(connection: Connection, path: Path) -> int:
    """Replace ``path`` with timings.csv, written a batch of lines at a time (the bytes of
    :func:`build_timings_csv`, never all in memory); how many bytes."""
    size = 0
    with replacing(path, step=f"rendering {path.name}", mode=RENDERED_MODE) as handle:
        header = ",".join(TIMINGS_COLUMNS) + "\n"
        handle.write(header.encode("utf-8"))
        size += len(header)
        for batch in iter_timings_batches(connection):
            data = "".join(batch).encode("utf-8")
            handle.write(data)
            size += len(data)
    return size


def write_timings_csv(connection: Connection, path: Path, *, record_state: bool) -> None:
    size = stream_timings_csv(connection, path)
    if record_state:
        write_timings_state(connection, size)


def write_timings_state(connection: Connection, size: int) -> None:
    """Record that timings.csv (``size`` bytes) holds every trial of the index."""
    write_meta(connection, META_TIMINGS, json.dumps({"bytes": size, "seq": max_seq(connection)}))


#: The fields of a trial's line that :class:`_TrialTexts` formats (its key, in order).
_TEXT_FIELDS = ("acquisition", "format", "cache_state", "trial_index", "label", "kept")
#: Distinct text parts held by :class:`_TrialTexts` before it starts again (a bound on
#: its memory for a history whose trials share few labels; 4 at 100,000 records here).
_TEXTS_HELD = 100_000


class _TrialTexts(dict):
    """A trial's (acquisition, format, cache state, trial index, label, kept) -> that
    part of its timings.csv line, each distinct combination formatted once: a history's
    trials repeat a few of them (4,000,000 trial rows at 100,000 records, tens of
    distinct parts), so the line of most rows is a lookup, not four joins, four scans
    for the characters the csv writer quotes and a format. Keys that are equal are
    formatted alike because each column's values come as one type (a driver gives an
    integer column ints and a boolean column bools: ``1 == True`` never meets ``True``).
    """

    def __missing__(self, fields: tuple) -> str:
        acquisition, format_, cache_state, trial_index, label, kept = fields
        # the characters of _CSV_SPECIAL: the csv writer quotes such a field
        joined = acquisition + format_ + cache_state + label
        if "," in joined or '"' in joined or "\n" in joined or "\r" in joined:
            text = _csv_line(
                (acquisition, format_, cache_state, trial_index, label, _bool_text(kept))
            )
        else:
            text = (
                f"{acquisition},{format_},{cache_state},{trial_index},{label},"
                f"{'True' if kept else 'False'}"
            )
        if len(self) >= _TEXTS_HELD:
            self.clear()
        self[fields] = text
        return text


class TimingsFromRows:
    """timings.csv written from index rows as they are copied into an empty index (the
    snapshot of a first server render: ``rows(table, batch)`` is the ``rows_copied`` hook of
    :func:`harness.history.snapshot.take_snapshot`), so its 4,000,000 trial rows at 100,000
    records are not read back out of SQLite (15 s of CPU) to be formatted.

    The bytes are those :func:`stream_timings_csv` writes from the finished index: the
    records rows come first, the trial rows in id order (the copy's order), and each
    line is formatted by the same rules. :meth:`finish` puts the file in place and
    returns its size; :meth:`abort` leaves ``path`` as it was.
    """

    def __init__(self, path: Path) -> None:
        self._files = contextlib.ExitStack()
        self._handle = self._files.enter_context(
            replacing(path, step=f"rendering {path.name}", mode=RENDERED_MODE)
        )
        header = (",".join(TIMINGS_COLUMNS) + "\n").encode("utf-8")
        self._handle.write(header)
        # nothing left in the buffer when the record-page workers are forked (they
        # start once the records are copied, before the trials)
        self._handle.flush()
        self.size = len(header)
        self._prefixes: dict[int, str] = {}
        self._texts = _TrialTexts()
        names = lambda model: [column.name for column in model.__table__.columns]  # noqa: E731
        self._record_fields = operator.itemgetter(
            *(names(RecordRow).index(name) for name in _RECORD_FIELDS)
        )
        trial = names(TrialRow)
        self._text_fields = operator.itemgetter(*(trial.index(name) for name in _TEXT_FIELDS))
        self._number_at = tuple(
            trial.index(name)
            for name in ("record_seq", "seconds", "read_bytes", "file_bytes", "residency_before")
        )

    def rows(self, table: str, batch: Sequence[Sequence]) -> None:
        if table == RecordRow.__tablename__:
            for row in batch:
                seq, *fields = self._record_fields(row)
                self._prefixes[seq] = _record_prefix(*fields)
        elif table == TrialRow.__tablename__:
            prefixes, texts, text_of = self._prefixes, self._texts, self._text_fields
            seq, seconds, read_bytes, file_bytes, residency = self._number_at
            data = "".join(
                [
                    f"{prefixes[row[seq]]}{texts[text_of(row)]},{row[seconds]!r},"
                    f"{row[read_bytes]},{row[file_bytes]},"
                    f"{'' if row[residency] is None else repr(row[residency])}\n"
                    for row in batch
                ]
            ).encode("utf-8")
            self._handle.write(data)
            self.size += len(data)

    def finish(self) -> int:
        self._files.close()
        return self.size

    def abort(self) -> None:
        with contextlib.suppress(_Aborted):
            self._files.__exit__(_Aborted, _Aborted(), None)


class _Aborted(Exception):
    """Raised into :func:`replacing` to drop its temporary file."""
