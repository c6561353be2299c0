"""Records and journal in PostgreSQL, with immutability enforced by the server (issue 15).

The evidence tables are SQLAlchemy Core tables; the index beside them is the history
index of :mod:`harness.history.index_db` (the same ORM models and Alembic migrations
as a folder's SQLite index), so ``list``, ``show``, ``compare`` and ``render`` read a
server exactly as a folder. What only a server can enforce is PostgreSQL DDL run by
:func:`install_schema`:

- ``evidence_records``, ``evidence_journal`` and ``evidence_calibrations`` are insert-only: a trigger refuses every
  UPDATE and DELETE (and TRUNCATE), whoever the client;
- a BEFORE INSERT trigger recomputes a record's (or calibration's) SHA-256 with the server's
  ``sha256()`` and refuses a key that does not match the bytes;
- identical bytes are a no-op (``ON CONFLICT DO NOTHING``);
- one registration (record, journal line, index rows) is one transaction, serialised on the journal
  by a transaction-level advisory lock, so any number of hosts register at once and a
  dropped connection leaves nothing half-done.

Journal lines are byte-identical to the folder journal's (:func:`journal_line`), so a
head kept from a folder or a server is checked the same way. The CLI reaches it through
:mod:`harness.history.remote` (``--history-url``, ``init-db``, ``push``, ``pull``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import (
    BigInteger,
    Column,
    Engine,
    Identity,
    LargeBinary,
    MetaData,
    String,
    Table,
    func,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import DBAPIError

from harness.errors import HistoryError
from harness.history.entries import derive_entry
from harness.history.evidence_store import (
    StoreCheck,
    StoredRecord,
    check_chain,
    journal_line,
)
from harness.history.index_db import RecordRow, insert_entry, prepare_index_schema
from harness.history.journal import GENESIS_HEAD
from harness.history.layout import record_relpath
from harness.history.records import sha256_bytes
from harness.history.store import PreparedReport, prepare_report

metadata = MetaData()

records_table = Table(
    "evidence_records",
    metadata,
    Column("sha256", String(64), primary_key=True),
    Column("data", LargeBinary, nullable=False),
)

journal_table = Table(
    "evidence_journal",
    metadata,
    Column("seq", BigInteger, Identity(always=True), primary_key=True),
    Column("line", LargeBinary, nullable=False),
    Column("link", String(64), nullable=False, unique=True),
    #: the record the line registers (also inside the line), for lookups
    Column("sha256", String(64), nullable=False, index=True),
)

#: Calibration reports (``harness calibrate --history-url``): exact bytes keyed by SHA-256,
#: insert-only and key-checked as the records are. A calibration is a record of its own
#: (a folder keeps them apart too, under ``calibrations/``), not journalled: a folder's
#: journal does not list them either. Created by ``init-db`` beside the other evidence
#: tables; a database set up before it gains it when ``init-db`` runs again.
calibrations_table = Table(
    "evidence_calibrations",
    metadata,
    Column("sha256", String(64), primary_key=True),
    Column("data", LargeBinary, nullable=False),
)

#: Key of the advisory lock that serialises journal appends (any constant, once).
_JOURNAL_LOCK = 0x71E5_C0DE

_DDL = [
    """
    CREATE OR REPLACE FUNCTION evidence_refuse_change() RETURNS trigger AS $$
    BEGIN
        RAISE EXCEPTION 'evidence is insert-only: % on % refused', TG_OP, TG_TABLE_NAME
            USING ERRCODE = 'insufficient_privilege';
    END $$ LANGUAGE plpgsql
    """,
    """
    CREATE OR REPLACE FUNCTION evidence_check_record() RETURNS trigger AS $$
    BEGIN
        IF encode(sha256(NEW.data), 'hex') <> NEW.sha256 THEN
            RAISE EXCEPTION 'record key % does not match the SHA-256 of its bytes (%)',
                NEW.sha256, encode(sha256(NEW.data), 'hex') USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END $$ LANGUAGE plpgsql
    """,
    """
    CREATE OR REPLACE FUNCTION evidence_check_journal() RETURNS trigger AS $$
    BEGIN
        IF encode(sha256(NEW.line), 'hex') <> NEW.link THEN
            RAISE EXCEPTION 'journal link % does not match the SHA-256 of its line', NEW.link
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END $$ LANGUAGE plpgsql
    """,
]
for _table in ("evidence_records", "evidence_journal", "evidence_calibrations"):
    _DDL += [
        f"DROP TRIGGER IF EXISTS {_table}_insert_only ON {_table}",
        f"CREATE TRIGGER {_table}_insert_only BEFORE UPDATE OR DELETE ON {_table} "
        "FOR EACH ROW EXECUTE FUNCTION evidence_refuse_change()",
        f"DROP TRIGGER IF EXISTS {_table}_no_truncate ON {_table}",
        f"CREATE TRIGGER {_table}_no_truncate BEFORE TRUNCATE ON {_table} "
        "FOR EACH STATEMENT EXECUTE FUNCTION evidence_refuse_change()",
    ]
_DDL += [
    "DROP TRIGGER IF EXISTS evidence_records_check ON evidence_records",
    "CREATE TRIGGER evidence_records_check BEFORE INSERT ON evidence_records "
    "FOR EACH ROW EXECUTE FUNCTION evidence_check_record()",
    "DROP TRIGGER IF EXISTS evidence_calibrations_check ON evidence_calibrations",
    "CREATE TRIGGER evidence_calibrations_check BEFORE INSERT ON evidence_calibrations "
    "FOR EACH ROW EXECUTE FUNCTION evidence_check_record()",
    "DROP TRIGGER IF EXISTS evidence_journal_check ON evidence_journal",
    "CREATE TRIGGER evidence_journal_check BEFORE INSERT ON evidence_journal "
    "FOR EACH ROW EXECUTE FUNCTION evidence_check_journal()",
]


def install_schema(engine: Engine) -> None:
    """Create the evidence tables and their server-side rules, and create or migrate the
    index tables (Alembic); idempotent; needs a schema owner."""
    with engine.begin() as connection:
        metadata.create_all(connection)
        for statement in _DDL:
            connection.execute(text(statement))
        prepare_index_schema(connection, engine.url.render_as_string(hide_password=True))


def index_entry_of(prepared: PreparedReport):
    """The index rows of a validated report, with the path it has in a history folder
    (so that ``list``, ``index.json`` and the dashboard say the same on both backends)."""
    return derive_entry(
        prepared.doc,
        sha256=prepared.sha256,
        path=record_relpath(prepared.sha256),
        size_bytes=len(prepared.data),
        schema_version=prepared.schema_version,
    )


@contextmanager
def server_step(engine: Engine, step: str) -> Iterator[None]:
    """Turn a database failure during ``step`` into a HistoryError naming the server
    (password hidden) and the step; the transaction it interrupted is rolled back."""
    try:
        yield
    except DBAPIError as exc:
        where = engine.url.render_as_string(hide_password=True)
        detail = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else str(exc)
        raise HistoryError(f"{where}: {detail} (while {step})") from exc


class PostgresStore:
    """An :class:`~harness.history.evidence_store.EvidenceStore` in a PostgreSQL database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def register(
        self,
        data: bytes,
        *,
        source: str,
        registered_utc: str,
        prepared: PreparedReport | None = None,
    ) -> StoredRecord:
        """Store, journal and index one report in one transaction.

        The report is validated first (``prepared``: already validated by the caller);
        an invalid one raises ReportValidationError and nothing is stored.
        """
        if prepared is None or prepared.data != data:
            prepared = prepare_report(data, name=source)
        entry = index_entry_of(prepared)
        sha256 = prepared.sha256
        with (
            server_step(self.engine, f"registering record {sha256}"),
            self.engine.begin() as connection,
        ):
            connection.execute(select(func.pg_advisory_xact_lock(_JOURNAL_LOCK)))
            inserted = connection.execute(
                pg_insert(records_table)
                .values(sha256=sha256, data=data)
                .on_conflict_do_nothing(index_elements=["sha256"])
                .returning(records_table.c.sha256)
            ).first()
            journalled = connection.execute(
                select(func.count())
                .select_from(journal_table)
                .where(journal_table.c.sha256 == sha256)
            ).scalar_one()
            if inserted is not None or not journalled:
                prev = (
                    connection.execute(
                        select(journal_table.c.link).order_by(journal_table.c.seq.desc()).limit(1)
                    ).scalar()
                    or GENESIS_HEAD
                )
                line = journal_line(
                    {"registered_utc": registered_utc, "sha256": sha256, "source": source},
                    prev,
                )
                connection.execute(
                    journal_table.insert().values(line=line, link=sha256_bytes(line), sha256=sha256)
                )
            indexed = connection.execute(
                select(RecordRow.seq).where(RecordRow.sha256 == sha256)
            ).first()
            if indexed is None:
                insert_entry(connection, entry)
        return StoredRecord(sha256, inserted is not None)

    def read(self, sha256: str) -> bytes:
        with (
            server_step(self.engine, f"reading record {sha256}"),
            self.engine.connect() as connection,
        ):
            data = connection.execute(
                select(records_table.c.data).where(records_table.c.sha256 == sha256)
            ).scalar()
        if data is None:
            raise HistoryError(f"no record {sha256} in {self.engine.url.database}")
        return bytes(data)

    def head(self) -> str:
        with (
            server_step(self.engine, "reading the journal head"),
            self.engine.connect() as connection,
        ):
            link = connection.execute(
                select(journal_table.c.link).order_by(journal_table.c.seq.desc()).limit(1)
            ).scalar()
        return link or GENESIS_HEAD

    def journal_lines(self) -> list[bytes]:
        with server_step(self.engine, "reading the journal"), self.engine.connect() as connection:
            rows = connection.execute(
                select(journal_table.c.line).order_by(journal_table.c.seq)
            ).scalars()
            return [bytes(line) for line in rows]

    def check(self, *, expect_head: str | None = None) -> StoreCheck:
        """Re-hash every record and journal line from what the server returns now."""
        lines = self.journal_lines()
        problems, head, shas = check_chain(lines, expect_head)
        stored = set()
        with (
            server_step(self.engine, "re-hashing the records"),
            self.engine.connect() as connection,
        ):
            rows = connection.execution_options(yield_per=500).execute(
                select(records_table.c.sha256, records_table.c.data)
            )  # streamed (a server-side cursor): memory stays flat at any size
            for sha256, data in rows:
                stored.add(sha256)
                if sha256_bytes(bytes(data)) != sha256:
                    problems.append(f"record {sha256}: its bytes no longer match its key")
                if sha256 not in shas:
                    problems.append(f"record {sha256}: not in the journal (unregistered)")
        for sha in sorted(shas - stored):
            problems.append(f"record {sha}: journalled, but gone")
        return StoreCheck(problems, head, len(stored))
