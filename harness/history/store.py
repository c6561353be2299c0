"""Registering reports into a history: validate, store, journal, index, then render.

Every report is parsed and validated before anything is written, so a bad report
leaves the history untouched. The rest runs under the history's file lock, so any
number of processes may register at once: records are written first (durable,
content-addressed), then chained into the journal, then indexed in one transaction.
Rendering is not this module's job (``harness.history`` knows nothing of rendering):
the caller passes a ``render`` hook, which runs under the same lock once the records
are indexed (the CLI passes :func:`harness.render.registration_renderer`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import Engine, select
from sqlalchemy.exc import DatabaseError

from harness.errors import HarnessError, HistoryError, ReportValidationError
from harness.fsio import FileWriteError
from harness.history.entries import IndexEntry, derive_entry
from harness.history.index_db import (
    IndexNeedsRebuild,
    RecordRow,
    index_write_error,
    insert_entry,
    mark_index_checked,
    open_index,
    quick_check_records,
)
from harness.history.journal import append_journal, read_journal, utc_now
from harness.history.layout import HistoryLayout
from harness.history.lock import DEFAULT_LOCK_TIMEOUT, locked_history
from harness.history.rebuild import rebuild_index_locked
from harness.history.records import sha256_bytes, write_record
from harness.report import (
    migrate_report,
    parse_report_json,
    read_report_bytes,
    schema_version_of,
    validate_report,
)


class RegistrationRenderer(Protocol):
    """Brings rendered files up to date after ``new_seqs`` were indexed (lock held)."""

    def __call__(self, layout: HistoryLayout, engine: Engine, *, new_seqs: list[int]) -> None: ...


@dataclass(frozen=True)
class PreparedReport:
    """A report read and validated, not yet stored."""

    data: bytes
    sha256: str
    doc: dict[str, Any]
    schema_version: int
    source: str


@dataclass(frozen=True)
class RegisterResult:
    """What registration did with one report."""

    sha256: str
    path: Path
    source: str
    created: bool
    comparison_key: str
    #: head of the journal once the whole registration call was journalled
    journal_head: str = ""
    #: the record was stored before but never journalled; this registration adopted it
    adopted: bool = False

    @property
    def message(self) -> str:
        if self.created:
            return f"stored {self.sha256} from {self.source}"
        if self.adopted:
            return f"registered {self.sha256} (stored earlier, never journalled) from {self.source}"
        return f"already stored {self.sha256} (identical bytes from {self.source}; nothing written)"


def prepare_report(source: bytes | str | Path, *, name: str | None = None) -> PreparedReport:
    """Read, validate and migrate (in memory) one report; raises ReportValidationError."""
    data, label = read_report_bytes(source, name=name)
    doc = parse_report_json(data, name=label)
    version = schema_version_of(doc, label)
    doc = migrate_report(doc, version, name=label)
    validate_report(doc, name=label)
    return PreparedReport(
        data=data, sha256=sha256_bytes(data), doc=doc, schema_version=version, source=label
    )


def entry_for(layout: HistoryLayout, prepared: PreparedReport) -> IndexEntry:
    return derive_entry(
        prepared.doc,
        sha256=prepared.sha256,
        path=layout.record_relpath(prepared.sha256),
        size_bytes=len(prepared.data),
        schema_version=prepared.schema_version,
    )


def open_history_index(layout: HistoryLayout) -> Engine:
    """Open the index; an old index without a migration step is rebuilt from the records.

    A damaged index is refused (:class:`~harness.history.index_db.IndexUnreadable`), with
    the message ``verify`` reports: registering into it could hide or duplicate rows.
    The caller holds the history lock.
    """
    try:
        try:
            engine = open_index(layout.index_db)
        except IndexNeedsRebuild:
            rebuild_index_locked(layout)
            engine = open_index(layout.index_db)
        quick_check_records(engine, layout.index_db)
        return engine
    except DatabaseError as exc:
        raise index_write_error(layout.index_db, "opening the index", exc) from exc


def _require_journal_or_empty(layout: HistoryLayout) -> None:
    """A history without records may gain its journal; one with records must have it."""
    if layout.journal.exists():
        return
    if any(layout.iter_record_files()):
        read_journal(layout)  # raises: the journal is missing
    try:
        layout.journal.touch()
    except OSError as exc:
        raise FileWriteError(layout.journal, "creating the journal", exc) from exc


def register_reports(
    history_dir: str | Path,
    sources: Iterable[bytes | str | Path | PreparedReport],
    *,
    names: Sequence[str] | None = None,
    render: RegistrationRenderer | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
) -> list[RegisterResult]:
    """Register reports into the history at ``history_dir`` (created when new).

    Parameters
    ----------
    sources
        Paths of report files, report bytes, or reports already prepared.
    names
        Labels for byte sources in messages and the journal.
    render
        Called under the lock once the records are indexed, to bring the rendered
        files up to date; ``None`` renders nothing (``harness render index`` can later).

    Raises
    ------
    ReportValidationError
        When any report is invalid; nothing is written then.
    HistoryError
        When the folder is not a history, its journal is missing, its index is damaged,
        or a stored record was tampered with.
    harness.fsio.FileWriteError
        When a write fails (a full disk), naming the path and the step.
    """
    sources = list(sources)
    labels = list(names) if names is not None else [None] * len(sources)
    if len(labels) != len(sources):
        raise ValueError("names must match sources one to one")
    prepared = [
        source if isinstance(source, PreparedReport) else prepare_report(source, name=label)
        for source, label in zip(sources, labels)
    ]
    with locked_history(history_dir, create=True, timeout=lock_timeout) as layout:
        _require_journal_or_empty(layout)
        engine = open_history_index(layout)
        results, new_seqs = _register_locked(layout, engine, prepared)
        if render is not None:
            try:
                render(layout, engine, new_seqs=new_seqs)
            except (HarnessError, OSError, DatabaseError) as exc:
                detail = exc.orig if isinstance(exc, DatabaseError) else exc
                raise HistoryError(
                    f"{detail} (while rendering; the reports are registered, journal head "
                    f"{results[0].journal_head if results else '-'}: run `harness render index`)"
                ) from exc
        mark_index_checked(layout.index_db)
        return results


def _register_locked(
    layout: HistoryLayout, engine: Engine, prepared: list[PreparedReport]
) -> tuple[list[RegisterResult], list[int]]:
    results: list[RegisterResult] = []
    journal_entries = []
    to_index: dict[str, PreparedReport] = {}
    stored_before: dict[str, RegisterResult] = {}
    created_now: set[str] = set()
    for report in prepared:
        written = write_record(layout, report.data)
        if written.created:
            created_now.add(written.sha256)
            journal_entries.append(
                {"registered_utc": utc_now(), "sha256": written.sha256, "source": report.source}
            )
        to_index.setdefault(written.sha256, report)
        result = RegisterResult(
            sha256=written.sha256,
            path=written.path,
            source=report.source,
            created=written.created,
            comparison_key="",
        )
        if written.sha256 not in created_now and written.sha256 not in stored_before:
            stored_before[written.sha256] = result
        results.append(result)
    try:
        with engine.connect() as connection:
            present = set(
                connection.execute(
                    select(RecordRow.sha256).where(RecordRow.sha256.in_(list(to_index)))
                ).scalars()
            )
    except DatabaseError as exc:
        raise index_write_error(layout.index_db, "reading the index", exc) from exc
    # A record stored before but absent from the index may never have been journalled
    # (a registration killed between the two): this registration adopts it. Indexed
    # records were journalled first, so only this rare case reads the whole journal.
    adopted: set[str] = set()
    unindexed = [sha for sha in stored_before if sha not in present]
    if unindexed:
        journalled = read_journal(layout).shas
        for sha in unindexed:
            if sha not in journalled:
                adopted.add(sha)
                journal_entries.append(
                    {
                        "adopted": True,
                        "registered_utc": utc_now(),
                        "sha256": sha,
                        "source": stored_before[sha].source,
                    }
                )
    head = append_journal(layout, journal_entries)
    new_seqs: list[int] = []
    keys: dict[str, str] = {}
    try:
        with engine.begin() as connection:
            for sha256, report in to_index.items():
                entry = entry_for(layout, report)
                keys[sha256] = entry.record["comparison_key"]
                if sha256 not in present:
                    # also indexes a stored record whose indexing a crash cut short
                    new_seqs.append(insert_entry(connection, entry))
    except DatabaseError as exc:
        raise index_write_error(layout.index_db, "indexing the records", exc) from exc
    final = [
        replace(
            r,
            comparison_key=keys[r.sha256],
            journal_head=head,
            adopted=r.sha256 in adopted and not r.created,
        )
        for r in results
    ]
    return final, new_seqs


def index_journalled(layout: HistoryLayout, engine: Engine) -> tuple[list[int], list[str]]:
    """Index every journalled record the index lacks (a registration cut short between
    its journal line and its index rows, e.g. by a full disk), in journal order: the new
    seqs, and the records left out with why (a missing, damaged or invalid record:
    ``history verify`` says more). The caller holds the history lock. One read of the
    index's SHA-256 column and of the journal; nothing else when nothing lags."""
    journal = read_journal(layout)
    try:
        with engine.connect() as connection:
            present = set(connection.execute(select(RecordRow.sha256)).scalars())
    except DatabaseError as exc:
        raise index_write_error(layout.index_db, "reading the index", exc) from exc
    wanted = list(dict.fromkeys(e["sha256"] for e in journal.entries if e["sha256"] not in present))
    entries, skipped = [], []
    for sha256 in wanted:
        path = layout.record_path(sha256)
        try:
            data = path.read_bytes()
        except OSError as exc:
            skipped.append(f"{path}: {exc.strerror or exc}; journalled but not indexed")
            continue
        if sha256_bytes(data) != sha256:
            skipped.append(f"{path}: bytes no longer match the name; not indexed")
            continue
        try:
            entries.append(entry_for(layout, prepare_report(data, name=str(path))))
        except ReportValidationError as exc:
            skipped.append(f"{exc}; not indexed")
    new_seqs = []
    if entries:
        try:
            with engine.begin() as connection:
                new_seqs = [insert_entry(connection, entry) for entry in entries]
        except DatabaseError as exc:
            raise index_write_error(layout.index_db, "indexing journalled records", exc) from exc
    return new_seqs, skipped


__all__ = [
    "PreparedReport",
    "RegisterResult",
    "RegistrationRenderer",
    "entry_for",
    "index_journalled",
    "open_history_index",
    "prepare_report",
    "register_reports",
]
