"""A history on a database server: connect to it by URL, and set it up.

What only a server needs: :func:`open_url_store` turns a
``postgresql+psycopg://USER@HOST/DB`` URL into a
:class:`~harness.history.postgres.PostgresStore` (refusing one that is not set up, or at
another schema), and :func:`init_database` sets one up (``harness history init-db``).
Every server failure becomes a :class:`~harness.errors.HistoryError` naming the server
(password hidden) and the step.

Everything else a command does with a server goes through the
:class:`~harness.history.backend.HistoryBackend` contract, which
:class:`~harness.history.server_history.ServerHistory` implements: copying to and from
another history is :mod:`harness.history.copying`, the server's index checks are
:mod:`harness.history.server_index`.
"""

from __future__ import annotations

from harness.errors import HistoryError, UsageError
from harness.history.index_db import RecordRow, SummaryRow, TrialRow
from harness.history.migrate import (
    EVIDENCE_HEAD_REVISION,
    EVIDENCE_REVISIONS,
    EVIDENCE_VERSION_TABLE,
    INDEX_HEAD_REVISION,
    VERSION_TABLE,
    evidence_revision,
    index_revision,
)
from harness.history.postgres import (
    SCHEMA_LOCK,
    PostgresStore,
    calibrations_table,
    install_schema,
    journal_table,
    records_table,
    server_name,
    server_step,
)
from harness.history.server_index import index_unindexed

#: The role :func:`init_database` creates: SELECT and INSERT on the evidence, nothing more.
WRITER_ROLE = "harness_writer"

_SCHEMES = ("postgresql+psycopg", "postgresql")


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
        revision = index_revision(connection)
        evidence = evidence_revision(connection)
    missing = {records_table.name, journal_table.name} - tables
    if missing:
        engine.dispose()
        raise HistoryError(
            f"{server_name(engine.url)}: not an evidence store (no table "
            f"{', '.join(sorted(missing))}); run `harness history init-db URL` as its owner"
        )
    if evidence != EVIDENCE_HEAD_REVISION:
        engine.dispose()
        raise HistoryError(_evidence_revision_refusal(server_name(engine.url), evidence))
    if revision != INDEX_HEAD_REVISION:
        engine.dispose()
        raise HistoryError(
            f"{server_name(engine.url)}: its index is at schema revision {revision or 'none'}, "
            f"this harness needs {INDEX_HEAD_REVISION}; run `harness history init-db URL` "
            "as its owner (it migrates the index and indexes every record)"
        )
    return PostgresStore(engine)


def _evidence_revision_refusal(where: str, revision: str | None) -> str:
    """Why a client refuses a server whose evidence schema is not at this harness's head."""
    if revision is not None and revision not in EVIDENCE_REVISIONS:
        return (
            f"{where}: its evidence schema is at revision {revision}, which this harness does "
            f"not know (it needs {EVIDENCE_HEAD_REVISION}; set up by a newer harness?); "
            "upgrade quantem-harness (`harness history init-db URL` does not change a newer "
            "schema)"
        )
    state = revision or "none (set up before the evidence migrations)"
    return (
        f"{where}: its evidence schema is at revision {state}, this harness needs "
        f"{EVIDENCE_HEAD_REVISION}; run `harness history init-db URL` as its owner (it "
        "migrates the schema, or recognises and stamps it; no record is changed)"
    )


def init_database(url_text: str, *, grant_to: list[str] = ()) -> list[str]:
    """Create or migrate the evidence schema and the index (each by its Alembic chain),
    create the writer role and set its privileges (idempotent); what was done, as lines.

    The role is created here, not by a migration: roles belong to the server (the
    cluster), shared by every database on it and outliving any one of them, so they are
    no part of one database's schema. Its privileges on the tables are set on every run
    (REVOKE ALL, then GRANT SELECT, INSERT), so one given by hand is taken back.
    """
    from sqlalchemy import text

    engine = _engine_for(url_text)
    done = []
    try:
        with server_step(engine, "creating or migrating the tables and triggers"):
            done += install_schema(engine)
        done.append(
            f"evidence schema at {EVIDENCE_HEAD_REVISION} (evidence_records, evidence_journal, "
            "evidence_calibrations: insert-only, keys checked by the server); "
            f"index tables at {INDEX_HEAD_REVISION}"
        )
        with server_step(engine, "indexing the records the index lacks"):
            indexed, skipped = index_unindexed(engine)
        if indexed:
            done.append(f"indexed {indexed} records the index lacked")
        done += [
            f"warning: {line} (`harness history verify --history-url URL` names it)"
            for line in skipped
        ]
        with server_step(engine, f"creating role {WRITER_ROLE}"), engine.begin() as connection:
            # two init-db runs at once: concurrent GRANTs on one table can fail in PostgreSQL
            connection.execute(text(f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK})"))
            exists = connection.execute(
                text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": WRITER_ROLE}
            ).first()
            if exists is None:
                connection.execute(text(f"CREATE ROLE {WRITER_ROLE} NOLOGIN"))
            for table in (records_table.name, journal_table.name, calibrations_table.name):
                connection.execute(text(f"REVOKE ALL ON {table} FROM {WRITER_ROLE}"))
                connection.execute(text(f"GRANT SELECT, INSERT ON {table} TO {WRITER_ROLE}"))
            connection.execute(
                text(f"GRANT USAGE ON SEQUENCE {journal_table.name}_seq_seq TO {WRITER_ROLE}")
            )
            # the index is derived: the writer adds rows, never changes them; reads the rest
            for table in (RecordRow, TrialRow, SummaryRow):
                name = table.__tablename__
                connection.execute(text(f"REVOKE ALL ON {name} FROM {WRITER_ROLE}"))
                connection.execute(text(f"GRANT SELECT, INSERT ON {name} TO {WRITER_ROLE}"))
                key = "seq" if table is RecordRow else "id"
                connection.execute(
                    text(f"GRANT USAGE ON SEQUENCE {name}_{key}_seq TO {WRITER_ROLE}")
                )
            for name in ("index_meta", VERSION_TABLE, EVIDENCE_VERSION_TABLE):
                connection.execute(text(f"REVOKE ALL ON {name} FROM {WRITER_ROLE}"))
                connection.execute(text(f"GRANT SELECT ON {name} TO {WRITER_ROLE}"))
            for user in grant_to:
                quoted = connection.dialect.identifier_preparer.quote(user)
                connection.execute(text(f"GRANT {WRITER_ROLE} TO {quoted}"))
        done.append(f"role {WRITER_ROLE}: SELECT and INSERT only (index: the same)")
        done += [f"granted {WRITER_ROLE} to {user}" for user in grant_to]
    finally:
        engine.dispose()
    return done
