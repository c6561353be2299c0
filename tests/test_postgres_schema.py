"""The evidence schema of a PostgreSQL history under its own Alembic chain (issue 15):
a fresh ``init-db`` is at the head of both chains; a database made by the ``init-db``
of before (``tests/_legacy_evidence_schema.py``) is recognised and stamped, never
re-created; a server at an evidence revision this harness does not know is refused;
``init-db`` twice is a no-op; and a folder's SQLite index chain is untouched."""

# ruff: noqa: F811 (the server fixtures are arguments of the tests)
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from _legacy_evidence_schema import legacy_init_db
from _postgres import postgres_socket, postgres_url  # noqa: F401 (fixtures)

from harness.cli import main
from harness.errors import EXIT_FAILURE, EXIT_OK
from harness.history.migrate import (
    EVIDENCE_HEAD_REVISION,
    EVIDENCE_MIGRATIONS_DIR,
    EVIDENCE_REVISIONS,
    EVIDENCE_VERSION_TABLE,
    INDEX_HEAD_REVISION,
    MIGRATIONS_DIR,
    evidence_scripts,
)
from harness.history.postgres import EVIDENCE_TABLES_AT
from harness.history.records import sha256_bytes
from harness.history.store import register_reports
from harness.render import registration_renderer
from harness.report import dump_report
from harness.testing import make_example_report

EVIDENCE_TABLES = EVIDENCE_TABLES_AT[EVIDENCE_HEAD_REVISION]


# --- without a server -------------------------------------------------------------------


def test_the_evidence_chain_is_a_chain_of_its_own() -> None:
    from alembic.script import ScriptDirectory

    scripts = evidence_scripts()
    assert scripts.get_heads() == [EVIDENCE_HEAD_REVISION]
    chain = [s.revision for s in scripts.walk_revisions("base", "heads")]
    assert tuple(reversed(chain)) == EVIDENCE_REVISIONS == tuple(EVIDENCE_TABLES_AT)
    index = ScriptDirectory(str(MIGRATIONS_DIR))
    assert index.get_heads() == [INDEX_HEAD_REVISION]
    index_chain = {s.revision for s in index.walk_revisions("base", "heads")}
    # no evidence revision in the index chain (a folder's index would have to migrate)
    assert not index_chain & set(EVIDENCE_REVISIONS)
    assert all(revision.startswith("index_v") for revision in index_chain)
    for path in (MIGRATIONS_DIR / "versions").glob("*.py"):
        assert "evidence_" not in path.read_text(), path
    assert EVIDENCE_MIGRATIONS_DIR.parent == MIGRATIONS_DIR
    assert {p.name for p in (EVIDENCE_MIGRATIONS_DIR / "versions").glob("*.py")} == {
        f"{revision}.py" for revision in EVIDENCE_REVISIONS
    }


def test_a_folder_index_has_no_evidence_version_table(tmp_path: Path) -> None:
    data = dump_report(make_example_report(1, reps=2))
    register_reports(tmp_path / "h", [data], render=registration_renderer("defer"))
    with sqlite3.connect(tmp_path / "h" / "index.sqlite") as connection:
        tables = {
            r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        versions = list(connection.execute("SELECT version_num FROM alembic_version"))
    assert tables == {"alembic_version", "index_meta", "records", "trials", "summaries"}
    assert versions == [(INDEX_HEAD_REVISION,)]


# --- against the throwaway server --------------------------------------------------------


def _engine(url: str):
    from sqlalchemy import create_engine

    return create_engine(url)


def _query(url: str, sql: str, **params) -> list[tuple]:
    from sqlalchemy import text

    engine = _engine(url)
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text(sql), params)]
    finally:
        engine.dispose()


def _execute(url: str, *statements: str) -> None:
    from sqlalchemy import text

    engine = _engine(url)
    try:
        with engine.begin() as connection:
            for statement in statements:
                connection.execute(text(statement))
    finally:
        engine.dispose()


def _catalog(url: str) -> dict[str, list[tuple]]:
    """What the server holds of the evidence schema, from its catalogs: columns,
    constraints, indexes, triggers (definitions and state), functions (their source) and
    the writer role's privileges."""
    tables = list(EVIDENCE_TABLES)
    return {
        "columns": _query(
            url,
            "SELECT table_name, column_name, data_type, character_maximum_length, is_nullable, "
            "is_identity, identity_generation FROM information_schema.columns "
            "WHERE table_name = ANY(:t) ORDER BY 1, 2",
            t=tables,
        ),
        "constraints": _query(
            url,
            "SELECT c.relname, k.conname, pg_get_constraintdef(k.oid) FROM pg_constraint k "
            "JOIN pg_class c ON c.oid = k.conrelid WHERE c.relname = ANY(:t) ORDER BY 1, 2",
            t=tables,
        ),
        "indexes": _query(
            url,
            "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE tablename = ANY(:t) "
            "ORDER BY 1, 2",
            t=tables,
        ),
        "triggers": _query(
            url,
            "SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid), t.tgenabled FROM pg_trigger t "
            "JOIN pg_class c ON c.oid = t.tgrelid WHERE NOT t.tgisinternal "
            "AND c.relname = ANY(:t) ORDER BY 1, 2",
            t=tables,
        ),
        "functions": _query(
            url,
            "SELECT proname, prosrc FROM pg_proc WHERE proname LIKE 'evidence\\_%' ORDER BY 1",
        ),
        "privileges": _query(
            url,
            "SELECT table_name, privilege_type FROM information_schema.role_table_grants "
            "WHERE grantee = 'harness_writer' ORDER BY 1, 2",
        ),
    }


def _versions(url: str) -> tuple[list, list]:
    return (
        _query(url, f"SELECT version_num FROM {EVIDENCE_VERSION_TABLE}"),
        _query(url, "SELECT version_num FROM alembic_version"),
    )


def _init_db(url: str, capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["history", "init-db", url])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out, captured.err


def _reports(folder: Path, seeds=range(3)) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for seed in seeds:
        path = folder / f"r{seed}.json"
        path.write_bytes(dump_report(make_example_report(seed, reps=2)))
        paths.append(path)
    return paths


def _register_as_an_old_client(url: str, reports: list[Path]) -> None:
    """Register through the store directly, as a harness of before (no revision check)."""
    from harness.history.postgres import PostgresStore

    engine = _engine(url)
    store = PostgresStore(engine)
    for path in reports:
        store.register(path.read_bytes(), source=path.name, registered_utc="t")
    engine.dispose()


@pytest.mark.slow  # a server start
def test_a_fresh_init_db_is_at_both_heads_and_a_second_is_a_no_op(postgres_url, capsys) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from harness.history.postgres import (
        EVIDENCE_FUNCTIONS,
        EVIDENCE_TRIGGERS,
        evidence_schema_problems,
        metadata,
    )

    url = postgres_url
    code, out, _ = _init_db(url, capsys)
    assert code == EXIT_OK
    assert f"evidence schema migrated from an empty database to {EVIDENCE_HEAD_REVISION}" in out
    # each chain in its own version table: the index's holds its head only, as before
    assert _versions(url) == ([(EVIDENCE_HEAD_REVISION,)], [(INDEX_HEAD_REVISION,)])
    engine = _engine(url)
    with engine.connect() as connection:
        assert evidence_schema_problems(connection, EVIDENCE_HEAD_REVISION) == ([], [])
        # the revisions build the models' evidence tables (the index is the other chain's)
        only_evidence = {
            "include_name": lambda name, kind, _parents: kind != "table" or name in EVIDENCE_TABLES
        }
        context = MigrationContext.configure(connection, opts=only_evidence)
        assert compare_metadata(context, metadata) == []
    engine.dispose()
    before = _catalog(url)
    assert len(before["triggers"]) == sum(map(len, EVIDENCE_TRIGGERS.values()))
    assert len(before["functions"]) == len(EVIDENCE_FUNCTIONS)
    code, out, _ = _init_db(url, capsys)
    assert code == EXIT_OK
    assert not any(word in out for word in ("migrated", "stamped", "restored"))
    assert _catalog(url) == before and _versions(url)[0] == [(EVIDENCE_HEAD_REVISION,)]


@pytest.mark.slow  # a server start
@pytest.mark.parametrize("calibrations", [True, False], ids=["with-calibrations", "before-them"])
def test_a_database_of_the_old_init_db_is_stamped_not_recreated(
    postgres_url,
    postgres_socket,
    tmp_path,
    capsys,
    calibrations: bool,
) -> None:
    from harness.commands.history import opened_history
    from harness.verdict.calibration_report import build_calibration, dump_calibration

    url = postgres_url
    legacy_init_db(url, calibrations=calibrations)
    reports = _reports(tmp_path / "reports")
    _register_as_an_old_client(url, reports)
    oids = _query(
        url, "SELECT relname, oid FROM pg_class WHERE relname = ANY(:t) ORDER BY 1",
        t=list(EVIDENCE_TABLES),
    )  # fmt: skip
    # this harness refuses it until its owner runs init-db, saying so
    capsys.readouterr()
    assert main(["history", "list", "--history-url", url]) == EXIT_FAILURE
    err = capsys.readouterr().err
    assert "evidence schema is at revision none" in err and "harness history init-db URL" in err
    assert "Traceback" not in err

    code, out, _ = _init_db(url, capsys)
    assert code == EXIT_OK, out
    legacy = "evidence_v2" if calibrations else "evidence_v1"
    assert f"recognised as {legacy} and stamped" in out
    assert (f"migrated from evidence_v1 to {EVIDENCE_HEAD_REVISION}" in out) == (not calibrations)
    assert _versions(url) == ([(EVIDENCE_HEAD_REVISION,)], [(INDEX_HEAD_REVISION,)])
    # the same tables (same oids: not re-created), holding the same records
    after = _query(
        url, "SELECT relname, oid FROM pg_class WHERE relname = ANY(:t) ORDER BY 1",
        t=list(EVIDENCE_TABLES),
    )  # fmt: skip
    assert set(oids) <= set(after) and len(after) == 3
    capsys.readouterr()
    assert main(["history", "verify", "--history-url", url]) == EXIT_OK
    assert f"{len(reports)} records checked: 0 errors" in capsys.readouterr().out
    assert main(["history", "list", "--history-url", url]) == EXIT_OK
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert listed == [sha256_bytes(p.read_bytes())[:12] for p in reports]

    # exactly the schema a fresh init-db makes, catalog for catalog
    fresh = url.replace("/t_", "/f_")
    _execute_admin(postgres_socket, f'CREATE DATABASE "{_dbname(fresh)}"')
    try:
        assert _init_db(fresh, capsys)[0] == EXIT_OK
        assert _catalog(url) == _catalog(fresh)
    finally:
        _execute_admin(postgres_socket, f'DROP DATABASE "{_dbname(fresh)}" WITH (FORCE)')
    # calibrations stored, insert-only, on both
    with opened_history(url) as history:
        runs = [(make_example_report(seed, reps=3), f"{seed:064x}") for seed in range(6)]
        doc = build_calibration(runs, regression_percent=20, alpha=0.05, command=["test"])
        assert history.store_calibration(dump_calibration(doc))[1] is True
    with pytest.raises(Exception, match="insert-only"):
        _execute(url, "DELETE FROM evidence_calibrations")
    assert _init_db(url, capsys)[1].count("\n") == 2  # no-op: the schema line and the role's


def _dbname(url: str) -> str:
    return url.split("?")[0].rsplit("/", 1)[1]


def _execute_admin(socket: Path, statement: str) -> None:
    import psycopg

    with psycopg.connect(host=str(socket), user="harness", dbname="postgres",
                         autocommit=True) as connection:  # fmt: skip
        connection.execute(statement)


@pytest.mark.slow  # a server start
def test_a_client_refuses_an_older_evidence_revision_and_init_db_migrates_it(
    postgres_url,
    tmp_path,
    capsys,
) -> None:
    """A server a harness whose head was evidence_v1 set up (the old schema, stamped)."""
    from harness.history.migrate import stamp_evidence

    url = postgres_url
    legacy_init_db(url, calibrations=False)
    engine = _engine(url)
    with engine.begin() as connection:
        stamp_evidence(connection, "evidence_v1")
    engine.dispose()
    capsys.readouterr()
    assert main(["history", "head", "--history-url", url]) == EXIT_FAILURE
    err = capsys.readouterr().err
    assert (
        f"evidence schema is at revision evidence_v1, this harness needs {EVIDENCE_HEAD_REVISION}"
        in err
    )
    assert "run `harness history init-db URL` as its owner" in err
    code, out, _ = _init_db(url, capsys)
    assert code == EXIT_OK and "stamped" not in out
    assert f"migrated from evidence_v1 to {EVIDENCE_HEAD_REVISION}" in out
    assert main(["history", "head", "--history-url", url]) == EXIT_OK


@pytest.mark.slow  # a server start
def test_a_server_at_an_unknown_evidence_revision_is_refused(
    postgres_url, tmp_path, capsys
) -> None:
    url = postgres_url
    assert _init_db(url, capsys)[0] == EXIT_OK
    _execute(url, f"UPDATE {EVIDENCE_VERSION_TABLE} SET version_num = 'evidence_v99'")
    before = _catalog(url)
    for argv in (
        ["history", "head", "--history-url", url],
        ["history", "register", str(_reports(tmp_path)[0]), "--history-url", url],
    ):
        assert main(argv) == EXIT_FAILURE
        err = capsys.readouterr().err
        assert (
            "evidence schema is at revision evidence_v99, which this harness does not know" in err
        )
        assert "upgrade quantem-harness" in err and "harness history init-db URL" in err
        assert "Traceback" not in err
    code, _, err = _init_db(url, capsys)
    assert code == EXIT_FAILURE
    assert "revision evidence_v99, which this harness does not know" in err
    assert "nothing changed" in err
    assert _versions(url)[0] == [("evidence_v99",)] and _catalog(url) == before
    assert _query(url, "SELECT count(*) FROM evidence_records") == [(0,)]


@pytest.mark.slow  # a server start
def test_init_db_restores_a_rule_a_superuser_removed(postgres_url, tmp_path, capsys) -> None:
    url = postgres_url
    assert _init_db(url, capsys)[0] == EXIT_OK
    report = _reports(tmp_path)[0]
    assert main(["history", "register", str(report), "--history-url", url]) == EXIT_OK
    fresh = _catalog(url)
    _execute(
        url,
        "ALTER TABLE evidence_records DISABLE TRIGGER evidence_records_insert_only",
        "DROP TRIGGER evidence_journal_check ON evidence_journal",
    )
    code, out, _ = _init_db(url, capsys)
    assert code == EXIT_OK
    restored = [line for line in out.splitlines() if line.startswith("restored: ")]
    assert len(restored) == 2, out
    assert "trigger evidence_records_insert_only on evidence_records is disabled" in restored[0]
    assert "trigger evidence_journal_check on evidence_journal is missing" in restored[1]
    assert "harness history verify --history-url URL" in restored[0]
    assert _catalog(url) == fresh
    with pytest.raises(Exception, match="insert-only"):
        _execute(url, "DELETE FROM evidence_records")
    assert "restored" not in _init_db(url, capsys)[1]


@pytest.mark.slow  # a server start
@pytest.mark.parametrize("stamped", [True, False], ids=["at-head", "unstamped"])
def test_a_table_that_differs_is_refused(postgres_url, capsys, stamped: bool) -> None:
    url = postgres_url
    if stamped:
        assert _init_db(url, capsys)[0] == EXIT_OK
    else:
        legacy_init_db(url)
    _execute(url, "ALTER TABLE evidence_records ADD COLUMN note text")
    before = (_catalog(url), _versions(url)[0] if stamped else None)
    code, _, err = _init_db(url, capsys)
    assert code == EXIT_FAILURE
    assert "table evidence_records has columns" in err and "nothing changed" in err
    if not stamped:
        assert "not a schema an earlier init-db made" in err
        assert _query(url, f"SELECT to_regclass('{EVIDENCE_VERSION_TABLE}')") == [(None,)]
    assert (_catalog(url), _versions(url)[0] if stamped else None) == before


@pytest.mark.slow  # a server start
def test_an_older_init_db_on_a_new_server_leaves_it_usable(postgres_url, tmp_path, capsys) -> None:
    """An older harness's init-db re-runs its DDL; the new one's version table stays."""
    url = postgres_url
    assert _init_db(url, capsys)[0] == EXIT_OK
    fresh = _catalog(url)
    legacy_init_db(url)
    assert _catalog(url) == fresh
    assert _versions(url) == ([(EVIDENCE_HEAD_REVISION,)], [(INDEX_HEAD_REVISION,)])
    report = _reports(tmp_path)[0]
    assert main(["history", "register", str(report), "--history-url", url]) == EXIT_OK
    assert main(["history", "verify", "--history-url", url]) == EXIT_OK


@pytest.mark.slow  # a server start and four subprocesses
def test_init_db_runs_at_once_wait_for_each_other(postgres_url, tmp_path) -> None:
    import os
    import subprocess
    import sys

    url = postgres_url
    legacy_init_db(url, calibrations=False)  # each run would stamp and migrate it
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    runs = [
        subprocess.Popen([sys.executable, "-m", "harness", "history", "init-db", url],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(4)
    ]  # fmt: skip
    results = [(run.wait(timeout=120), *run.communicate()) for run in runs]
    assert [code for code, _out, _err in results] == [0] * 4, results
    outputs = [out for _code, out, _err in results]
    assert sum("recognised as evidence_v1 and stamped" in out for out in outputs) == 1, outputs
    assert sum("migrated from evidence_v1" in out for out in outputs) == 1, outputs
    assert _versions(url) == ([(EVIDENCE_HEAD_REVISION,)], [(INDEX_HEAD_REVISION,)])
