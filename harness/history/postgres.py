"""Records and journal in PostgreSQL, with immutability enforced by the server (issue 15).

The evidence tables are SQLAlchemy Core tables; the index beside them is the history
index of :mod:`harness.history.index_db` (the same ORM models and Alembic migrations
as a folder's SQLite index), so ``list``, ``show``, ``compare`` and ``render`` read a
server exactly as a folder. What only a server can enforce is PostgreSQL DDL, kept in
the evidence schema's own Alembic chain (``harness/history/migrations/evidence``, version
table ``evidence_alembic_version``) and run by :func:`install_schema`:

- ``evidence_records``, ``evidence_journal`` and ``evidence_calibrations`` are insert-only: a trigger refuses every
  UPDATE and DELETE (and TRUNCATE), whoever the client;
- a BEFORE INSERT trigger recomputes a record's (or calibration's) SHA-256 with the server's
  ``sha256()`` and refuses a key that does not match the bytes, and bytes that are not a
  JSON object of the table's schema (``evidence_v3``); a journal line must name a record
  the server holds, and only once;
- identical bytes are a no-op (``ON CONFLICT DO NOTHING``);
- one registration (record, journal line, index rows) is one transaction, serialised on the journal
  by a transaction-level advisory lock, so any number of hosts register at once and a
  dropped connection leaves nothing half-done.

Journal lines are byte-identical to the folder journal's (:func:`journal_line`), so a
head kept from a folder or a server is checked the same way. The CLI reaches it through
:mod:`harness.history.remote` (``--history-url``, ``init-db``, ``push``, ``pull``).
"""

from __future__ import annotations

import logging
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
    inspect,
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
from harness.history.index_db import (
    RecordRow,
    fill_markers,
    insert_entry,
    prepare_index_schema,
)
from harness.history.journal import GENESIS_HEAD
from harness.history.layout import record_relpath
from harness.history.migrate import (
    EVIDENCE_HEAD_REVISION,
    EVIDENCE_REVISIONS,
    INDEX_HEAD_REVISION,
    evidence_revision,
    evidence_rules,
    index_revision,
    stamp_evidence,
    upgrade_evidence,
)
from harness.history.records import sha256_bytes
from harness.history.store import PreparedReport, prepare_report

# When the server goes away in the middle of a registration, psycopg logs a warning
# ("error ignored terminating <psycopg.Pipeline [BAD]>") for the cleanup of the pipeline
# it could not flush, before the error itself reaches us; we report that error (with the
# server and the step), so the warning is only a second, rawer copy of it. Without a
# handler, logging's last-resort handler would print it on a user's terminal.
logging.getLogger("psycopg").addHandler(logging.NullHandler())

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
#: journal does not list them either. Evidence revision ``evidence_v2``: a database set up
#: before it gains it when ``init-db`` runs again.
calibrations_table = Table(
    "evidence_calibrations",
    metadata,
    Column("sha256", String(64), primary_key=True),
    Column("data", LargeBinary, nullable=False),
)

#: Key of the advisory lock that serialises journal appends (any constant, once).
_JOURNAL_LOCK = 0x71E5_C0DE

#: Key of the advisory lock that serialises two ``init-db`` runs on one database (its
#: schema step and its privileges step).
SCHEMA_LOCK = 0x71E5_5C4E

#: The server's rules, by table: each trigger and the function it runs. The DDL itself
#: is in the evidence revisions (``harness/history/migrations/evidence``); this is what
#: a database is checked against (tests/test_postgres_schema.py proves the two agree).
EVIDENCE_TRIGGERS = {
    table: {
        f"{table}_insert_only": "evidence_refuse_change",
        f"{table}_no_truncate": "evidence_refuse_change",
        f"{table}_check": "evidence_check_journal"
        if table == "evidence_journal"
        else "evidence_check_record",
        f"{table}_valid": "evidence_check_journal_entry"
        if table == "evidence_journal"
        else "evidence_check_document",
    }
    for table in ("evidence_records", "evidence_journal", "evidence_calibrations")
}
EVIDENCE_FUNCTIONS = (
    "evidence_refuse_change",
    "evidence_check_record",
    "evidence_check_journal",
    "evidence_document",
    "evidence_check_document",
    "evidence_check_journal_entry",
)
#: The evidence tables of each revision of the evidence chain.
EVIDENCE_TABLES_AT = {
    "evidence_v1": ("evidence_records", "evidence_journal"),
    "evidence_v2": ("evidence_records", "evidence_journal", "evidence_calibrations"),
    "evidence_v3": ("evidence_records", "evidence_journal", "evidence_calibrations"),
}


def _table_differences(connection, tables) -> list[str]:
    """How the columns and keys of ``tables`` (present ones) differ from the models'."""
    inspector = inspect(connection)
    found = []
    for name in tables:
        model = metadata.tables[name]
        expected = {
            column.name: (column.type.compile(connection.dialect), column.nullable)
            for column in model.columns
        }
        actual = {
            column["name"]: (column["type"].compile(connection.dialect), column["nullable"])
            for column in inspector.get_columns(name)
        }
        if actual != expected:
            found.append(
                f"table {name} has columns {sorted(actual.items())}, not {sorted(expected.items())}"
            )
        key = inspector.get_pk_constraint(name)["constrained_columns"]
        if key != [column.name for column in model.primary_key]:
            found.append(f"table {name}: primary key {key or 'none'}")
    return found


def evidence_schema_problems(connection, revision: str) -> tuple[list[str], list[str]]:
    """What a database lacks of evidence revision ``revision``, in two lists: tables whose
    columns or key differ (nothing a migration may repair: they hold evidence), and what
    can be put back without touching a row (a missing table, function or trigger, a
    trigger disabled or running another function). Function bodies are not compared."""
    tables = EVIDENCE_TABLES_AT[revision]
    present = set(inspect(connection).get_table_names())
    restorable = [f"table {name} is missing" for name in tables if name not in present]
    differing = _table_differences(connection, [name for name in tables if name in present])
    functions = set(
        connection.execute(
            text(
                "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE n.nspname = current_schema() AND p.proname = ANY(:names)"
            ),
            {"names": list(EVIDENCE_FUNCTIONS)},
        ).scalars()
    )
    restorable += [
        f"function {name}() is missing" for name in EVIDENCE_FUNCTIONS if name not in functions
    ]
    triggers = {
        (table, name): (function, enabled)
        for table, name, function, enabled in connection.execute(
            text(
                "SELECT c.relname, t.tgname, p.proname, t.tgenabled FROM pg_trigger t "
                "JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_proc p ON p.oid = t.tgfoid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE NOT t.tgisinternal AND n.nspname = current_schema() "
                "AND c.relname = ANY(:tables)"
            ),
            {"tables": list(tables)},
        )
    }
    for table in tables:
        if table not in present:
            continue
        for name, function in EVIDENCE_TRIGGERS[table].items():
            found = triggers.get((table, name))
            if found is None:
                restorable.append(f"trigger {name} on {table} is missing")
            elif found[0] != function:
                restorable.append(f"trigger {name} on {table} runs {found[0]}(), not {function}()")
            elif found[1] == "D":
                restorable.append(f"trigger {name} on {table} is disabled")
    return differing, restorable


def _recognise_unstamped(connection, where: str, present: set[str]) -> str:
    """The revision of evidence tables set up by ``init-db`` before the evidence chain
    existed (no version table): ``evidence_v2`` with calibrations, ``evidence_v1``
    without; HistoryError when the tables are not one of those schemas."""
    revision = "evidence_v2" if calibrations_table.name in present else "evidence_v1"
    missing = [name for name in EVIDENCE_TABLES_AT[revision] if name not in present]
    differing, _ = evidence_schema_problems(connection, revision)
    if missing or differing:
        raise HistoryError(
            f"{where}: evidence tables without a version table that are not a schema an "
            f"earlier init-db made ({'; '.join([*(f'no table {m}' for m in missing), *differing])}); "
            "nothing changed"
        )
    return revision


def prepare_evidence_schema(connection, where: str) -> list[str]:
    """Bring the evidence schema to :data:`~harness.history.migrate.EVIDENCE_HEAD_REVISION`
    with its own Alembic chain, on ``connection`` (the caller's transaction); what was
    done, as lines (none when it was current and whole).

    An empty database gets every revision. Evidence tables that an earlier ``init-db``
    made before the chain existed (no version table) are checked column by column and
    stamped with the revision they are, never re-created. A revision this harness does
    not know (a newer harness's) is refused, nothing changed. At the head, a missing rule
    or table is put back, each one named in the lines (a superuser's doing: the caller
    says to run verify); a table whose columns differ is refused.
    """
    connection.execute(select(func.pg_advisory_xact_lock(SCHEMA_LOCK)))
    done = []
    revision = evidence_revision(connection)
    if revision is not None and revision not in EVIDENCE_REVISIONS:
        raise HistoryError(
            f"{where}: its evidence schema is at revision {revision}, which this harness "
            f"does not know (it knows {', '.join(EVIDENCE_REVISIONS)}; set up by a newer "
            "harness?); nothing changed: upgrade quantem-harness"
        )
    if revision is None:
        present = set(inspect(connection).get_table_names()) & set(metadata.tables)
        if present:
            revision = _recognise_unstamped(connection, where, present)
            stamp_evidence(connection, revision)
            done.append(
                f"evidence tables set up before the evidence migrations: recognised as "
                f"{revision} and stamped (nothing re-created)"
            )
    if revision != EVIDENCE_HEAD_REVISION:
        upgrade_evidence(connection)
        done.append(
            f"evidence schema migrated from {revision or 'an empty database'} to "
            f"{EVIDENCE_HEAD_REVISION}"
        )
    differing, restorable = evidence_schema_problems(connection, EVIDENCE_HEAD_REVISION)
    if differing:
        raise HistoryError(
            f"{where}: the evidence schema at {EVIDENCE_HEAD_REVISION} differs from this "
            f"harness's ({'; '.join(differing)}); nothing changed"
        )
    if restorable:
        present = set(inspect(connection).get_table_names())
        for name in EVIDENCE_TABLES_AT[EVIDENCE_HEAD_REVISION]:
            if name not in present:
                metadata.tables[name].create(connection)  # the head's table, as the models
        for statement in evidence_rules(EVIDENCE_HEAD_REVISION):
            connection.execute(text(statement))
        differing, left = evidence_schema_problems(connection, EVIDENCE_HEAD_REVISION)
        left += differing
        if left:
            raise HistoryError(f"{where}: could not restore {'; '.join(left)}; nothing changed")
        done += [
            f"restored: {problem} ("
            + ("created empty: whatever it held is lost; " if problem.startswith("table ") else "")
            + "a superuser's change? run `harness history verify --history-url URL`)"
            for problem in restorable
        ]
    return done


def install_schema(engine: Engine) -> list[str]:
    """Create or migrate the evidence schema (its Alembic chain) and the index tables
    (theirs), in one transaction; idempotent; needs a schema owner. What was done to the
    evidence schema, as lines."""
    where = engine.url.render_as_string(hide_password=True)
    with engine.begin() as connection:
        done = prepare_evidence_schema(connection, where)
        indexed_before = inspect(connection).has_table(RecordRow.__tablename__)
        revision = index_revision(connection)
        prepare_index_schema(connection, where)
        if indexed_before and revision != INDEX_HEAD_REVISION:
            # rows indexed before index schema 4 get its dashboard markers from their
            # records here (the index chain holds nothing server-only)
            filled = fill_markers(connection, _indexed_record_bytes(connection))
            done.append(
                f"index migrated from {revision or 'before Alembic'}: {filled} records' host loads and cell verdicts filled from their bytes"
            )
    return done


def _indexed_record_bytes(connection):
    """(seq, path, bytes or None) of every indexed record, streamed."""
    rows = connection.execute(
        select(RecordRow.seq, RecordRow.path, records_table.c.data)
        .join(records_table, records_table.c.sha256 == RecordRow.sha256, isouter=True)
        .order_by(RecordRow.seq)
        .execution_options(yield_per=500)
    )
    for seq, path, data in rows:
        yield seq, path, None if data is None else bytes(data)


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


def server_name(url) -> str:
    """A server's URL as shown to users: password hidden."""
    return url.render_as_string(hide_password=True)


@contextmanager
def server_step(engine: Engine, step: str) -> Iterator[None]:
    """Turn a database failure during ``step`` into a HistoryError naming the server
    (password hidden) and the step; the transaction it interrupted is rolled back."""
    try:
        yield
    except DBAPIError as exc:
        where = server_name(engine.url)
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
