"""The history folder as a :class:`~harness.history.backend.HistoryBackend`.

Records, journal and calibrations are files (``docs/history-format.md``), the index is
the folder's SQLite database; every method takes the history lock it needs. Opening one
touches nothing: a folder that is not there yet is created by the first registration.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Connection, select

from harness.errors import HistoryError
from harness.history.backend import (
    CalibrationParser,
    HistoryCheck,
    IndexedHistory,
    IndexRebuild,
    RegisteredReport,
    RenderSource,
    calibration_problems,
)
from harness.history.evidence_store import FolderStore, StoreCheck, StoredRecord
from harness.history.index_db import RecordRow, open_index, open_index_for_reading
from harness.history.layout import CALIBRATIONS_DIR, HistoryLayout, sha256_of_record_name
from harness.history.lock import (
    check_history_marker,
    history_lock,
    locked_history,
    require_history,
)
from harness.history.lookup import read_checked_record, resolve_record
from harness.history.rebuild import rebuild_history
from harness.history.records import write_record
from harness.history.store import index_journalled, register_reports
from harness.history.verify import verify_history


class FolderHistory(IndexedHistory):
    """A history folder (records/, journal.jsonl, index.sqlite, calibrations/)."""

    holds_rendered_files = True

    def __init__(self, history_dir: str | Path, *, read_only: bool = False) -> None:
        self.root = Path(history_dir)
        self.read_only = read_only
        self.where = str(history_dir)
        self._store = FolderStore(self.root)
        self._layout = HistoryLayout.at(self.root)
        self._calibrations = HistoryLayout.at(self.root / CALIBRATIONS_DIR)

    def close(self) -> None:
        """Nothing held between calls: each takes and releases its lock."""

    def _writable(self) -> None:
        if self.read_only:
            raise HistoryError(f"{self.where}: opened to be read; nothing is written")

    def exists(self) -> bool:
        return self._layout.marker.exists()

    def location_arguments(self) -> list[str]:
        return ["--history-dir", str(self.root.absolute())]

    # the evidence store
    def register(self, data: bytes, *, source: str, registered_utc: str) -> StoredRecord:
        self._writable()
        return self._store.register(data, source=source, registered_utc=registered_utc)

    def read(self, sha256: str) -> bytes:
        return self._store.read(sha256)

    def head(self) -> str:
        return self._store.head()

    def journal_lines(self) -> list[bytes]:
        return self._store.journal_lines()

    def check(self, *, expect_head: str | None = None) -> StoreCheck:
        return self._store.check(expect_head=expect_head)

    # records
    def register_reports(
        self, prepared: Sequence, *, render: Callable | None = None
    ) -> list[RegisteredReport]:
        self._writable()
        results = register_reports(self.root, list(prepared), render=render)
        return [RegisteredReport(r.sha256, r.created, r.message, r.journal_head) for r in results]

    def record_label(self, sha256: str) -> str:
        return str(self._layout.record_path(sha256))

    def match_prefix(self, prefix: str, *, what: str = "") -> str:
        return resolve_record(self._layout, prefix, what=what).stem

    def read_checked(self, sha256: str) -> bytes:
        path = self._layout.record_path(sha256)
        if not path.is_file():
            raise HistoryError(f"{path}: no record {sha256}")
        return read_checked_record(path)

    def count_records(self) -> int:
        return sum(1 for _ in self._layout.iter_record_files())

    def _record_rows(self) -> Iterator[tuple[str, bytes]]:
        self._require()  # now, not when the rows are first read
        return _record_rows(self._layout)

    # index
    def _require(self) -> None:
        """HistoryError unless this is an existing history folder of a known version."""
        require_history(self._layout)
        check_history_marker(self._layout, create=False)

    @contextmanager
    def _index_connection(self, step: str) -> Iterator[Connection]:
        self._require()
        engine = open_index_for_reading(self._layout.index_db)
        try:
            with engine.connect() as connection:
                yield connection
        finally:
            engine.dispose()

    def unindexed(self) -> list[str]:
        with self._index_connection("reading the index") as connection:
            indexed = set(connection.execute(select(RecordRow.sha256)).scalars())
        stored = {sha for sha, _ in _record_rows(self._layout, read=False)}
        return sorted(stored - indexed)

    # calibrations
    def calibration_rows(self) -> list[tuple[str, bytes]]:
        return sorted(_record_rows(self._calibrations, every_file=True))

    def calibration_label(self, sha256: str) -> str:
        return str(self._calibrations.record_path(sha256))

    def require_calibrations(self) -> None:
        """A folder holds calibrations from its first one on."""

    def store_calibration(self, data: bytes) -> tuple[str, bool]:
        self._writable()
        with history_lock(self._layout):
            check_history_marker(self._layout, create=True)
            written = write_record(self._calibrations, data)
        return written.sha256, written.created

    # rendering: a folder is read where it is (its bookkeeping says what is stale)
    @contextmanager
    def rendering(self, out, *, options=None, on_copy=None) -> Iterator[RenderSource]:
        """Drawn in place, the history is locked and a registration cut short after its
        journal line (a full disk) is indexed first; drawn into ``out``, it is only read
        (it may be read-only)."""
        with locked_history(self.root, shared=out is not None) as layout:
            source = RenderSource(layout, None, out)
            if out is None:
                source.engine = open_index(layout.index_db, create=False)
                repaired, skipped = index_journalled(layout, source.engine)
                if repaired:
                    source.notes.append(
                        f"indexed {len(repaired)} journalled records the index lacked"
                    )
                source.warnings += [
                    f"warning: {line} (run `harness history verify`)" for line in skipped
                ]
            else:
                source.engine = open_index_for_reading(layout.index_db)
            try:
                yield source
            finally:
                source.engine.dispose()

    # checks
    def verify(
        self,
        *,
        expect_head: str | None = None,
        records_only: bool = False,
        check_rendered: Callable | None = None,
        parse_calibration: CalibrationParser | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> HistoryCheck:
        result = verify_history(
            self.root,
            expect_head=expect_head,
            check_rendered=None if records_only else check_rendered,
            progress=progress,
            records_only=records_only,
        )
        errors = [str(p) for p in result.errors]
        if parse_calibration is not None:
            errors += [f"error: {p}" for p in calibration_problems(self, parse_calibration)]
        return HistoryCheck(
            result.records, errors, [str(p) for p in result.warnings], result.journal_head
        )

    def rebuild(
        self, *, render: Callable | None = None, progress: Callable[[int], None] | None = None
    ) -> IndexRebuild:
        self._writable()
        result = rebuild_history(self.root, render=render, progress=progress)
        return IndexRebuild(
            result.indexed,
            [str(p) for p in result.problems if p.is_error],
            [str(p) for p in result.problems if not p.is_error],
            f"indexed {result.indexed} records; {len(result.unregistered)} unregistered "
            f"records listed, not indexed; {result.temps_removed} temporary files removed",
        )


def _record_rows(
    layout: HistoryLayout, *, read: bool = True, every_file: bool = False
) -> Iterator[tuple[str, bytes]]:
    """(key, bytes) of the record files under ``layout``, in key order: only well-named
    files, or ``every_file`` (a misnamed one keyed by its name, so it fails its hash)."""
    for path in layout.iter_record_files():
        sha256 = sha256_of_record_name(path)
        if sha256 is None and not every_file:
            continue
        key = sha256 or path.name
        if path.is_symlink() or not path.is_file():
            yield key, b""
            continue
        yield key, path.read_bytes() if read else b""
