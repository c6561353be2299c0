"""Folder layout of a history (``docs/history-format.md`` section "Layout").

A history is a folder::

    history.json                 format marker {"format": ..., "version": 2}
    records/sha256/ab/<hex>.json one report's exact bytes, named by their SHA-256, read-only
    records/tmp/                 temporary files of registrations in progress
    journal.jsonl                append-only registration witness, one JSON line per new record
    index.sqlite                 derived SQLAlchemy/SQLite index (WAL mode)
    index.sqlite.checked         the index state the last registration left (skips its check)
    .lock                        filelock serialising registration, rebuild and rendering
    calibrations/records/...     calibration reports, write-once records like records/
    index.json, timings.csv, README.md, index.html, plots/<key>.png   rendered, derived
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: ``format`` value of ``history.json``.
HISTORY_FORMAT = "quantem-harness/history"
#: Layout version this harness writes and reads; newer ones are refused. 2: the journal
#: is a hash chain. A version-1 history is read as it is and its marker raised to 2 at
#: its next registration, so that an older harness (which would append unchained
#: lines) refuses it from then on; no record or journal line is rewritten.
HISTORY_FORMAT_VERSION = 2

MARKER_NAME = "history.json"
#: Temporary name of the marker while a new history is being created.
MARKER_TEMP_NAME = "history.json.tmp"
RECORDS_DIR = "records"
HASH_ALGORITHM = "sha256"
RECORD_SUFFIX = ".json"
TEMP_DIR = "tmp"
JOURNAL_NAME = "journal.jsonl"
INDEX_DB_NAME = "index.sqlite"
LOCK_NAME = ".lock"
INDEX_JSON_NAME = "index.json"
TIMINGS_CSV_NAME = "timings.csv"
README_NAME = "README.md"
HTML_NAME = "index.html"
PLOTS_DIR = "plots"
#: Folder of a history holding calibration records (its own write-once record tree).
CALIBRATIONS_DIR = "calibrations"
PLOT_SUFFIX = ".png"

#: Record files are made read-only for everyone once written.
RECORD_MODE = 0o444
#: Hex digits of the first-level fan-out folder under ``records/sha256/``.
FANOUT_DIGITS = 2

SHA256_PATTERN = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class HistoryLayout:
    """Paths of one history folder; pure path arithmetic, touches nothing on disk."""

    root: Path

    @classmethod
    def at(cls, root: str | Path) -> HistoryLayout:
        return cls(Path(root).absolute())

    @property
    def marker(self) -> Path:
        return self.root / MARKER_NAME

    @property
    def marker_temp(self) -> Path:
        return self.root / MARKER_TEMP_NAME

    @property
    def records(self) -> Path:
        return self.root / RECORDS_DIR / HASH_ALGORITHM

    @property
    def temp(self) -> Path:
        return self.root / RECORDS_DIR / TEMP_DIR

    @property
    def journal(self) -> Path:
        return self.root / JOURNAL_NAME

    @property
    def index_db(self) -> Path:
        return self.root / INDEX_DB_NAME

    @property
    def lock(self) -> Path:
        return self.root / LOCK_NAME

    @property
    def index_json(self) -> Path:
        return self.root / INDEX_JSON_NAME

    @property
    def timings_csv(self) -> Path:
        return self.root / TIMINGS_CSV_NAME

    @property
    def readme(self) -> Path:
        return self.root / README_NAME

    @property
    def html(self) -> Path:
        return self.root / HTML_NAME

    @property
    def plots(self) -> Path:
        return self.root / PLOTS_DIR

    def record_path(self, sha256: str) -> Path:
        """Where the record with this SHA-256 lives."""
        return self.records / sha256[:FANOUT_DIGITS] / f"{sha256}{RECORD_SUFFIX}"

    def record_relpath(self, sha256: str) -> str:
        """The record's path relative to the history root, with ``/`` separators."""
        return record_relpath(sha256)

    def iter_record_files(self) -> Iterator[Path]:
        """Every file under ``records/sha256/`` (well-named or not), sorted."""
        if not self.records.is_dir():
            return
        for shard in sorted(self.records.iterdir()):
            if shard.is_dir():
                yield from sorted(shard.iterdir())
            else:
                yield shard


def record_relpath(sha256: str) -> str:
    """Where a record lives relative to a history root (``records/sha256/ab/<hex>.json``);
    also the ``path`` a PostgreSQL history indexes it under."""
    return f"{RECORDS_DIR}/{HASH_ALGORITHM}/{sha256[:FANOUT_DIGITS]}/{sha256}{RECORD_SUFFIX}"


def sha256_of_record_name(path: Path) -> str | None:
    """The SHA-256 a record file's name claims, or None when the name is not a record name."""
    if path.suffix != RECORD_SUFFIX:
        return None
    stem = path.stem
    if not SHA256_PATTERN.match(stem) or path.parent.name != stem[:FANOUT_DIGITS]:
        return None
    return stem
