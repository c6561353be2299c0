"""Index schema version 3: one index on (comparison_key, seq) instead of comparison_key.

A group's records newest first (``history list --group``, the newest record of a key
for rendering and for ``compare``) are then read in index order, without sorting the
group; the old single-column index is a prefix of the new one and is dropped.

Revision ID: index_v3
Revises: index_v2
"""

import sqlalchemy as sa
from alembic import op

revision = "index_v3"
down_revision = "index_v2"
branch_labels = None
depends_on = None


def _set_version(version: int) -> None:
    op.execute(
        sa.text("UPDATE index_meta SET value = :v WHERE key = 'schema_version'").bindparams(
            v=str(version)
        )
    )


def upgrade() -> None:
    op.create_index("ix_records_key_seq", "records", ["comparison_key", "seq"])
    op.drop_index("ix_records_comparison_key", table_name="records")
    _set_version(3)


def downgrade() -> None:
    op.create_index("ix_records_comparison_key", "records", ["comparison_key"])
    op.drop_index("ix_records_key_seq", table_name="records")
    _set_version(2)
