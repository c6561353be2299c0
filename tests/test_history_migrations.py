"""The index schema under Alembic (issue 15): the migrations build exactly the models'
schema, on SQLite and on PostgreSQL; a version-2 index written before Alembic (the
byte-level DDL fixture ``tests/data/history_index_v2.sql``) is upgraded in place, rows
and order kept; a newer index is refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from _postgres import postgres_socket, postgres_url  # noqa: F401 (fixtures)
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine

from harness.cli import main
from harness.errors import HistoryError
from harness.history.index_db import (
    INDEX_SCHEMA_VERSION,
    Base,
    forget_index,
    open_index,
)
from harness.history.migrate import INDEX_HEAD_REVISION, head_revision, upgrade_index
from harness.history.store import register_reports
from harness.history.verify import verify_history
from harness.render import check_rendered, registration_renderer
from harness.report import dump_report
from harness.testing import make_example_report

V2_FIXTURE = Path(__file__).parent / "data" / "history_index_v2.sql"
INDEX_TABLES = ("index_meta", "records", "trials", "summaries")


def test_the_head_revision_is_the_schema_version() -> None:
    assert head_revision() == INDEX_HEAD_REVISION == f"index_v{INDEX_SCHEMA_VERSION}"


def _schema(path: Path) -> tuple[list, list, list]:
    """The schema as SQLite states it; the DDL's whitespace aside (SQLite keeps the text
    it was given, and ALTER TABLE ADD COLUMN inserts ", column" without a line break)."""
    with sqlite3.connect(path) as connection:
        return (
            sorted(
                (kind, name, table, sql if sql is None else " ".join(sql.split()))
                for kind, name, table, sql in connection.execute(
                    "SELECT type, name, tbl_name, sql FROM sqlite_master"
                )
            ),
            list(connection.execute("SELECT key, value FROM index_meta")),
            list(connection.execute("SELECT version_num FROM alembic_version")),
        )


def test_the_migrations_build_the_models_schema_on_sqlite(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.sqlite"  # a new index: the models' tables, stamped
    open_index(fresh).dispose()
    forget_index(fresh)
    migrated = tmp_path / "migrated.sqlite"  # every migration from an empty file
    engine = create_engine(f"sqlite:///{migrated}")
    with engine.begin() as connection:
        upgrade_index(connection)
    with engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
    engine.dispose()
    assert _schema(fresh) == _schema(migrated)
    assert _schema(fresh)[2] == [(INDEX_HEAD_REVISION,)]


def _history_with_reports(root: Path) -> list[str]:
    """Three records registered in an order their creation times do not follow (a
    rebuild would reorder them by creation time; an upgrade in place keeps the order)."""
    shas = []
    for seed, created in ((1, "2026-11-30T10:00:00Z"), (2, "2026-11-30T08:00:00Z"), (3, "2026-11-30T09:00:00Z")):  # fmt: skip
        data = dump_report(make_example_report(seed, reps=2, created_utc=created))
        (result,) = register_reports(root, [data], render=registration_renderer("defer"))
        shas.append(result.sha256)
    return shas


def _copy_rows(connection: sqlite3.Connection) -> None:
    """Copy the rows of the attached ``current`` index into this older one: the columns
    the older schema has."""
    for table in ("records", "trials", "summaries"):
        columns = ", ".join(row[1] for row in connection.execute(f"PRAGMA table_info({table})"))
        connection.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM current.{table}")


def _as_version_2(index: Path) -> None:
    """Replace ``index`` with a version-2 index (the fixture's DDL) holding the same rows."""
    forget_index(index)
    old = index.with_name("current.sqlite")
    index.rename(old)
    for suffix in ("-wal", "-shm"):
        Path(f"{index}{suffix}").unlink(missing_ok=True)
    with sqlite3.connect(index) as connection:
        connection.executescript(V2_FIXTURE.read_text())
        connection.execute("ATTACH DATABASE ? AS current", (str(old),))
        _copy_rows(connection)
        connection.execute(
            "INSERT INTO index_meta SELECT * FROM current.index_meta WHERE key <> 'schema_version'"
        )
    old.unlink()


def _index_rows(index: Path) -> tuple[list, int, int]:
    with sqlite3.connect(index) as connection:
        return (
            list(connection.execute("SELECT seq, sha256 FROM records ORDER BY seq")),
            connection.execute("SELECT count(*) FROM trials").fetchone()[0],
            connection.execute("SELECT count(*) FROM summaries").fetchone()[0],
        )


def test_a_version_2_index_is_upgraded_in_place(tmp_path: Path, capsys) -> None:
    root = tmp_path / "h"
    shas = _history_with_reports(root)
    index = root / "index.sqlite"
    _as_version_2(index)
    before = _index_rows(index)
    with sqlite3.connect(index) as connection:
        names = {r[0] for r in connection.execute("SELECT name FROM sqlite_master")}
    assert "alembic_version" not in names and "ix_records_comparison_key" in names
    assert [sha for _seq, sha in before[0]] == shas  # registration order, not creation order

    assert main(["history", "list", "--history-dir", str(root)]) == 0  # opens, so upgrades
    listed = capsys.readouterr().out.splitlines()[1:]
    assert [line.split()[0] for line in listed] == [sha[:12] for sha in shas]
    with sqlite3.connect(index) as connection:
        names = {r[0] for r in connection.execute("SELECT name FROM sqlite_master")}
        version = connection.execute(
            "SELECT value FROM index_meta WHERE key = 'schema_version'"
        ).fetchone()[0]
        revision = connection.execute("SELECT version_num FROM alembic_version").fetchone()[0]
    assert "ix_records_key_seq" in names and "ix_records_comparison_key" not in names
    assert (version, revision) == (str(INDEX_SCHEMA_VERSION), INDEX_HEAD_REVISION)
    assert _index_rows(index) == before  # the same rows in the same order: not rebuilt
    forget_index(index)
    assert verify_history(root, check_rendered=check_rendered).ok

    data = dump_report(make_example_report(4, reps=2))
    (result,) = register_reports(root, [data], render=registration_renderer("defer"))
    assert result.created and _index_rows(index)[0][-1] == (4, result.sha256)


def _as_version_3(index: Path) -> None:
    """Replace ``index`` with a version-3 index (the migrations up to ``index_v3``)
    holding the same rows: no host loads or cell verdicts."""
    forget_index(index)
    old = index.with_name("current.sqlite")
    with sqlite3.connect(index) as source, sqlite3.connect(old) as copy:
        source.backup(copy)  # the rows still in the write-ahead log too
    source.close()
    copy.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{index}{suffix}").unlink(missing_ok=True)
    engine = create_engine(f"sqlite:///{index}")
    with engine.begin() as connection:
        upgrade_index(connection, "index_v3")
    engine.dispose()
    with sqlite3.connect(index) as connection:
        connection.execute("ATTACH DATABASE ? AS current", (str(old),))
        _copy_rows(connection)
        connection.execute(
            "INSERT INTO index_meta SELECT * FROM current.index_meta WHERE key <> 'schema_version'"
        )
    old.unlink()


def _markers(index: Path) -> tuple[list, list]:
    with sqlite3.connect(index) as connection:
        return (
            list(connection.execute("SELECT sha256, host_load FROM records ORDER BY seq")),
            list(
                connection.execute(
                    "SELECT record_seq, acquisition, format, cache_state, verdict FROM summaries "
                    "ORDER BY id"
                )
            ),
        )


def test_a_version_3_index_gains_host_loads_and_cell_verdicts_from_the_records(
    tmp_path: Path,
) -> None:
    from tests._dashboard_helpers import register_marked

    root = tmp_path / "h"
    register_marked(root)  # a contended run, a run with a flagged cell
    index = root / "index.sqlite"
    registered = _markers(index)
    assert {load for _sha, load in registered[0]} == {"quiet", "contended"}
    assert {row[-1] for row in registered[1]} >= {None, "unchanged"}
    before = _index_rows(index)
    _as_version_3(index)
    with sqlite3.connect(index) as connection:
        columns = {row[1] for row in connection.execute("PRAGMA table_info(records)")}
    assert "host_load" not in columns
    # verify reads without upgrading: outdated, not damaged
    assert [p.kind.value for p in verify_history(root).problems] == ["index-outdated"]

    assert main(["history", "list", "--history-dir", str(root)]) == 0  # opens, so upgrades
    assert _markers(index) == registered  # what registration derived, from the records
    assert _index_rows(index) == before  # upgraded in place, not rebuilt
    forget_index(index)
    assert verify_history(root, check_rendered=check_rendered).ok


def test_an_index_newer_than_the_harness_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "h"
    _history_with_reports(root)
    index = root / "index.sqlite"
    forget_index(index)
    with sqlite3.connect(index) as connection:
        connection.execute("UPDATE alembic_version SET version_num = 'index_v99'")
        connection.execute("UPDATE index_meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(HistoryError, match="newer than this harness"):
        open_index(index)


@pytest.mark.slow  # a server start
def test_the_migrations_build_the_models_schema_on_postgresql(postgres_url: str) -> None:  # noqa: F811
    engine = create_engine(postgres_url)
    try:
        with engine.begin() as connection:
            upgrade_index(connection)
        with engine.connect() as connection:
            assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
            revision = connection.exec_driver_sql("SELECT version_num FROM alembic_version")
            assert revision.scalar() == INDEX_HEAD_REVISION
    finally:
        engine.dispose()


@pytest.mark.slow  # a server start
def test_init_db_fills_a_version_3_server_index_from_its_evidence(
    postgres_url: str,  # noqa: F811
    tmp_path: Path,
    capsys,
) -> None:
    from sqlalchemy import text

    from harness.history.postgres import PostgresStore
    from tests._dashboard_helpers import marked_reports

    url = postgres_url
    assert main(["history", "init-db", url]) == 0
    engine = create_engine(url)
    store = PostgresStore(engine)
    for index, doc in enumerate(marked_reports()):  # a contended run, a flagged cell
        store.register(dump_report(doc), source=f"r{index}.json", registered_utc="t")

    def markers() -> tuple[list, list]:
        with engine.connect() as connection:
            return (
                list(
                    connection.execute(text("SELECT sha256, host_load FROM records ORDER BY seq"))
                ),
                list(
                    connection.execute(
                        text(
                            "SELECT record_seq, acquisition, format, cache_state, verdict "
                            "FROM summaries ORDER BY id"
                        )
                    )
                ),
            )

    registered = markers()
    assert {load for _sha, load in registered[0]} == {"quiet", "contended"}
    assert {row[-1] for row in registered[1]} - {None, "unchanged"}  # a flagged verdict
    with engine.begin() as connection:  # the server's index as index_v3 left it
        for statement in (
            "ALTER TABLE records DROP COLUMN host_load",
            "ALTER TABLE summaries DROP COLUMN verdict",
            "UPDATE alembic_version SET version_num = 'index_v3'",
            "UPDATE index_meta SET value = '3' WHERE key = 'schema_version'",
        ):
            connection.execute(text(statement))
    capsys.readouterr()
    assert main(["history", "init-db", url]) == 0
    out = capsys.readouterr().out
    assert "index migrated from index_v3: 4 records' host loads and cell verdicts" in out
    assert markers() == registered
    engine.dispose()
    assert main(["history", "verify", "--history-url", url]) == 0
