"""What ``harness history init-db`` did before the evidence schema had its own Alembic
chain, reproduced for the tests (the DDL of ``harness/history/postgres.py`` and the role
and privileges of ``harness/history/remote.py`` at commit dbcda76, with calibrations, and
at a96efce, before them). Kept apart from the harness and never changed: a database made
here is what an existing server holds, which the new ``init-db`` must recognise and stamp.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Identity,
    LargeBinary,
    MetaData,
    String,
    Table,
    create_engine,
    text,
)

from harness.history.index_db import prepare_index_schema


def _metadata(calibrations: bool) -> MetaData:
    metadata = MetaData()
    Table(
        "evidence_records",
        metadata,
        Column("sha256", String(64), primary_key=True),
        Column("data", LargeBinary, nullable=False),
    )
    Table(
        "evidence_journal",
        metadata,
        Column("seq", BigInteger, Identity(always=True), primary_key=True),
        Column("line", LargeBinary, nullable=False),
        Column("link", String(64), nullable=False, unique=True),
        Column("sha256", String(64), nullable=False, index=True),
    )
    if calibrations:
        Table(
            "evidence_calibrations",
            metadata,
            Column("sha256", String(64), primary_key=True),
            Column("data", LargeBinary, nullable=False),
        )
    return metadata


def _ddl(calibrations: bool) -> list[str]:
    tables = ["evidence_records", "evidence_journal"] + (
        ["evidence_calibrations"] if calibrations else []
    )
    ddl = [
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
    for table in tables:
        ddl += [
            f"DROP TRIGGER IF EXISTS {table}_insert_only ON {table}",
            f"CREATE TRIGGER {table}_insert_only BEFORE UPDATE OR DELETE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION evidence_refuse_change()",
            f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}",
            f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION evidence_refuse_change()",
        ]
    ddl += [
        "DROP TRIGGER IF EXISTS evidence_records_check ON evidence_records",
        "CREATE TRIGGER evidence_records_check BEFORE INSERT ON evidence_records "
        "FOR EACH ROW EXECUTE FUNCTION evidence_check_record()",
    ]
    if calibrations:
        ddl += [
            "DROP TRIGGER IF EXISTS evidence_calibrations_check ON evidence_calibrations",
            "CREATE TRIGGER evidence_calibrations_check BEFORE INSERT ON evidence_calibrations "
            "FOR EACH ROW EXECUTE FUNCTION evidence_check_record()",
        ]
    ddl += [
        "DROP TRIGGER IF EXISTS evidence_journal_check ON evidence_journal",
        "CREATE TRIGGER evidence_journal_check BEFORE INSERT ON evidence_journal "
        "FOR EACH ROW EXECUTE FUNCTION evidence_check_journal()",
    ]
    return ddl


def legacy_init_db(url: str, *, calibrations: bool = True) -> None:
    """The old ``init-db URL``: tables (``create_all``), the DDL, the index, the role and
    its privileges; no evidence version table."""
    writer = "harness_writer"
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            _metadata(calibrations).create_all(connection)
            for statement in _ddl(calibrations):
                connection.execute(text(statement))
            prepare_index_schema(connection, url)
        with engine.begin() as connection:
            exists = connection.execute(
                text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": writer}
            ).first()
            if exists is None:
                connection.execute(text(f"CREATE ROLE {writer} NOLOGIN"))
            tables = ["evidence_records", "evidence_journal"] + (
                ["evidence_calibrations"] if calibrations else []
            )
            for table in tables:
                connection.execute(text(f"REVOKE ALL ON {table} FROM {writer}"))
                connection.execute(text(f"GRANT SELECT, INSERT ON {table} TO {writer}"))
            connection.execute(
                text(f"GRANT USAGE ON SEQUENCE evidence_journal_seq_seq TO {writer}")
            )
            for name, key in (("records", "seq"), ("trials", "id"), ("summaries", "id")):
                connection.execute(text(f"REVOKE ALL ON {name} FROM {writer}"))
                connection.execute(text(f"GRANT SELECT, INSERT ON {name} TO {writer}"))
                connection.execute(text(f"GRANT USAGE ON SEQUENCE {name}_{key}_seq TO {writer}"))
            for name in ("index_meta", "alembic_version"):
                connection.execute(text(f"REVOKE ALL ON {name} FROM {writer}"))
                connection.execute(text(f"GRANT SELECT ON {name} TO {writer}"))
    finally:
        engine.dispose()
