"""Evidence schema revision 3: the server refuses documents no reader could use (issue 39).

The key check of ``evidence_v1`` kept the bytes and their key together, but a writer could
store any bytes under their own hash: a calibration row ``{}`` made every ``compare``
fail, a journalled record ``{}`` every ``init-db`` and ``rebuild``. The server now checks
what it can check cheaply, before the key:

- a record is a UTF-8 JSON object whose ``schema`` is the loading or compute report's
  (or absent, an earlier report of ``schema_version`` 0), with ``trials`` and
  ``summaries`` arrays and a ``status`` object;
- a calibration is a UTF-8 JSON object whose ``schema`` is the calibration report's;
- a journal line names a record the server holds, once: a second line for a record
  already journalled is refused.

The full JSON Schema is still checked by the client (``harness.report``); a document
that got in before this revision is named by ``verify`` and skipped by readers.

Revision ID: evidence_v3
Revises: evidence_v2
"""

from alembic import op

revision = "evidence_v3"
down_revision = "evidence_v2"
branch_labels = None
depends_on = None

#: Each statement idempotent (``init-db`` runs them again when one has gone missing).
RULES = [
    """
    CREATE OR REPLACE FUNCTION evidence_document(data bytea) RETURNS jsonb AS $$
    DECLARE
        doc jsonb;
    BEGIN
        BEGIN
            doc := convert_from(data, 'UTF8')::jsonb;
        EXCEPTION WHEN others THEN
            RAISE EXCEPTION 'document is not UTF-8 JSON: %', SQLERRM
                USING ERRCODE = 'check_violation';
        END;
        IF jsonb_typeof(doc) IS DISTINCT FROM 'object' THEN
            RAISE EXCEPTION 'document is not a JSON object' USING ERRCODE = 'check_violation';
        END IF;
        RETURN doc;
    END $$ LANGUAGE plpgsql IMMUTABLE
    """,
    """
    CREATE OR REPLACE FUNCTION evidence_check_document() RETURNS trigger AS $$
    DECLARE
        doc jsonb;
    BEGIN
        doc := evidence_document(NEW.data);
        IF TG_TABLE_NAME = 'evidence_calibrations' THEN
            IF doc->>'schema' IS DISTINCT FROM 'quantem-harness/calibration-report' THEN
                RAISE EXCEPTION 'calibration % is not a calibration report (schema %)',
                    NEW.sha256, coalesce(doc->>'schema', 'absent')
                    USING ERRCODE = 'check_violation';
            END IF;
            RETURN NEW;
        END IF;
        IF (doc ? 'schema' AND doc->>'schema' NOT IN
                ('quantem-harness/loading-report', 'quantem-harness/compute-report'))
            OR (NOT doc ? 'schema' AND coalesce(doc->>'schema_version', '0') <> '0')
            OR jsonb_typeof(doc->'trials') IS DISTINCT FROM 'array'
            OR jsonb_typeof(doc->'summaries') IS DISTINCT FROM 'array'
            OR jsonb_typeof(doc->'status') IS DISTINCT FROM 'object' THEN
            RAISE EXCEPTION 'record % is not a report (schema %; trials, summaries, status)',
                NEW.sha256, coalesce(doc->>'schema', 'absent') USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END $$ LANGUAGE plpgsql
    """,
    """
    CREATE OR REPLACE FUNCTION evidence_check_journal_entry() RETURNS trigger AS $$
    BEGIN
        IF position(convert_to('"sha256":"' || NEW.sha256 || '"', 'UTF8') IN NEW.line) = 0 THEN
            RAISE EXCEPTION 'journal line % does not name record %', NEW.link, NEW.sha256
                USING ERRCODE = 'check_violation';
        END IF;
        IF NOT EXISTS (SELECT 1 FROM evidence_records WHERE sha256 = NEW.sha256) THEN
            RAISE EXCEPTION 'journal line % names record %, which the server does not hold',
                NEW.link, NEW.sha256 USING ERRCODE = 'check_violation';
        END IF;
        IF EXISTS (SELECT 1 FROM evidence_journal WHERE sha256 = NEW.sha256) THEN
            RAISE EXCEPTION 'record % is journalled already: a second line is refused',
                NEW.sha256 USING ERRCODE = 'unique_violation';
        END IF;
        RETURN NEW;
    END $$ LANGUAGE plpgsql
    """,
]
# Triggers of their own (``*_valid``), beside the key checks of evidence_v1 and v2: an
# older harness's init-db re-runs its own DDL, which replaces its functions and triggers
# but never these. BEFORE triggers fire in name order: the key check (``*_check``) first.
for _table, _function in (
    ("evidence_records", "evidence_check_document"),
    ("evidence_calibrations", "evidence_check_document"),
    ("evidence_journal", "evidence_check_journal_entry"),
):
    RULES += [
        f"DROP TRIGGER IF EXISTS {_table}_valid ON {_table}",
        f"CREATE TRIGGER {_table}_valid BEFORE INSERT ON {_table} "
        f"FOR EACH ROW EXECUTE FUNCTION {_function}()",
    ]


def upgrade() -> None:
    for statement in RULES:
        op.execute(statement)


def downgrade() -> None:
    raise RuntimeError("the evidence schema is never downgraded (it would drop the evidence)")
