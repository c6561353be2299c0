"""The same commands on a history folder and on a PostgreSQL URL give the same results
(issue 15): ``history list``, ``show``, ``changes``, ``compare --baseline`` and
``render index --out`` run against a folder and against a server holding the same
records (pushed from the folder, so the journals are byte-identical), and their outputs
are compared; only the lines that name where a record lives may differ."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _postgres import postgres_socket, postgres_url  # noqa: F401 (fixtures)

from harness.cli import main
from harness.errors import EXIT_OK, EXIT_USAGE
from harness.history.records import sha256_bytes
from harness.report import dump_report
from harness.testing import make_example_report

ROOT = Path(__file__).resolve().parents[1]


def _reports(folder: Path) -> list[Path]:
    """Two comparison keys, timings that move, and a record with a declared baseline."""
    folder.mkdir()
    paths = []
    specs = [
        (1, "cpu", 1.0, "2026-11-30T08:00:00Z"),
        (2, "cpu", 1.0, "2026-11-30T09:00:00Z"),
        (3, "cuda", 1.0, "2026-11-30T10:00:00Z"),
        (4, "cpu", 1.6, "2026-11-30T11:00:00Z"),
        (5, "cuda", 1.1, "2026-11-30T12:00:00Z"),
    ]
    for seed, backend, slowdown, created in specs:
        doc = make_example_report(
            seed, reps=3, backend=backend, slowdown=slowdown, created_utc=created
        )
        path = folder / f"r{seed}.json"
        path.write_bytes(dump_report(doc))
        paths.append(path)
    return paths


def _run(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def twin(postgres_url: str, tmp_path: Path, capsys):  # noqa: F811
    """A history folder and a server with the same records and journal."""
    folder = tmp_path / "h"
    reports = _reports(tmp_path / "reports")
    for report in reports:  # one at a time: one journal line each, in this order
        assert main(["history", "register", str(report), "--history-dir", str(folder)]) == 0
    assert main(["history", "init-db", postgres_url]) == EXIT_OK
    assert main(["history", "push", str(folder), "--history-url", postgres_url]) == EXIT_OK
    capsys.readouterr()
    shas = [sha256_bytes(r.read_bytes()) for r in reports]
    return folder, postgres_url, shas


def _both(twin, capsys, *args: str) -> tuple[tuple, tuple]:
    folder, url, _ = twin
    on_folder = _run([*args, "--history-dir", str(folder)], capsys)
    on_url = _run([*args, "--history-url", url], capsys)
    return on_folder, on_url


@pytest.mark.slow  # a server start
def test_list_show_and_head_are_the_same(twin, capsys) -> None:
    folder, url, shas = twin
    for args in (
        ["history", "list"],
        ["history", "list", "--limit", "2"],
        ["history", "head"],
    ):
        on_folder, on_url = _both(twin, capsys, *args)
        assert on_folder == on_url and on_folder[0] == 0, args
    listed = _run(["history", "list", "--history-dir", str(folder)], capsys)[1].splitlines()
    group = listed[1].split()[-2]  # the key, before the purpose (the device name has spaces)
    on_folder, on_url = _both(twin, capsys, "history", "list", "--group", group)
    assert on_folder == on_url and len(on_folder[1].splitlines()) == 1 + 3

    on_folder, on_url = _both(twin, capsys, "history", "show", shas[3][:10])
    assert on_folder[0] == on_url[0] == 0

    def without_path(out: str) -> list[str]:
        return [line for line in out.splitlines() if not line.startswith("path ")]

    assert without_path(on_folder[1]) == without_path(on_url[1])
    assert f"records/sha256/{shas[3][:2]}/{shas[3]}.json" in on_url[1]
    assert "Traceback" not in on_url[2]

    folder_raw = subprocess.run(
        [sys.executable, "-m", "harness", "history", "show", "--raw", shas[0][:8],
         "--history-dir", str(folder)], capture_output=True, check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ).stdout  # fmt: skip
    url_raw = subprocess.run(
        [sys.executable, "-m", "harness", "history", "show", "--raw", shas[0][:8],
         "--history-url", url], capture_output=True, check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ).stdout  # fmt: skip
    assert folder_raw == url_raw and sha256_bytes(url_raw) == shas[0]

    on_folder, on_url = _both(twin, capsys, "history", "show", "ffff")
    assert on_folder[0] == on_url[0] == EXIT_USAGE
    assert "no record in" in on_url[2] and "starts with ffff" in on_url[2]


@pytest.mark.slow
def test_compare_and_changes_are_the_same(twin, capsys) -> None:
    folder, _url, shas = twin

    def normalised(out: str) -> dict:
        doc = json.loads(out)
        for field in ("baseline_path", "candidate_path"):
            assert doc.pop(field)  # where each record lives: the folder's file, or the server
        doc.get("calibration", {}).pop("note", None)
        return doc

    for args in (
        ["compare", shas[3][:10], "--baseline", shas[0][:10], "--format", "json"],
        ["compare", "--baseline", shas[2][:10], "--format", "json"],  # newest: shas[4]
    ):
        on_folder, on_url = _both(twin, capsys, *args)
        assert on_folder[0] == on_url[0], (on_folder, on_url)
        assert normalised(on_folder[1]) == normalised(on_url[1])
    assert json.loads(on_url[1])["candidate_sha256"] == shas[4]

    on_folder, on_url = _both(
        twin, capsys, "compare", shas[3][:10], "--baseline", shas[0][:10], "--format", "markdown"
    )
    assert on_folder[0] == on_url[0] == 2  # 60% slower: flagged on both

    repo = ["--repo", str(folder)]  # not a git checkout: ordered by creation time
    on_folder, on_url = _both(twin, capsys, "history", "changes", *repo, "--format", "json")
    assert on_folder == on_url and on_folder[0] == 0 and json.loads(on_folder[1])


@pytest.mark.slow
def test_render_index_from_the_server_matches_the_folder(twin, tmp_path: Path, capsys) -> None:
    """The server's dashboard is the one a folder with the same records and journal gets
    from `render index --full --all-plots` (rendered in place: its records sit beside the
    pages in both)."""
    import shutil

    folder, url, shas = twin
    from_folder, from_url = tmp_path / "in-place", tmp_path / "out-url"
    shutil.copytree(folder, from_folder)
    common = ["render", "index", "--git-repo", str(tmp_path)]
    assert main([*common, "--full", "--all-plots", "--history-dir", str(from_folder)]) == 0
    assert main([*common, "--out", str(from_url), "--history-url", url]) == 0
    capsys.readouterr()
    for name in ("index.json", "timings.csv", "README.md", "index.html", "journal.jsonl"):
        assert (from_folder / name).read_bytes() == (from_url / name).read_bytes(), name

    def files(root: Path) -> dict[str, bytes]:
        found = {}
        for sub in ("dashboard", "plots", "records/sha256"):
            for path in (root / sub).rglob("*"):
                if path.is_file():
                    found[path.relative_to(root).as_posix()] = path.read_bytes()
        return found

    assert files(from_folder) == files(from_url)
    # the server's records are in the rendered folder, and the record pages link them
    for sha in shas:
        record = from_url / "records" / "sha256" / sha[:2] / f"{sha}.json"
        assert sha256_bytes(record.read_bytes()) == sha
        page = (from_url / "dashboard" / "records" / f"{sha}.html").read_text()
        assert f"../../records/sha256/{sha[:2]}/{sha}.json" in page

    assert main(["render", "index", "--history-url", url]) == EXIT_USAGE
    assert "needs --out" in capsys.readouterr().err
    assert main(["render", "index", "--out", str(folder), "--history-url", url]) == EXIT_USAGE
    assert "is a history folder" in capsys.readouterr().err


@pytest.mark.slow
def test_an_index_lacking_records_is_filled_by_init_db(postgres_url: str, tmp_path, capsys) -> None:  # noqa: F811
    """A database set up before the index was on the server: init-db indexes its records."""
    from sqlalchemy import create_engine, text

    reports = _reports(tmp_path / "reports")
    assert main(["history", "init-db", postgres_url]) == EXIT_OK
    assert main(["history", "register", *map(str, reports), "--history-url", postgres_url]) == 0
    engine = create_engine(postgres_url)
    with engine.begin() as connection:  # the owner empties the derived index
        connection.execute(text("DELETE FROM trials; DELETE FROM summaries; DELETE FROM records"))
    engine.dispose()
    capsys.readouterr()
    assert main(["history", "verify", "--history-url", postgres_url]) == 1
    err = capsys.readouterr().err
    assert err.count("not in the index") == len(reports) and "init-db" in err
    assert main(["history", "init-db", postgres_url]) == EXIT_OK
    assert f"indexed {len(reports)} records" in capsys.readouterr().out
    assert main(["history", "list", "--history-url", postgres_url]) == 0
    listed = capsys.readouterr().out.splitlines()[1:]
    shas = [sha256_bytes(r.read_bytes())[:12] for r in reports]
    assert [line.split()[0] for line in listed] == shas  # journal order
    assert main(["history", "verify", "--history-url", postgres_url]) == EXIT_OK


@pytest.mark.slow
def test_a_run_registers_on_the_server(postgres_url: str, tmp_path: Path, capsys) -> None:  # noqa: F811
    assert main(["history", "init-db", postgres_url]) == EXIT_OK
    done = subprocess.run(
        [sys.executable, "-m", "harness", "run", "io-scale", "--demo", "--reps", "1",
         "--output-dir", str(tmp_path / "out"), "--history-url", postgres_url],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode in (0, 2), done.stdout + done.stderr
    report = (tmp_path / "out" / "loading.json").read_bytes()
    sha = sha256_bytes(report)
    assert f"stored {sha}" in done.stdout and "journal head " in done.stdout
    assert not (tmp_path / "harness-history").exists()  # the demo's default folder: unused
    capsys.readouterr()
    assert main(["history", "list", "--history-url", postgres_url]) == EXIT_OK
    (line,) = capsys.readouterr().out.splitlines()[1:]
    assert line.startswith(sha[:12])
    assert main(["history", "verify", "--history-url", postgres_url]) == EXIT_OK
