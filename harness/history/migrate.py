"""Bringing a history's database schemas to this harness's version with Alembic.

Two chains, each with its own scripts and version table:

- the index (``harness/history/migrations``, version table ``alembic_version``): one
  chain for a folder's SQLite ``index.sqlite`` and a server's index tables;
- the evidence schema of a PostgreSQL history (``harness/history/migrations/evidence``,
  version table ``evidence_alembic_version``): server-only, so a folder never sees it
  (docs/postgres.md, "The evidence schema").

:func:`index_revision` and :func:`evidence_revision` are one query each, so opening a
store that is current costs no Alembic import; only a database that needs a step loads
Alembic.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, create_engine, inspect, text

#: The Alembic revision of this harness's index schema (``index_v<INDEX_SCHEMA_VERSION>``);
#: tests/test_history_migrations.py checks that it is the head of the chain.
INDEX_HEAD_REVISION = "index_v4"
#: The revision an index written before Alembic (index schema version 2) is stamped with.
PRE_ALEMBIC_REVISION = "index_v2"
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
VERSION_TABLE = "alembic_version"

#: The Alembic revision of this harness's evidence schema on a server; every revision of
#: that chain, oldest first (tests/test_postgres_schema.py checks both against the scripts).
EVIDENCE_HEAD_REVISION = "evidence_v3"
EVIDENCE_REVISIONS = ("evidence_v1", "evidence_v2", "evidence_v3")
EVIDENCE_MIGRATIONS_DIR = MIGRATIONS_DIR / "evidence"
EVIDENCE_VERSION_TABLE = "evidence_alembic_version"


def _revision_in(connection: Connection, table: str) -> str | None:
    if not inspect(connection).has_table(table):
        return None
    return connection.execute(text(f"SELECT version_num FROM {table}")).scalar()


def index_revision(connection: Connection) -> str | None:
    """The Alembic revision the index is at; None when it was never stamped."""
    return _revision_in(connection, VERSION_TABLE)


def evidence_revision(connection: Connection) -> str | None:
    """The Alembic revision a server's evidence schema is at; None when never stamped
    (an empty database, or one set up before the evidence chain existed)."""
    return _revision_in(connection, EVIDENCE_VERSION_TABLE)


def _config(connection: Connection, directory: Path = MIGRATIONS_DIR):
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(directory))
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


def upgrade_evidence(connection: Connection, revision: str = "head") -> None:
    """Run the evidence migrations from the schema's revision (none: nothing there yet)."""
    from alembic import command

    command.upgrade(_config(connection, EVIDENCE_MIGRATIONS_DIR), revision)


def stamp_evidence(connection: Connection, revision: str) -> None:
    """Record ``revision`` as the evidence schema's without running anything (a database
    set up before the evidence chain, whose schema was checked to be that revision's)."""
    from alembic import command

    command.stamp(_config(connection, EVIDENCE_MIGRATIONS_DIR), revision)


def evidence_scripts():
    """The evidence chain's scripts (Alembic's ScriptDirectory), for checks and tests."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(EVIDENCE_MIGRATIONS_DIR))


def evidence_rules(through: str) -> list[str]:
    """The server-rule statements (``RULES``) of every evidence revision up to ``through``,
    oldest first: each idempotent, so running them all again restores a missing rule."""
    scripts = evidence_scripts()
    chain = list(scripts.iterate_revisions(through, "base"))
    return [statement for script in reversed(chain) for statement in script.module.RULES]


def run_environment(context: Any, options: Callable[[Connection], dict[str, Any]]) -> None:
    """The body of both chains' ``env.py``: run the migrations on the connection the harness
    passes (``config.attributes["connection"]``), or on ``sqlalchemy.url`` when a developer
    runs the ``alembic`` command; ``options(connection)`` adds to ``context.configure``."""

    def run(connection: Connection) -> None:
        context.configure(connection=connection, **options(connection))
        with context.begin_transaction():
            context.run_migrations()

    config = context.config
    connection = config.attributes.get("connection")
    if connection is not None:
        run(connection)
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url"))
    with engine.begin() as own_connection:
        run(own_connection)
    engine.dispose()
