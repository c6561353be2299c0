"""A history on a database server: open it by URL, set it up, copy records to and from a folder.

The seam the commands use (issue 15): :func:`open_url_store` turns a
``postgresql+psycopg://USER@HOST/DB`` URL into an
:class:`~harness.history.evidence_store.EvidenceStore`, so a command works on the
contract, not on the backend. Every server failure becomes a
:class:`~harness.errors.HistoryError` naming the server (password hidden) and the step.

What a URL store holds today: the exact record bytes and the chained journal (with the
server-side rules of :mod:`harness.history.postgres`). The SQLite index (and so
``list``, ``show``, ``compare`` and ``render index`` on a URL) is not on the server yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.errors import HistoryError, UsageError
from harness.history.postgres import (
    PostgresStore,
    install_schema,
    journal_table,
    records_table,
    server_step,
)
from harness.history.records import sha256_bytes

#: The role :func:`init_database` creates: SELECT and INSERT on the evidence, nothing more.
WRITER_ROLE = "harness_writer"

_SCHEMES = ("postgresql+psycopg", "postgresql")


def server_name(url) -> str:
    """The URL as shown to users: password hidden."""
    return url.render_as_string(hide_password=True)


def _engine_for(url_text: str):
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(url_text)
    except ArgumentError as exc:
        raise UsageError(f"--history-url {url_text!r} is not a database URL: {exc}") from None
    if url.drivername not in _SCHEMES:
        raise UsageError(
            f"--history-url {server_name(url)}: only PostgreSQL is supported "
            "(postgresql+psycopg://USER@HOST/DB)"
        )
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    try:
        return create_engine(url, pool_pre_ping=True)
    except ImportError as exc:
        raise HistoryError(
            f"{server_name(url)}: {exc} (install psycopg 3: pip install 'psycopg[binary]')"
        ) from None


def open_url_store(url_text: str) -> PostgresStore:
    """The evidence store at ``url_text``; HistoryError when unreachable or not set up."""
    from sqlalchemy import inspect

    engine = _engine_for(url_text)
    with server_step(engine, "connecting"), engine.connect() as connection:
        tables = set(inspect(connection).get_table_names())
    missing = {records_table.name, journal_table.name} - tables
    if missing:
        engine.dispose()
        raise HistoryError(
            f"{server_name(engine.url)}: not an evidence store (no table "
            f"{', '.join(sorted(missing))}); run `harness history init-db URL` as its owner"
        )
    return PostgresStore(engine)


def init_database(url_text: str, *, grant_to: list[str] = ()) -> list[str]:
    """Create tables, triggers and the writer role (idempotent); what was done, as lines."""
    from sqlalchemy import text

    engine = _engine_for(url_text)
    done = []
    try:
        with server_step(engine, "creating the tables and triggers"):
            install_schema(engine)
        done.append("tables evidence_records, evidence_journal with insert-only triggers")
        with server_step(engine, f"creating role {WRITER_ROLE}"), engine.begin() as connection:
            exists = connection.execute(
                text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": WRITER_ROLE}
            ).first()
            if exists is None:
                connection.execute(text(f"CREATE ROLE {WRITER_ROLE} NOLOGIN"))
            for table in (records_table.name, journal_table.name):
                connection.execute(text(f"REVOKE ALL ON {table} FROM {WRITER_ROLE}"))
                connection.execute(text(f"GRANT SELECT, INSERT ON {table} TO {WRITER_ROLE}"))
            connection.execute(
                text(f"GRANT USAGE ON SEQUENCE {journal_table.name}_seq_seq TO {WRITER_ROLE}")
            )
            for user in grant_to:
                quoted = connection.dialect.identifier_preparer.quote(user)
                connection.execute(text(f"GRANT {WRITER_ROLE} TO {quoted}"))
        done.append(f"role {WRITER_ROLE}: SELECT and INSERT only")
        done += [f"granted {WRITER_ROLE} to {user}" for user in grant_to]
    finally:
        engine.dispose()
    return done


@dataclass(frozen=True)
class CopyResult:
    copied: int
    present: int
    head_from: str
    head_to: str


def _checked(sha256: str, data: bytes, where: str) -> bytes:
    if sha256_bytes(data) != sha256:
        raise HistoryError(f"{where}: record {sha256} no longer matches its bytes; nothing copied")
    return data


def push(folder: str | Path, store: PostgresStore) -> CopyResult:
    """Copy the folder's records to the server in journal order (source, time kept)."""
    from harness.history.evidence_store import FolderStore
    from harness.history.journal import read_journal
    from harness.history.lock import locked_history, require_history

    source = FolderStore(folder)
    with locked_history(folder) as layout:
        require_history(layout)
        journal = read_journal(layout)
        if journal.torn_lines or journal.breaks:
            raise HistoryError(f"{layout.journal}: the journal is damaged; run history verify")
        entries = list(journal.entries)
        head_from = journal.head
    seen = set()
    copied = present = 0
    for entry in entries:
        sha = entry["sha256"]
        if sha in seen:
            continue
        seen.add(sha)
        data = _checked(sha, source.read(sha), str(folder))
        result = store.register(
            data, source=entry.get("source", sha), registered_utc=entry["registered_utc"]
        )
        copied += result.created
        present += not result.created
    return CopyResult(copied, present, head_from, store.head())


def pull(store: PostgresStore, folder: str | Path, *, render=None) -> CopyResult:
    """Copy the server's records into the folder in journal order, validated and indexed
    (``render``: the registration renderer the command passes, as for ``register``)."""
    import json

    from harness.history.store import register_reports

    lines = store.journal_lines()
    shas, labels = [], []
    for line in lines:
        entry = json.loads(line)
        if entry["sha256"] not in shas:
            shas.append(entry["sha256"])
            labels.append(entry.get("source", entry["sha256"]))
    where = server_name(store.engine.url)
    data = [_checked(sha, store.read(sha), where) for sha in shas]
    results = register_reports(folder, data, names=labels, render=render) if data else []
    copied = sum(r.created for r in results)
    head_to = results[-1].journal_head if results else ""
    return CopyResult(copied, len(results) - copied, store.head(), head_to)
