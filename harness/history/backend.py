"""The history-backend contract: everything a command does with a history, whatever holds it.

A history is kept in a folder (:class:`harness.history.folder_history.FolderHistory`:
files, a journal file and a SQLite index, the embedded default) or on a PostgreSQL
server (:class:`harness.history.server_history.ServerHistory`, ``--history-url``).
Both implement :class:`HistoryBackend`; :func:`harness.history.opening.open_history`
picks one from a folder or a URL, once per command, and the commands call its methods
without asking which it is. Both pass one conformance suite shipped in the package,
:class:`harness.history.testing.HistoryBackendTests` (zarr's ``testing/store.py``
pattern): a new backend is one module that passes it (``docs/architecture.md``).

The rules every backend shares are written here once, on top of the contract: naming a
report by a file or a SHA-256 prefix (:func:`load_reference`), which calibrations are
sound (:func:`intact_calibrations`, :func:`calibration_problems`) and which records
read back as reports (:func:`iter_intact_reports`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from harness.errors import HistoryError, ReportValidationError
from harness.history.evidence_store import EvidenceStore
from harness.history.lookup import (
    LoadedReport,
    load_report_file,
    no_history_for,
    parse_sha_prefix,
)
from harness.history.records import sha256_bytes
from harness.report import parse_report


@dataclass(frozen=True)
class RegisteredReport:
    """What registering one report did, as a command prints it."""

    sha256: str
    created: bool
    message: str
    #: the journal's head once the whole registration call was journalled
    journal_head: str


@dataclass
class HistoryCheck:
    """What :meth:`HistoryBackend.verify` found: each problem as the line printed."""

    records: int
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: the journal's head as read now (None without a readable journal)
    head: str | None = None

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass
class IndexRebuild:
    """What :meth:`HistoryBackend.rebuild` did: problems as printed, and a summary line."""

    indexed: int
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    summary: str = ""


#: Parses a calibration's bytes (``harness.verdict.calibration_report.parse_calibration``
#: with its name), raising ReportValidationError; the history layer knows no calibration
#: schema, so the command passes it.
CalibrationParser = Callable[[bytes, str], object]


@dataclass
class RenderSource:
    """What a render reads and where it draws (:meth:`HistoryBackend.rendering`)."""

    #: the history folder the render reads: the history's own, or the copy in ``--out``
    layout: Any
    #: its index (a SQLAlchemy engine)
    engine: Any
    #: where the files are drawn; None: into ``layout``'s folder, which keeps the bookkeeping
    out: Path | None
    #: what the folder's bookkeeping does not say: None (a history folder keeps it), a
    #: ``snapshot.Stale`` (a copy taken whole: draw everything) or a
    #: ``snapshot.SnapshotUpdate`` (what a kept copy gained since its last render)
    changes: Any = None
    #: the options the copy was last rendered with (None: not a copy, or none held)
    held_options: dict | None = None
    #: lines for the user: notes (stdout) and warnings (stderr)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@runtime_checkable
class HistoryBackend(EvidenceStore, Protocol):
    """One history: its records and journal (:class:`EvidenceStore`), its index, its
    calibrations, and its checks. A method refuses what its backend cannot do with a
    UsageError or HistoryError naming the history, never a traceback."""

    #: the history as shown to users (a folder's path; a server's URL, password hidden)
    where: str
    #: whether the history holds its own rendered files (a folder); a backend that does
    #: not is rendered into a new folder from a snapshot (``render index --out``)
    holds_rendered_files: bool

    def close(self) -> None:
        """Release connections; the backend is not used afterwards."""

    def exists(self) -> bool:
        """Whether there is a history here (a folder may not have been created yet)."""

    def location_arguments(self) -> list[str]:
        """The command-line arguments that name this history (``--history-dir H`` or
        ``--history-url URL``, password hidden), for the commands a message suggests."""

    # records
    def register_reports(
        self, prepared: Sequence[Any], *, render: Callable | None = None
    ) -> list[RegisteredReport]:
        """Register validated reports (``harness.history.store.PreparedReport``), all or
        none, indexed; ``render`` brings a folder's rendered files up to date."""

    def record_label(self, sha256: str) -> str:
        """Where a record is, as ``show`` and comparisons print it."""

    def match_prefix(self, prefix: str, *, what: str = "") -> str:
        """The one record whose SHA-256 starts with ``prefix`` (4-64 hex digits);
        UsageError when none or several do, or there is no history."""

    def read_checked(self, sha256: str) -> bytes:
        """A record's bytes, re-hashed: HistoryError when they no longer match the key."""

    def count_records(self) -> int:
        """How many records are stored (for progress bars)."""

    def iter_reports(self) -> Iterator[tuple[str, dict]]:
        """(sha256, report) of every record that reads back intact, streamed."""

    # index
    def list_records(self, *, key: str | None = None, limit: int | None = None) -> list:
        """Index rows (``harness.history.index_db.RecordRow`` columns), oldest first;
        only comparison key ``key``; only the newest ``limit``."""

    def newest_candidate(self) -> str | None:
        """The newest indexed record that is not a calibration run (compare's default)."""

    def unindexed(self) -> list[str]:
        """SHA-256s of stored records the index lacks (what a render leaves out)."""

    # calibrations
    def calibration_rows(self) -> list[tuple[str, bytes]]:
        """(key, bytes) of every stored calibration as stored, unchecked, by key."""

    def calibration_label(self, sha256: str) -> str:
        """Where a calibration is, as comparisons print it."""

    def require_calibrations(self) -> None:
        """HistoryError naming the fix when this history cannot store calibrations."""

    def store_calibration(self, data: bytes) -> tuple[str, bool]:
        """Store a calibration's bytes (validated by the caller), write-once:
        (its SHA-256, whether it was new)."""

    # rendering
    def rendering(
        self,
        out: Path | None,
        *,
        options: Callable[[], dict],
        on_copy: Callable[[Any], Any] | None = None,
    ) -> AbstractContextManager[RenderSource]:
        """What a render of this history reads, held for the render (:class:`RenderSource`):
        a folder its own files and index (locked; ``out``: draw there instead, read only);
        a server a copy of itself that ``out`` keeps, taken or brought up to date
        (:mod:`harness.history.snapshot`; ``options()``: the render's options, kept with
        the copy; ``on_copy(layout)``: what the render does while the copy is taken
        whole, a :class:`harness.history.snapshot.CopyObserver`)."""

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
        """Re-hash every record and calibration, walk the journal, check the index
        against the records (and a folder's rendered files); never modifies anything."""

    def rebuild(
        self, *, render: Callable | None = None, progress: Callable[[int], None] | None = None
    ) -> IndexRebuild:
        """Rebuild the index from the journalled records (and a folder's rendered files)."""


class IndexedHistory:
    """The contract's index queries and report reading, written once over the two things
    a backend gives: a connection to its index (:meth:`_index_connection`) and its
    records as (sha256, bytes) rows (:meth:`_record_rows`). A folder and a server
    inherit them; the same SQL runs on SQLite and on PostgreSQL (the same models)."""

    def _index_connection(self, step: str) -> AbstractContextManager:
        """A connection to the index for one read; failures named as ``step``."""
        raise NotImplementedError

    def _record_rows(self) -> Iterator[tuple[str, bytes]]:
        """(sha256, bytes) of every stored record, by key."""
        raise NotImplementedError

    def record_label(self, sha256: str) -> str:
        raise NotImplementedError

    def list_records(self, *, key: str | None = None, limit: int | None = None) -> list:
        with self._index_connection("listing the records") as connection:
            return list_index_rows(connection, key=key, limit=limit)

    def newest_candidate(self) -> str | None:
        from harness.history.index_db import newest_candidate

        with self._index_connection("reading the index") as connection:
            return newest_candidate(connection)

    def iter_reports(self) -> Iterator[tuple[str, dict]]:
        return iter_intact_reports(self._record_rows(), self.record_label)


def list_index_rows(connection, *, key: str | None = None, limit: int | None = None) -> list:
    """The listing's index rows, oldest first: the same SQL on a folder's index and a
    server's (the same models)."""
    from sqlalchemy import select

    from harness.history.index_db import RecordRow

    statement = select(RecordRow).order_by(RecordRow.seq.desc())
    if key:
        statement = statement.where(RecordRow.comparison_key == key)
    if limit is not None:
        statement = statement.limit(limit)
    return list(reversed(connection.execute(statement).all()))


def load_reference(
    history: HistoryBackend | None, reference: str, *, what: str = ""
) -> LoadedReport:
    """The report named by ``reference``: an existing file is read as a report, anything
    else is a SHA-256 prefix looked up in ``history`` (``harness.history.lookup``'s rule);
    UsageError for a prefix when there is no history to look it up in."""
    loaded = load_report_file(reference, what=what)
    if loaded is not None:
        return loaded
    if history is None:
        raise no_history_for(reference, what=what)
    sha256 = history.match_prefix(reference, what=what)
    label = history.record_label(sha256)
    data = history.read_checked(sha256)
    return LoadedReport(parse_report(data, name=label), sha256, Path(label))


def checked_bytes(sha256: str, data: bytes, label: str) -> bytes:
    """``data`` when it hashes to ``sha256``; else HistoryError naming ``label``."""
    if sha256_bytes(data) != sha256:
        raise HistoryError(
            f"{label}: record bytes no longer match their key (tampered); refusing to use it"
        )
    return data


def iter_intact_reports(
    rows: Iterator[tuple[str, bytes]], label: Callable[[str], str]
) -> Iterator[tuple[str, dict]]:
    """(sha256, report) of the (sha256, bytes) ``rows`` that hash to their key and parse;
    the others are no evidence here (``history verify`` reports them)."""
    for sha256, data in rows:
        if sha256_bytes(data) != sha256:
            continue
        try:
            yield sha256, parse_report(data, name=label(sha256))
        except ReportValidationError:
            continue


def intact_calibrations(history: HistoryBackend) -> list[tuple[str, bytes]]:
    """(sha256, bytes) of every calibration whose bytes match its key, by key; a tampered
    one is left out, as a damaged record is (``history verify`` names it)."""
    return [(sha, data) for sha, data in history.calibration_rows() if sha256_bytes(data) == sha]


def calibration_problems(history: HistoryBackend, parse: CalibrationParser) -> list[str]:
    """Every stored calibration whose bytes no longer match its key, or that ``parse``
    refuses (let in by an older server, or an edit by hand)."""
    problems = []
    for sha256, data in history.calibration_rows():
        if sha256_bytes(data) != sha256:
            problems.append(f"calibration {sha256}: its bytes no longer match its key")
            continue
        try:
            parse(data, history.calibration_label(sha256))
        except ReportValidationError as exc:
            problems.append(
                f"calibration {sha256}: stored, but not a valid calibration report ({exc}): "
                "let in by an older server or an owner's edit; compare skips it"
            )
    return problems


def match_calibration_prefix(history: HistoryBackend, prefix: str) -> list[str]:
    """The keys of intact calibrations starting with ``prefix`` (4-64 hex digits)."""
    wanted = parse_sha_prefix(prefix, what="calibration")
    return [sha for sha, _ in intact_calibrations(history) if sha.startswith(wanted)]
