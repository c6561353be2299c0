"""Alembic environment of a PostgreSQL history's evidence schema: its own version table
(``evidence_alembic_version``), on the connection the harness passes
(``config.attributes["connection"]``, :mod:`harness.history.migrate`), or on
``sqlalchemy.url`` when a developer runs the ``alembic`` command."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from harness.history.migrate import EVIDENCE_VERSION_TABLE
from harness.history.postgres import metadata

config = context.config


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=EVIDENCE_VERSION_TABLE,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    engine = create_engine(config.get_main_option("sqlalchemy.url"))
    with engine.begin() as own_connection:
        _run(own_connection)
    engine.dispose()
