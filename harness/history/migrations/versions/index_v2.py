"""Index schema version 2: the schema as it was before Alembic (the baseline).

A version-2 index written before Alembic is stamped with this revision, not re-created.
On SQLite this creates exactly the tables ``create_all`` made then; on PostgreSQL the
byte counts are BIGINT (a 4D-STEM file exceeds 2**31 bytes; SQLite integers are 64-bit).

Revision ID: index_v2
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "index_v2"
down_revision = None
branch_labels = None
depends_on = None

BYTE_COUNT = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "index_meta",
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_table(
        "records",
        sa.Column("seq", sa.Integer(), nullable=False, autoincrement=True),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("path", sa.String(), nullable=False),
        sa.Column("size_bytes", BYTE_COUNT, nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column("created_utc", sa.String(), nullable=False),
        sa.Column("git_revision", sa.String(), nullable=True),
        sa.Column("git_dirty", sa.Boolean(), nullable=False),
        sa.Column("device_kind", sa.String(), nullable=False),
        sa.Column("device_name", sa.String(), nullable=False),
        sa.Column("device_uuid", sa.String(), nullable=True),
        sa.Column("storage_id", sa.String(), nullable=False),
        sa.Column("backend", sa.String(), nullable=False),
        sa.Column("representation", sa.String(), nullable=False),
        sa.Column("timing_boundary", sa.String(), nullable=False),
        sa.Column("allocator_policy", sa.String(), nullable=False),
        sa.Column("protocol_version", sa.Integer(), nullable=False),
        sa.Column("execution", sa.String(), nullable=False),
        sa.Column("correctness", sa.String(), nullable=False),
        sa.Column("source_stability", sa.String(), nullable=False),
        sa.Column("performance", sa.String(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=False),
        sa.Column("baseline_sha256", sa.String(64), nullable=True),
        sa.Column("baseline_path", sa.String(), nullable=True),
        sa.Column("comparison_key", sa.String(), nullable=False),
        sa.Column("comparison_fields", sa.Text(), nullable=False),
        sa.Column("index_entry", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("seq"),
        sa.UniqueConstraint("sha256"),
    )
    op.create_index("ix_records_comparison_key", "records", ["comparison_key"])
    for name, columns in (
        (
            "trials",
            [
                sa.Column("trial_index", sa.Integer(), nullable=False),
                sa.Column("label", sa.String(), nullable=False),
                sa.Column("kept", sa.Boolean(), nullable=False),
                sa.Column("seconds", sa.Float(), nullable=False),
                sa.Column("read_bytes", BYTE_COUNT, nullable=False),
                sa.Column("file_bytes", BYTE_COUNT, nullable=False),
                sa.Column("residency_before", sa.Float(), nullable=False),
            ],
        ),
        (
            "summaries",
            [
                sa.Column("n", sa.Integer(), nullable=False),
                sa.Column("n_kept", sa.Integer(), nullable=False),
                sa.Column("first", sa.Float(), nullable=True),
                sa.Column("median", sa.Float(), nullable=True),
                sa.Column("p95", sa.Float(), nullable=True),
                sa.Column("min", sa.Float(), nullable=True),
                sa.Column("max", sa.Float(), nullable=True),
            ],
        ),
    ):
        op.create_table(
            name,
            sa.Column("id", sa.Integer(), nullable=False, autoincrement=True),
            sa.Column("record_seq", sa.Integer(), nullable=False),
            sa.Column("acquisition", sa.String(), nullable=False),
            sa.Column("format", sa.String(), nullable=False),
            sa.Column("cache_state", sa.String(), nullable=False),
            *columns,
            sa.ForeignKeyConstraint(["record_seq"], ["records.seq"]),
            sa.PrimaryKeyConstraint("id"),
        )
        op.create_index(f"ix_{name}_record_seq", name, ["record_seq"])
    op.execute(sa.text("INSERT INTO index_meta (key, value) VALUES ('schema_version', '2')"))


def downgrade() -> None:
    for name in ("summaries", "trials", "records", "index_meta"):
        op.drop_table(name)
