"""Index schema version 4: ``records.host_load`` and ``summaries.verdict``.

The dashboard marks the runs made on a contended host (the report's
``status.host_load``) and the cells flagged against their baseline (the cell's verdict
in the report's ``comparison``). Both are derived from the records, so the upgrade
fills them from the records themselves: on a server from its evidence table, in a
folder from the record files beside the index (a rendered folder keeps its copy of a
server's index one folder down, in ``.harness-render``). A record that cannot be read
or parsed keeps NULL; ``harness history verify`` names it (its row differs from its
record) and ``harness history rebuild`` mends it.

Revision ID: index_v4
Revises: index_v3
"""

import json
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa
from alembic import op

from harness.history.entries import cell_verdicts_of, host_load_of
from harness.report import migrate_report, schema_version_of

revision = "index_v4"
down_revision = "index_v3"
branch_labels = None
depends_on = None

#: The table of a server's record bytes (harness/history/postgres.py ``records_table``).
EVIDENCE_RECORDS = "evidence_records"


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
    for seq, path in connection.execute(sa.text("SELECT seq, path FROM records ORDER BY seq")):
        data = None
        for root in (folder, folder.parent):
            try:
                data = (root / path).read_bytes()
                break
            except OSError:
                continue
        yield seq, path, data


def _server_records(connection: sa.Connection) -> Iterator[tuple[int, str, bytes | None]]:
    """(seq, path, bytes or None) of every indexed record of a server's index."""
    if not sa.inspect(connection).has_table(EVIDENCE_RECORDS):
        return
    rows = connection.execute(
        sa.text(
            f"SELECT r.seq, r.path, e.data FROM records r "
            f"LEFT JOIN {EVIDENCE_RECORDS} e ON e.sha256 = r.sha256 ORDER BY r.seq"
        ).execution_options(yield_per=500)
    )
    for seq, path, data in rows:
        yield seq, path, None if data is None else bytes(data)


def _fill(connection: sa.Connection) -> None:
    records = (
        _server_records(connection)
        if connection.dialect.name == "postgresql"
        else _folder_records(connection)
    )
    host_loads = []
    verdicts = []
    for seq, path, data in records:  # streamed: only the few values kept
        if data is None:
            continue
        try:
            doc = json.loads(data)
            doc = migrate_report(doc, schema_version_of(doc, path), name=path)
            host_load = host_load_of(doc)
            cells = cell_verdicts_of(doc)
        except (ValueError, KeyError, TypeError, AttributeError):
            continue  # not a valid report any more: verify names it
        if host_load is not None:
            host_loads.append({"seq": seq, "host_load": host_load})
        verdicts += [
            {"seq": seq, "a": cell[0], "f": cell[1], "c": cell[2], "verdict": verdict}
            for cell, verdict in cells.items()
        ]
    if host_loads:
        connection.execute(
            sa.text("UPDATE records SET host_load = :host_load WHERE seq = :seq"), host_loads
        )
    if verdicts:
        connection.execute(
            sa.text(
                "UPDATE summaries SET verdict = :verdict WHERE record_seq = :seq "
                "AND acquisition = :a AND format = :f AND cache_state = :c"
            ),
            verdicts,
        )


def upgrade() -> None:
    op.add_column("records", sa.Column("host_load", sa.String(), nullable=True))
    op.add_column("summaries", sa.Column("verdict", sa.String(), nullable=True))
    _fill(op.get_bind())
    _set_version(4)


def downgrade() -> None:
    op.drop_column("summaries", "verdict")
    op.drop_column("records", "host_load")
    _set_version(3)
