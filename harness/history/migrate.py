"""Bringing an index's schema to this harness's version with Alembic (both dialects).

The migrations live in ``harness/history/migrations`` (one chain for SQLite and
PostgreSQL). :func:`index_revision` is one query, so opening an index that is current
costs no Alembic import; only an index that needs a step loads Alembic.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Connection, inspect, text

#: The Alembic revision of this harness's index schema (``index_v<INDEX_SCHEMA_VERSION>``);
#: tests/test_history_migrations.py checks that it is the head of the chain.
INDEX_HEAD_REVISION = "index_v3"
#: The revision an index written before Alembic (index schema version 2) is stamped with.
PRE_ALEMBIC_REVISION = "index_v2"
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
VERSION_TABLE = "alembic_version"


def index_revision(connection: Connection) -> str | None:
    """The Alembic revision the index is at; None when it was never stamped."""
    if not inspect(connection).has_table(VERSION_TABLE):
        return None
    return connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()


def _config(connection: Connection):
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = connection
    return config


def upgrade_index(connection: Connection, revision: str = "head") -> None:
    """Run the migrations from the index's revision (none: an empty database) to ``revision``."""
    from alembic import command

    command.upgrade(_config(connection), revision)


def stamp_index(connection: Connection, revision: str) -> None:
    """Record ``revision`` as the index's without running anything (a pre-Alembic index)."""
    from alembic import command

    command.stamp(_config(connection), revision)


def head_revision() -> str:
    """The head of the migration chain, read from the scripts (for tests and checks)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()
