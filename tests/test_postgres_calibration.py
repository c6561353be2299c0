"""Calibrations on a PostgreSQL server (issue 15): ``harness calibrate --history-url``
stores the calibration there, and ``compare --history-url`` (and ``recheck``) choose one
exactly as on a folder: the newest whose comparison key matches, or the one named by
``--calibration`` (a SHA-256 prefix on the server, or a file)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _postgres import postgres_socket, postgres_url  # noqa: F401 (fixtures)

from harness.cli import main
from harness.commands.history import opened_history
from harness.errors import EXIT_OK, EXIT_USAGE, HistoryError
from harness.history.records import sha256_bytes
from harness.history.store import register_reports
from harness.report import dump_report, summarise_trials
from harness.testing import make_example_report
from harness.verdict.calibration_report import (
    build_calibration,
    dump_calibration,
    register_calibration,
)

ROOT = Path(__file__).resolve().parents[1]


def _scaled(doc: dict, factor: float) -> dict:
    for trial in doc["trials"]:
        trial["seconds"] *= factor
    doc["summaries"] = summarise_trials(doc["trials"])
    return doc


def _twin_with_calibration(tmp_path: Path, url: str):
    """A folder and a server holding the same 6 A/A reports and the same calibration."""
    folder = tmp_path / "h"
    paths = []
    for seed in range(6):
        path = tmp_path / f"aa{seed}.json"
        path.write_bytes(dump_report(make_example_report(seed, reps=3, noise=0.02)))
        paths.append(path)
    results = register_reports(folder, paths)
    runs = [(json.loads(p.read_bytes()), r.sha256) for p, r in zip(paths, results)]
    data = dump_calibration(
        build_calibration(runs, regression_percent=20, alpha=0.05, command=["t"])
    )
    register_calibration(folder, data)
    assert main(["history", "init-db", url]) == EXIT_OK
    assert main(["history", "push", str(folder), "--history-url", url]) == EXIT_OK
    with opened_history(url) as history:  # push copied the calibration too
        assert history.store_calibration(data) == (sha256_bytes(data), False)  # no-op
    return folder, paths, data


def _compare(argv: list[str], capsys) -> tuple[int, dict]:
    code = main([*argv, "--format", "json"])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, json.loads(captured.out) if captured.out else {}


def _without_paths(doc: dict) -> dict:
    doc = dict(doc)
    doc.pop("baseline_path"), doc.pop("candidate_path")
    doc["calibration"] = {k: v for k, v in doc["calibration"].items() if k != "note"}
    return doc


@pytest.mark.slow  # a server start
def test_compare_on_a_server_chooses_the_calibration_a_folder_chooses(
    postgres_url,  # noqa: F811
    tmp_path,
    capsys,
) -> None:
    from sqlalchemy import create_engine, text

    url = postgres_url
    folder, paths, data = _twin_with_calibration(tmp_path, url)
    sha = sha256_bytes(data)
    capsys.readouterr()
    for factor, code in ((1.5, 2), (1.05, 0)):
        candidate = tmp_path / f"cand{factor}.json"
        candidate.write_bytes(dump_report(_scaled(make_example_report(1, reps=3), factor)))
        argv = ["compare", str(candidate), "--baseline", str(paths[0])]
        for named in ([], ["--calibration", sha[:10]]):
            on_folder = _compare([*argv, *named, "--history-dir", str(folder)], capsys)
            on_url = _compare([*argv, *named, "--history-url", url], capsys)
            assert on_folder[0] == on_url[0] == code
            assert on_url[1]["calibration"]["sha256"] == sha
            assert _without_paths(on_folder[1]) == _without_paths(on_url[1])
        calibration_file = tmp_path / "calibration.json"
        calibration_file.write_bytes(data)
        on_file = _compare([*argv, "--calibration", str(calibration_file), "--history-url", url],
                           capsys)  # fmt: skip
        assert on_file[0] == code and on_file[1]["calibration"]["sha256"] == sha
    # a prefix that names nothing; a calibration of another key: usage errors, as on a folder
    code, _ = _compare([*argv, "--calibration", "ffff0000", "--history-url", url], capsys)
    assert code == EXIT_USAGE
    other = tmp_path / "other.json"
    other.write_bytes(dump_report(make_example_report(3, storage_id="elsewhere")))
    code, doc = _compare(
        ["compare", str(other), "--baseline", str(other), "--history-url", url], capsys
    )
    assert (
        doc["calibration"]["sha256"] is None
        and "matches comparison key" in doc["calibration"]["note"]
    )
    assert main(["compare", str(other), "--baseline", str(other), "--calibration", sha[:10],
                 "--history-url", url]) == EXIT_USAGE  # fmt: skip
    assert "is for comparison key" in capsys.readouterr().err

    # insert-only and key-checked by the server, as the records are
    engine = create_engine(url)
    with pytest.raises(Exception, match="insert-only"), engine.begin() as connection:
        connection.execute(text("UPDATE evidence_calibrations SET data = data || ' '::bytea"))
    with pytest.raises(Exception, match="does not match"), engine.begin() as connection:
        connection.execute(
            text("INSERT INTO evidence_calibrations VALUES (:s, 'x'::bytea)"), {"s": "0" * 64}
        )
    # a superuser's edit: the calibration is no longer used (as a damaged file in a folder)
    with engine.begin() as connection:
        connection.execute(text("ALTER TABLE evidence_calibrations DISABLE TRIGGER USER"))
        connection.execute(text("UPDATE evidence_calibrations SET data = data || ' '::bytea"))
    candidate = tmp_path / "cand1.5.json"
    code, doc = _compare(["compare", str(candidate), "--baseline", str(paths[0]),
                          "--history-url", url], capsys)  # fmt: skip
    assert doc["calibration"]["sha256"] is None
    # a database set up before calibrations were kept on servers: told to run init-db
    with engine.begin() as connection:
        connection.execute(text("DROP TABLE evidence_calibrations"))
    engine.dispose()
    with opened_history(url) as history, pytest.raises(HistoryError, match="init-db"):
        history.store_calibration(data)
    capsys.readouterr()
    assert main(["history", "init-db", url]) == EXIT_OK  # the table, created again, empty
    assert "restored: table evidence_calibrations is missing" in capsys.readouterr().out
    with opened_history(url) as history:
        assert history.store_calibration(data) == (sha, True)


@pytest.mark.slow  # five demo runs in subprocesses, then two comparisons: about a minute
def test_calibrate_on_a_server_then_compare_finds_it(postgres_url, tmp_path) -> None:  # noqa: F811
    url = postgres_url
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def harness(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True,
                              text=True, cwd=tmp_path, env=env, check=False)  # fmt: skip

    assert harness("history", "init-db", url).returncode == 0
    done = harness("calibrate", "io-scale", "--demo", "--allow-contended", "--runs", "5",
                   "--history-url", url,
                   "--output-dir", str(tmp_path / "cal"))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    data = (tmp_path / "cal" / "calibration.json").read_bytes()
    sha = sha256_bytes(data)
    said = " ".join(done.stdout.split())  # rich wraps long lines off a terminal
    assert f"calibration {sha}: stored in postgresql+psycopg://harness@" in said
    assert not (tmp_path / "harness-history").exists()  # nothing went to the demo folder
    listed = harness("history", "list", "--history-url", url)
    assert listed.returncode == 0 and len(listed.stdout.splitlines()) == 1 + 5  # the runs
    baseline = tmp_path / "cal" / "run-01" / "loading.json"
    candidate = tmp_path / "candidate.json"
    candidate.write_bytes(dump_report(_scaled(json.loads(baseline.read_bytes()), 1.5)))
    run_sha = sha256_bytes(baseline.read_bytes())
    result = harness("compare", str(candidate), "--baseline", run_sha[:12], "--history-url", url,
                     "--format", "json")  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert json.loads(result.stdout)["calibration"]["sha256"] == sha
    both = harness("calibrate", "io-scale", "--demo", "--history-url", url, "--history-dir", "h")
    assert both.returncode == EXIT_USAGE and "not both" in both.stderr


def _calibration(tmp_path: Path, folder: Path, seeds: range, key_seed: int = 0) -> bytes:
    tmp_path.mkdir(parents=True, exist_ok=True)
    paths = []
    for seed in seeds:
        path = tmp_path / f"aa{seed}.json"
        path.write_bytes(dump_report(make_example_report(seed, reps=3, noise=0.02)))
        paths.append(path)
    results = register_reports(folder, paths)
    runs = [(json.loads(p.read_bytes()), r.sha256) for p, r in zip(paths, results)]
    return dump_calibration(
        build_calibration(runs, regression_percent=20, alpha=0.05, command=[f"t{key_seed}"])
    )


def _server_calibration_shas(url: str) -> list[str]:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.connect() as connection:
        shas = connection.execute(
            text("SELECT sha256 FROM evidence_calibrations ORDER BY sha256")
        ).scalars()
        shas = list(shas)
    engine.dispose()
    return shas


def _folder_calibration_bytes(folder: Path) -> dict[str, bytes]:
    return {p.stem: p.read_bytes() for p in (folder / "calibrations").rglob("*.json")}


@pytest.mark.slow
def test_push_and_pull_copy_calibrations_both_ways_idempotently(
    postgres_url,  # noqa: F811
    tmp_path,
    capsys,
) -> None:
    url = postgres_url
    folder, back = tmp_path / "h", tmp_path / "back"
    pushed = _calibration(tmp_path, folder, range(6), key_seed=1)
    register_calibration(folder, pushed)
    assert main(["history", "init-db", url]) == EXIT_OK
    capsys.readouterr()
    assert main(["history", "push", str(folder), "--history-url", url]) == EXIT_OK
    assert "and 1 calibrations (0 already there)" in capsys.readouterr().out
    assert main(["history", "push", str(folder), "--history-url", url]) == EXIT_OK
    assert "and 0 calibrations (1 already there)" in capsys.readouterr().out
    assert _server_calibration_shas(url) == [sha256_bytes(pushed)]

    # a second calibration stored only on the server; pull brings both, exact bytes
    other = _calibration(tmp_path / "x", tmp_path / "x" / "h", range(10, 16), key_seed=2)
    with opened_history(url) as history:
        assert history.store_calibration(other) == (sha256_bytes(other), True)
    assert main(["history", "pull", url, "--history-dir", str(back)]) == EXIT_OK
    assert "and 2 calibrations (0 already there)" in capsys.readouterr().out
    assert main(["history", "pull", url, "--history-dir", str(back)]) == EXIT_OK
    assert "and 0 calibrations (2 already there)" in capsys.readouterr().out
    copied = _folder_calibration_bytes(back)
    assert copied == {sha256_bytes(pushed): pushed, sha256_bytes(other): other}
    assert main(["history", "verify", "--history-dir", str(back)]) == EXIT_OK
    # pushing the pulled folder back: nothing new anywhere
    assert main(["history", "push", str(back), "--history-url", url]) == EXIT_OK
    assert "and 0 calibrations (2 already there)" in capsys.readouterr().out


@pytest.mark.slow
def test_push_and_pull_refuse_a_tampered_calibration(postgres_url, tmp_path, capsys) -> None:  # noqa: F811
    from sqlalchemy import create_engine, text

    url = postgres_url
    folder = tmp_path / "h"
    data = _calibration(tmp_path, folder, range(6))
    stored = register_calibration(folder, data)
    assert main(["history", "init-db", url]) == EXIT_OK
    stored.path.chmod(0o644)
    stored.path.write_bytes(data + b" ")
    capsys.readouterr()
    assert main(["history", "push", str(folder), "--history-url", url]) != EXIT_OK
    err = capsys.readouterr().err
    assert f"calibration {stored.sha256} no longer matches its bytes; nothing copied" in err
    assert main(["history", "head", "--history-url", url]) == EXIT_OK
    assert capsys.readouterr().out.strip() == "0" * 64  # no record copied either
    assert _server_calibration_shas(url) == []

    stored.path.write_bytes(data)  # repaired: push, then a superuser edits it on the server
    assert main(["history", "push", str(folder), "--history-url", url]) == EXIT_OK
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text("ALTER TABLE evidence_calibrations DISABLE TRIGGER USER"))
        connection.execute(text("UPDATE evidence_calibrations SET data = data || ' '::bytea"))
    engine.dispose()
    back = tmp_path / "back"
    capsys.readouterr()
    assert main(["history", "pull", url, "--history-dir", str(back)]) != EXIT_OK
    err = capsys.readouterr().err
    assert f"calibration {stored.sha256} no longer matches its bytes; nothing copied" in err
    assert not (back / "journal.jsonl").exists() or not (back / "journal.jsonl").read_bytes()
    assert not (back / "calibrations").exists()
