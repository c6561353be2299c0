"""Index schema version 4: ``records.host_load`` and ``summaries.verdict``.

The dashboard marks the runs made on a contended host (the report's
``status.host_load``) and the cells flagged against their baseline (the cell's verdict
in the report's ``comparison``). Both are derived from the records, so rows indexed
before are filled from the records themselves
(:func:`harness.history.index_db.fill_markers`): here, for a folder's index, from the
record files beside it (a rendered folder keeps its copy of a server's index one folder
down, in ``.harness-render``); a server's index is filled by ``init-db`` in the same
transaction, from its evidence (``harness.history.postgres.install_schema``: nothing
server-only in this chain). A record that cannot be read keeps NULL; ``harness history
verify`` names it and ``harness history rebuild`` mends it.

Revision ID: index_v4
Revises: index_v3
"""

from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa
from alembic import op

from harness.history.index_db import fill_markers

revision = "index_v4"
down_revision = "index_v3"
branch_labels = None
depends_on = None


def _set_version(version: int) -> None:
    op.execute(
        sa.text("UPDATE index_meta SET value = :v WHERE key = 'schema_version'").bindparams(
            v=str(version)
        )
    )


def _folder_records(connection: sa.Connection) -> Iterator[tuple[int, str, bytes | None]]:
    """(seq, path, bytes or None) of every indexed record of a folder's SQLite index."""
    database = connection.exec_driver_sql("PRAGMA database_list").fetchall()
    file = next((row[2] for row in database if row[1] == "main"), "")
    if not file:
        return  # an in-memory index has no records beside it
    folder = Path(file).parent
    rows = connection.execute(sa.text("SELECT seq, path FROM records ORDER BY seq")).all()
    for seq, path in rows:
        data = None
        for root in (folder, folder.parent):
            try:
                data = (root / path).read_bytes()
                break
            except OSError:
                continue
        yield seq, path, data


def upgrade() -> None:
    op.add_column("records", sa.Column("host_load", sa.String(), nullable=True))
    op.add_column("summaries", sa.Column("verdict", sa.String(), nullable=True))
    connection = op.get_bind()
    if connection.dialect.name == "sqlite":
        fill_markers(connection, _folder_records(connection))
    _set_version(4)


def downgrade() -> None:
    op.drop_column("summaries", "verdict")
    op.drop_column("records", "host_load")
    _set_version(3)
