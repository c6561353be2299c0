"""Evidence schema revision 1: records and journal, as the first ``init-db`` made them.

``evidence_records`` (exact report bytes keyed by SHA-256) and ``evidence_journal`` (the
chained journal lines), insert-only (a trigger refuses UPDATE, DELETE and TRUNCATE,
whoever the client) and key-checked (a BEFORE INSERT trigger recomputes the SHA-256 with
the server's ``sha256()`` and refuses a key that does not match the bytes). A database
that ``init-db`` set up before this chain existed, without calibrations, holds exactly
this and is stamped with it.

The privileges of the writer role are not here: they name a cluster-level role that a
schema migration cannot assume exists, and ``init-db`` sets them on every run.

Revision ID: evidence_v1
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "evidence_v1"
down_revision = None
branch_labels = None
depends_on = None

#: The server's rules of this revision, each statement idempotent (``init-db`` runs
#: them again when one has gone missing or was disabled).
RULES = [
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
for _table in ("evidence_records", "evidence_journal"):
    RULES += [
        f"DROP TRIGGER IF EXISTS {_table}_insert_only ON {_table}",
        f"CREATE TRIGGER {_table}_insert_only BEFORE UPDATE OR DELETE ON {_table} "
        "FOR EACH ROW EXECUTE FUNCTION evidence_refuse_change()",
        f"DROP TRIGGER IF EXISTS {_table}_no_truncate ON {_table}",
        f"CREATE TRIGGER {_table}_no_truncate BEFORE TRUNCATE ON {_table} "
        "FOR EACH STATEMENT EXECUTE FUNCTION evidence_refuse_change()",
    ]
RULES += [
    "DROP TRIGGER IF EXISTS evidence_records_check ON evidence_records",
    "CREATE TRIGGER evidence_records_check BEFORE INSERT ON evidence_records "
    "FOR EACH ROW EXECUTE FUNCTION evidence_check_record()",
    "DROP TRIGGER IF EXISTS evidence_journal_check ON evidence_journal",
    "CREATE TRIGGER evidence_journal_check BEFORE INSERT ON evidence_journal "
    "FOR EACH ROW EXECUTE FUNCTION evidence_check_journal()",
]


def upgrade() -> None:
    op.create_table(
        "evidence_records",
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("sha256"),
    )
    op.create_table(
        "evidence_journal",
        sa.Column("seq", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("line", sa.LargeBinary(), nullable=False),
        sa.Column("link", sa.String(64), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("seq"),
        sa.UniqueConstraint("link"),
    )
    op.create_index("ix_evidence_journal_sha256", "evidence_journal", ["sha256"])
    for statement in RULES:
        op.execute(statement)


def downgrade() -> None:
    # dropping these tables would destroy the evidence itself: no migration does that
    raise RuntimeError("the evidence schema is never downgraded (it would drop the evidence)")
