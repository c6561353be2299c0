"""Evidence schema revision 2: ``evidence_calibrations``, calibration reports on the server.

Exact bytes keyed by SHA-256, insert-only and key-checked as the records are (the
functions of ``evidence_v1``). A calibration is a record of its own and not journalled,
as a folder keeps them under ``calibrations/``, apart from its journal. A database that
``init-db`` set up before this chain existed, with calibrations, holds exactly this
revision and is stamped with it; one without them is stamped ``evidence_v1`` and gains
the table here.

Revision ID: evidence_v2
Revises: evidence_v1
"""

import sqlalchemy as sa
from alembic import op

revision = "evidence_v2"
down_revision = "evidence_v1"
branch_labels = None
depends_on = None

_TABLE = "evidence_calibrations"
#: The server's rules of this revision, each statement idempotent (``init-db`` runs
#: them again when one has gone missing or was disabled).
RULES = [
    f"DROP TRIGGER IF EXISTS {_TABLE}_insert_only ON {_TABLE}",
    f"CREATE TRIGGER {_TABLE}_insert_only BEFORE UPDATE OR DELETE ON {_TABLE} "
    "FOR EACH ROW EXECUTE FUNCTION evidence_refuse_change()",
    f"DROP TRIGGER IF EXISTS {_TABLE}_no_truncate ON {_TABLE}",
    f"CREATE TRIGGER {_TABLE}_no_truncate BEFORE TRUNCATE ON {_TABLE} "
    "FOR EACH STATEMENT EXECUTE FUNCTION evidence_refuse_change()",
    f"DROP TRIGGER IF EXISTS {_TABLE}_check ON {_TABLE}",
    f"CREATE TRIGGER {_TABLE}_check BEFORE INSERT ON {_TABLE} "
    "FOR EACH ROW EXECUTE FUNCTION evidence_check_record()",
]


def upgrade() -> None:
    op.create_table(
        _TABLE,
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("sha256"),
    )
    for statement in RULES:
        op.execute(statement)


def downgrade() -> None:
    # dropping the table would destroy the calibrations stored there
    raise RuntimeError("the evidence schema is never downgraded (it would drop the evidence)")
