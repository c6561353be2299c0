"""Alembic environment of the history index: runs on the connection the harness passes
(``config.attributes["connection"]``, :mod:`harness.history.migrate`), or on
``sqlalchemy.url`` when a developer runs the ``alembic`` command."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from harness.history.index_db import Base

config = context.config


def _run(connection) -> None:
    # batch mode: SQLite alters a table by copying it (it has no ALTER for most changes)
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
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
