"""The CLI on a history at a PostgreSQL URL (issue 15): register, head, verify, init-db,
push and pull against the throwaway server of ``tests/_postgres.py``; the usage and
connection errors without one."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _postgres import postgres_socket, postgres_url  # noqa: F401 (fixtures)

from harness.cli import main
from harness.errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from harness.history.records import sha256_bytes
from harness.report import dump_report
from harness.testing import make_example_report

ROOT = Path(__file__).resolve().parents[1]


def _write_report(folder: Path, seed: int) -> Path:
    path = folder / f"r{seed}.json"
    path.write_bytes(dump_report(make_example_report(seed, reps=2)))
    return path


# --- without a server -------------------------------------------------------------------


def test_history_dir_and_history_url_exclude_each_other(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main(
            [
                "history",
                "head",
                "--history-dir",
                str(tmp_path),
                "--history-url",
                "postgresql://x@/y",
            ]
        )
    assert stop.value.code == EXIT_USAGE
    assert "not allowed with argument" in capsys.readouterr().err


def test_both_environment_variables_are_a_usage_error(monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.setenv("HARNESS_HISTORY_DIR", str(tmp_path))
    monkeypatch.setenv("HARNESS_HISTORY_URL", "postgresql+psycopg://x@/y")
    assert main(["history", "head"]) == EXIT_USAGE
    assert "both $HARNESS_HISTORY_DIR and $HARNESS_HISTORY_URL" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["history", "rebuild"],
        ["history", "import", "reports/r1.json"],
        ["recheck", "abcd", "--baseline", "abcd"],
    ],
)
def test_an_environment_url_is_used_by_rebuild_import_and_recheck(
    argv, monkeypatch, tmp_path, capsys
) -> None:
    pytest.importorskip("psycopg")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reports").mkdir()
    _write_report(tmp_path / "reports", 1)
    monkeypatch.delenv("HARNESS_HISTORY_DIR", raising=False)
    monkeypatch.setenv("HARNESS_HISTORY_URL", f"postgresql+psycopg://x@/y?host={tmp_path}")
    assert main(argv) == EXIT_FAILURE  # no server there: it was asked, not ./harness-history
    err = capsys.readouterr().err
    assert "postgresql+psycopg://x@/y" in err and "while connecting" in err
    assert not (tmp_path / "harness-history").exists()


def test_not_a_postgres_url_is_a_usage_error(capsys) -> None:
    assert main(["history", "head", "--history-url", "sqlite:///x.db"]) == EXIT_USAGE
    assert "only PostgreSQL" in capsys.readouterr().err


def test_an_unreachable_server_is_named_with_the_step_and_no_password(tmp_path, capsys) -> None:
    pytest.importorskip("psycopg")
    url = f"postgresql+psycopg://alice:s3cret@/evidence?host={tmp_path}"
    assert main(["history", "verify", "--history-url", url]) == EXIT_FAILURE
    err = capsys.readouterr().err
    assert "postgresql+psycopg://alice:***@/evidence" in err and "while connecting" in err
    assert "s3cret" not in err and "Traceback" not in err


# --- against the throwaway server --------------------------------------------------------


@pytest.fixture
def url(postgres_url: str) -> str:  # noqa: F811
    assert main(["history", "init-db", postgres_url]) == EXIT_OK
    assert main(["history", "init-db", postgres_url]) == EXIT_OK  # idempotent
    return postgres_url


def _engine(url: str):
    from sqlalchemy import create_engine

    return create_engine(url)


@pytest.mark.slow
def test_register_head_verify_on_a_url(url: str, tmp_path: Path, capsys) -> None:
    reports = [_write_report(tmp_path, seed) for seed in range(3)]
    assert main(["history", "register", *map(str, reports), "--history-url", url]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.count("stored ") == 3
    assert main(["history", "register", str(reports[0]), "--history-url", url]) == EXIT_OK
    assert "already stored" in capsys.readouterr().out
    assert main(["history", "head", "--history-url", url]) == EXIT_OK
    head = capsys.readouterr().out.strip()
    assert main(["history", "verify", "--history-url", url, "--expect-head", head]) == EXIT_OK
    assert "3 records checked: 0 errors" in capsys.readouterr().out

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema_version": 1}))
    assert main(["history", "register", str(reports[0]), str(bad), "--history-url", url]) != EXIT_OK
    assert "bad.json" in capsys.readouterr().err
    assert main(["history", "head", "--history-url", url]) == EXIT_OK
    assert capsys.readouterr().out.strip() == head  # nothing of the refused batch stored


@pytest.mark.slow
def test_an_environment_url_is_used(url: str, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.delenv("HARNESS_HISTORY_DIR", raising=False)
    monkeypatch.setenv("HARNESS_HISTORY_URL", url)
    assert main(["history", "register", str(_write_report(tmp_path, 1))]) == EXIT_OK
    assert main(["history", "verify"]) == EXIT_OK
    assert "1 records checked: 0 errors" in capsys.readouterr().out


@pytest.mark.slow
def test_a_database_without_the_schema_is_refused(postgres_url: str, capsys) -> None:  # noqa: F811
    assert main(["history", "head", "--history-url", postgres_url]) == EXIT_FAILURE
    assert "not an evidence store" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("tamper", ["update", "delete", "journal"])
def test_verify_reports_a_superusers_edit(url: str, tmp_path: Path, tamper: str, capsys) -> None:
    from sqlalchemy import text

    reports = [_write_report(tmp_path, seed) for seed in range(3)]
    assert main(["history", "register", *map(str, reports), "--history-url", url]) == EXIT_OK
    sha = sha256_bytes(reports[1].read_bytes())
    engine = _engine(url)
    with engine.begin() as connection:
        if tamper == "update":
            connection.execute(text("ALTER TABLE evidence_records DISABLE TRIGGER USER"))
            connection.execute(
                text("UPDATE evidence_records SET data = data || ' '::bytea WHERE sha256 = :s"),
                {"s": sha},
            )
            expected = f"record {sha}: its bytes no longer match"
        elif tamper == "delete":
            connection.execute(text("ALTER TABLE evidence_records DISABLE TRIGGER USER"))
            connection.execute(text("DELETE FROM evidence_records WHERE sha256 = :s"), {"s": sha})
            expected = f"record {sha}: journalled, but gone"
        else:
            connection.execute(text("ALTER TABLE evidence_journal DISABLE TRIGGER USER"))
            connection.execute(
                text(
                    "UPDATE evidence_journal SET line = convert_to(replace(convert_from(line, "
                    "'UTF8'), 'r1.json', 'rX.json'), 'UTF8') WHERE seq = 2"
                )
            )
            expected = "journal line 3: does not follow the line before it"
    engine.dispose()
    capsys.readouterr()
    assert main(["history", "verify", "--history-url", url]) == EXIT_FAILURE
    captured = capsys.readouterr()
    assert expected in captured.err, captured.err
    assert "0 errors" not in captured.out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("statement", "differs"),
    [
        (
            "UPDATE trials SET seconds = seconds * 0.5 WHERE id = (SELECT min(t.id) FROM trials t "
            "JOIN records r ON r.seq = t.record_seq WHERE r.sha256 = :s)",
            "trials",
        ),
        (
            "UPDATE summaries SET median = median * 0.5 WHERE record_seq = "
            "(SELECT seq FROM records WHERE sha256 = :s)",
            "summaries",
        ),
        ("UPDATE records SET performance = 'faster' WHERE sha256 = :s", "performance"),
        (
            "DELETE FROM trials WHERE id = (SELECT max(t.id) FROM trials t "
            "JOIN records r ON r.seq = t.record_seq WHERE r.sha256 = :s)",
            "trials",
        ),
    ],
    ids=["trial-seconds", "summary-median", "record-column", "trial-deleted"],
)
def test_verify_compares_each_index_row_with_its_record(
    url: str, tmp_path: Path, statement: str, differs: str, capsys
) -> None:
    from sqlalchemy import text

    reports = [_write_report(tmp_path, seed) for seed in range(3)]
    assert main(["history", "register", *map(str, reports), "--history-url", url]) == EXIT_OK
    capsys.readouterr()
    assert main(["history", "verify", "--history-url", url]) == EXIT_OK  # untouched: clean
    assert "3 records checked: 0 errors" in capsys.readouterr().out
    sha = sha256_bytes(reports[1].read_bytes())
    engine = _engine(url)
    with engine.begin() as connection:  # the owner edits the derived index by hand
        assert connection.execute(text(statement), {"s": sha}).rowcount >= 1
    with engine.connect() as connection:
        before = connection.execute(text("SELECT count(*) FROM trials")).scalar()
    assert main(["history", "verify", "--history-url", url]) == EXIT_FAILURE
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if "differs from its record" in line]
    assert len(lines) == 1, captured.err  # the tampered record only, named by its SHA-256
    assert f"index row {sha}: differs from its record in {differs}" in lines[0]
    assert "1 errors" in captured.out
    with engine.connect() as connection:  # verify is read-only
        assert connection.execute(text("SELECT count(*) FROM trials")).scalar() == before
    engine.dispose()
    assert main(["history", "rebuild", "--history-url", url]) == EXIT_OK
    assert main(["history", "verify", "--history-url", url]) == EXIT_OK


@pytest.mark.slow
def test_the_writer_role_may_insert_and_select_only(url: str, tmp_path: Path, capsys) -> None:
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    with _engine(url).begin() as connection:
        connection.execute(text("CREATE ROLE alice LOGIN"))
    try:
        assert main(["history", "init-db", url, "--grant-to", "alice"]) == EXIT_OK
        as_alice = url.replace("harness@", "alice@")
        report = _write_report(tmp_path, 1)
        assert main(["history", "register", str(report), "--history-url", as_alice]) == EXIT_OK
        assert main(["history", "verify", "--history-url", as_alice]) == EXIT_OK
        engine = _engine(as_alice)
        for statement in (
            "UPDATE evidence_records SET data = 'x'::bytea",
            "DELETE FROM evidence_journal",
            "ALTER TABLE evidence_records DISABLE TRIGGER USER",
        ):
            with (
                pytest.raises(DBAPIError, match=r"permission denied|must be owner"),
                engine.begin() as connection,
            ):
                connection.execute(text(statement))
        engine.dispose()
    finally:
        with _engine(url).begin() as connection:
            connection.execute(text("DROP OWNED BY alice"))
            connection.execute(text("DROP ROLE alice"))


@pytest.mark.slow
def test_push_and_pull_copy_both_ways_idempotently(url: str, tmp_path: Path, capsys) -> None:
    folder, back = tmp_path / "h", tmp_path / "back"
    reports = [_write_report(tmp_path, seed) for seed in range(4)]
    assert (
        main(["history", "register", *map(str, reports), "--history-dir", str(folder)]) == EXIT_OK
    )
    assert main(["history", "push", str(folder), "--history-url", url]) == EXIT_OK
    assert "pushed 4 records (0 already there)" in capsys.readouterr().out
    assert main(["history", "push", str(folder), "--history-url", url]) == EXIT_OK
    assert "pushed 0 records (4 already there)" in capsys.readouterr().out
    # the server's journal is byte-identical to the folder's: same head
    assert main(["history", "head", "--history-dir", str(folder)]) == EXIT_OK
    folder_head = capsys.readouterr().out.strip()
    assert main(["history", "head", "--history-url", url]) == EXIT_OK
    assert capsys.readouterr().out.strip() == folder_head

    assert main(["history", "register", str(_write_report(tmp_path, 9)), "--history-url", url]) == 0
    assert main(["history", "pull", url, "--history-dir", str(back)]) == EXIT_OK
    assert "pulled 5 records (0 already there)" in capsys.readouterr().out
    assert main(["history", "pull", url, "--history-dir", str(back)]) == EXIT_OK
    assert "pulled 0 records (5 already there)" in capsys.readouterr().out
    assert main(["history", "verify", "--history-dir", str(back)]) == EXIT_OK
    assert main(["history", "verify", "--history-url", url]) == EXIT_OK
    pulled = [
        json.loads(line)["sha256"] for line in (back / "journal.jsonl").read_bytes().splitlines()
    ]
    expected = [sha256_bytes(p.read_bytes()) for p in reports] + [
        sha256_bytes((tmp_path / "r9.json").read_bytes())
    ]
    assert pulled == expected  # journal order kept
    assert main(["history", "list", "--history-dir", str(back)]) == EXIT_OK  # indexed


@pytest.mark.slow
def test_push_refuses_a_tampered_folder_record(url: str, tmp_path: Path, capsys) -> None:
    folder = tmp_path / "h"
    report = _write_report(tmp_path, 1)
    assert main(["history", "register", str(report), "--history-dir", str(folder)]) == EXIT_OK
    sha = sha256_bytes(report.read_bytes())
    (stored,) = (folder / "records").rglob(f"{sha}.json")
    stored.chmod(0o644)
    stored.write_bytes(stored.read_bytes() + b" ")
    assert main(["history", "push", str(folder), "--history-url", url]) == EXIT_FAILURE
    assert "no longer matches its bytes" in capsys.readouterr().err
    assert main(["history", "head", "--history-url", url]) == EXIT_OK
    assert capsys.readouterr().out.strip() == "0" * 64


# --- reliability -------------------------------------------------------------------------


def _register_as_host(url: str, host: int, process: int) -> None:
    from sqlalchemy import create_engine

    from harness.history.postgres import PostgresStore

    engine = create_engine(url)
    store = PostgresStore(engine)
    # 25 reports each; seeds shared between the two processes of a host and across hosts
    for number in range(25):
        seed = (host * 10 + number) % 60
        data = dump_report(make_example_report(seed, reps=2))
        store.register(data, source=f"host{host}/p{process}/{seed}.json", registered_utc="t")
    engine.dispose()


@pytest.mark.slow
def test_eight_processes_as_four_hosts_register_at_once(url: str, capsys) -> None:
    context = multiprocessing.get_context("spawn")
    jobs = [(url, host, process) for host in range(4) for process in range(2)]
    with context.Pool(8) as pool:
        pool.starmap(_register_as_host, jobs)
    unique = {(host * 10 + n) % 60 for host in range(4) for n in range(25)}
    assert main(["history", "verify", "--history-url", url]) == EXIT_OK
    assert f"{len(unique)} records checked: 0 errors" in capsys.readouterr().out
    from sqlalchemy import text

    engine = _engine(url)
    with engine.connect() as connection:
        journalled = connection.execute(text("SELECT count(*) FROM evidence_journal")).scalar()
    engine.dispose()
    assert journalled == len(unique)


_KILLED_CLIENT = """
import sys, time
from sqlalchemy import create_engine, event
from harness.history.postgres import PostgresStore
from harness.report import dump_report
from harness.testing import make_example_report
engine = create_engine(sys.argv[1])
store = PostgresStore(engine)
data = [dump_report(make_example_report(s, reps=2)) for s in range(int(sys.argv[2]), int(sys.argv[2]) + 40)]
print("ready", flush=True)
for number, report in enumerate(data):
    store.register(report, source=f"{number}.json", registered_utc="t")
"""


@pytest.mark.slow
def test_a_client_killed_mid_registration_leaves_no_partial_record(url: str, capsys) -> None:
    import random

    rng = random.Random(15)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for attempt in range(6):
        process = subprocess.Popen(
            [sys.executable, "-c", _KILLED_CLIENT, url, str(attempt * 7)],
            stdout=subprocess.PIPE,
            env=env,
        )
        assert process.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.0, 0.3))
        process.send_signal(signal.SIGKILL)
        process.wait()
        assert main(["history", "verify", "--history-url", url]) == EXIT_OK, capsys.readouterr()
    from sqlalchemy import text

    engine = _engine(url)
    with engine.connect() as connection:
        records = connection.execute(text("SELECT count(*) FROM evidence_records")).scalar()
        lines = connection.execute(text("SELECT count(*) FROM evidence_journal")).scalar()
    engine.dispose()
    assert records == lines  # every stored record journalled, nothing half-done
    # a retry of everything succeeds and completes the set
    subprocess.run([sys.executable, "-c", _KILLED_CLIENT, url, "0"], env=env, check=True,
                   capture_output=True)  # fmt: skip
    assert main(["history", "verify", "--history-url", url]) == EXIT_OK


@pytest.mark.slow
def test_a_dropped_connection_is_a_clear_error_and_a_retry_succeeds(
    url: str, tmp_path: Path, capsys
) -> None:
    from sqlalchemy import text

    from harness.history.remote import open_url_store

    store = open_url_store(url)
    data = dump_report(make_example_report(1, reps=2))
    with store.engine.connect() as connection:
        pid = connection.execute(text("SELECT pg_backend_pid()")).scalar()
    killer = _engine(url)
    with killer.connect() as connection:  # drop the pooled connection from the server side
        connection.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
    killer.dispose()
    stored = store.register(data, source="a.json", registered_utc="t")  # pre-ping reconnects
    assert stored.created
    store.engine.dispose()


_RETRYING_CLIENT = """
import sys, time
from sqlalchemy import create_engine
from harness.errors import HistoryError
from harness.history.postgres import PostgresStore
from harness.report import dump_report
from harness.testing import make_example_report
store = PostgresStore(create_engine(sys.argv[1], pool_pre_ping=True))
print("ready", flush=True)
for seed in range(200, 260):
    data = dump_report(make_example_report(seed, reps=2))
    for attempt in range(100):
        try:
            store.register(data, source=f"{seed}.json", registered_utc="t")
            break
        except HistoryError as exc:
            print(exc, file=sys.stderr, flush=True)
            time.sleep(0.1)
    else:
        sys.exit(3)
    time.sleep(0.02)
"""


@pytest.mark.slow
def test_a_server_restart_during_registrations(url: str, postgres_socket: Path, capsys) -> None:  # noqa: F811
    from _postgres import restart_postgres

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    client = subprocess.Popen(
        [sys.executable, "-c", _RETRYING_CLIENT, url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert client.stdout.readline().strip() == b"ready"
    time.sleep(0.5)
    restart_postgres(postgres_socket)
    _out, err = client.communicate(timeout=120)
    assert client.returncode == 0, err.decode()
    errors = err.decode().splitlines()
    assert errors, "no registration met the restart"
    server = url.split("?")[0]
    for line in errors:
        assert line.startswith(server) and "(while registering record" in line, line
        assert "Traceback" not in line
    assert main(["history", "verify", "--history-url", url]) == EXIT_OK
    assert "60 records checked: 0 errors" in capsys.readouterr().out


def test_psycopg_cleanup_warnings_do_not_reach_the_terminal() -> None:
    """psycopg's warning about a pipeline it could not flush (the server went away during a
    registration, whose own error the store reports) is not printed by logging's
    last-resort handler in a process that configured no logging."""
    code = (
        "import logging, harness.history.postgres\n"
        "logging.getLogger('psycopg').warning('error ignored terminating <psycopg.Pipeline>')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={
        **os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "error ignored" not in done.stderr
