"""Alembic environment of the history index: runs on the connection the harness passes
(``config.attributes["connection"]``, :mod:`harness.history.migrate`), or on
``sqlalchemy.url`` when a developer runs the ``alembic`` command."""

from __future__ import annotations

from alembic import context

from harness.history.index_db import Base
from harness.history.migrate import run_environment

run_environment(
    context,
    # batch mode: SQLite alters a table by copying it (it has no ALTER for most changes)
    lambda connection: {
        "target_metadata": Base.metadata,
        "render_as_batch": connection.dialect.name == "sqlite",
    },
)
