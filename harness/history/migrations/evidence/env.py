"""Alembic environment of a PostgreSQL history's evidence schema: its own version table
(``evidence_alembic_version``), on the connection the harness passes
(``config.attributes["connection"]``, :mod:`harness.history.migrate`), or on
``sqlalchemy.url`` when a developer runs the ``alembic`` command."""

from __future__ import annotations

from alembic import context

from harness.history.migrate import EVIDENCE_VERSION_TABLE, run_environment
from harness.history.postgres import metadata

run_environment(
    context,
    lambda connection: {"target_metadata": metadata, "version_table": EVIDENCE_VERSION_TABLE},
)
