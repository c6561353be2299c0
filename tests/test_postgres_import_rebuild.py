"""``history import --history-url`` and ``history rebuild --history-url`` against a real
server (issue 15), each compared with the same command on a folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from _postgres import postgres_socket, postgres_url  # noqa: F401 (fixtures)

from harness.cli import main
from harness.errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from harness.history.records import sha256_bytes
from harness.report import dump_report
from harness.testing import make_example_report


def _reports(folder: Path, count: int) -> list[Path]:
    """Report folders of earlier runs (``run-N/loading.json``), created out of order."""
    paths = []
    for seed in range(count):
        doc = make_example_report(
            seed, reps=2, created_utc=f"2026-11-{20 + (seed * 3) % 7}T08:00:00Z"
        )
        path = folder / f"run-{seed}" / "loading.json"
        path.parent.mkdir(parents=True)
        path.write_bytes(dump_report(doc))
        paths.append(path)
    return paths


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _engine(url: str):
    from sqlalchemy import create_engine

    return create_engine(url)


def _index_rows(url: str) -> list[tuple]:
    """The server's index content without its surrogate keys (seq, id)."""
    from sqlalchemy import text

    engine = _engine(url)
    try:
        with engine.connect() as connection:
            records = connection.execute(
                text("SELECT sha256, path, created_utc, comparison_key, index_entry FROM records "
                     "ORDER BY seq")
            ).all()  # fmt: skip
            trials = connection.execute(text("SELECT count(*) FROM trials")).scalar_one()
            summaries = connection.execute(text("SELECT count(*) FROM summaries")).scalar_one()
    finally:
        engine.dispose()
    return [tuple(row) for row in records] + [("trials", trials), ("summaries", summaries)]


@pytest.mark.slow  # a server start
def test_import_to_a_server_is_the_folder_import(postgres_url, tmp_path, capsys) -> None:  # noqa: F811
    url, folder = postgres_url, tmp_path / "h"
    old = tmp_path / "old"
    reports = _reports(old, 3)
    bad = old / "run-bad" / "loading.json"
    bad.parent.mkdir()
    bad.write_text('{"schema_version": 3, "benchmark": "io-scale"}\n')
    assert main(["history", "init-db", url]) == EXIT_OK
    capsys.readouterr()

    # one invalid report refuses the whole import, on both, before anything is stored
    for where in (["--history-dir", str(folder)], ["--history-url", url]):
        code, _out, err = _run(["history", "import", str(old), *where], capsys)
        assert code == EXIT_FAILURE, err
        assert str(bad) in err and "Traceback" not in err
    assert _run(["history", "list", "--history-url", url], capsys)[1].count("\n") == 1  # header

    # --skip-invalid: the valid ones stored, the invalid one listed, exit 1, on both
    outputs = {}
    for name, where in (
        ("folder", ["--history-dir", str(folder)]),
        ("url", ["--history-url", url]),
    ):
        code, out, err = _run(["history", "import", str(old), "--skip-invalid", *where], capsys)
        assert code == EXIT_FAILURE and f"refused: {bad}" in err, (name, err)
        outputs[name] = out
    for report in reports:
        sha = sha256_bytes(report.read_bytes())
        assert f"stored {sha} from {report}" in outputs["url"]
        assert f"{sha}" in outputs["folder"]
    assert _run(["history", "list", "--history-dir", str(folder)], capsys) == _run(
        ["history", "list", "--history-url", url], capsys
    )
    # a second import stores nothing; verify is clean
    code, out, _err = _run(["history", "import", *map(str, reports), "--history-url", url], capsys)
    assert code == EXIT_OK and out.count("already stored") == 3
    assert _run(["history", "verify", "--history-url", url], capsys)[0] == EXIT_OK
    code, _out, err = _run(["history", "import", str(old), "--history-url", url, "--plots", "now"],
                           capsys)  # fmt: skip
    assert code == EXIT_USAGE and "apply to a history folder" in err


@pytest.mark.slow  # a server start
def test_rebuild_on_a_server_restores_its_index_in_one_transaction(
    postgres_url,  # noqa: F811
    tmp_path,
    capsys,
) -> None:
    from sqlalchemy import text

    url, folder = postgres_url, tmp_path / "h"
    reports = _reports(tmp_path / "old", 4)
    assert main(["history", "init-db", url]) == EXIT_OK
    for where in (["--history-dir", str(folder)], ["--history-url", url]):
        assert main(["history", "register", *map(str, reports), *where]) == EXIT_OK
    capsys.readouterr()
    before = _index_rows(url)
    listed = _run(["history", "list", "--history-url", url], capsys)[1]

    # damage the derived index by hand: a record's rows gone, a row of no record
    sha = sha256_bytes(reports[2].read_bytes())
    engine = _engine(url)
    with engine.begin() as connection:
        seq = connection.execute(text("SELECT seq FROM records WHERE sha256 = :s"), {"s": sha})
        seq = seq.scalar_one()
        for table in ("summaries", "trials"):
            connection.execute(text(f"DELETE FROM {table} WHERE record_seq = :q"), {"q": seq})
        connection.execute(text("DELETE FROM records WHERE seq = :q"), {"q": seq})
    engine.dispose()
    code, _out, err = _run(["history", "verify", "--history-url", url], capsys)
    assert code == EXIT_FAILURE and f"record {sha}: not in the index" in err

    code, out, err = _run(["history", "rebuild", "--history-url", url], capsys)
    assert code == EXIT_OK, err
    assert "indexed 4 records; 0 unregistered records and 0 invalid records listed, not indexed" in out
    assert _run(["history", "verify", "--history-url", url], capsys)[0] == EXIT_OK
    # the same rows as registration made, in the folder rebuild's order (created, sha256)
    after = _index_rows(url)
    assert sorted(after[:-2]) == sorted(before[:-2]) and after[-2:] == before[-2:]
    assert [row[0] for row in after[:-2]] == [
        row[0] for row in sorted(before[:-2], key=lambda r: (r[2], r[0]))
    ]
    assert main(["history", "rebuild", "--history-dir", str(folder)]) == EXIT_OK
    capsys.readouterr()
    assert (
        _run(["history", "list", "--history-url", url], capsys)[1]
        == _run(["history", "list", "--history-dir", str(folder)], capsys)[1]
    )
    assert sorted(listed.splitlines()) == sorted(
        _run(["history", "list", "--history-url", url], capsys)[1].splitlines()
    )

    # a tampered record is reported (exit 1) and left out of the index, never repaired
    engine = _engine(url)
    with engine.begin() as connection:
        connection.execute(text("ALTER TABLE evidence_records DISABLE TRIGGER USER"))
        connection.execute(
            text("UPDATE evidence_records SET data = data || ' '::bytea WHERE sha256 = :s"),
            {"s": sha},
        )
        connection.execute(text("ALTER TABLE evidence_records ENABLE TRIGGER USER"))
    engine.dispose()
    code, out, err = _run(["history", "rebuild", "--history-url", url], capsys)
    assert code == EXIT_FAILURE
    assert f"records/sha256/{sha[:2]}/{sha}.json: bytes no longer match the key" in err
    assert "indexed 3 records" in out
    assert sha not in {row[0] for row in _index_rows(url)[:-2]}
    code, _out, err = _run(["history", "rebuild", "--history-url", url, "--no-plots"], capsys)
    assert code == EXIT_USAGE and "render index --out DIR --history-url URL" in err


@pytest.mark.slow  # a server start
def test_rebuild_as_the_writer_role_is_refused_and_changes_nothing(
    postgres_url,  # noqa: F811
    tmp_path,
    capsys,
) -> None:
    from sqlalchemy import text

    url = postgres_url
    reports = _reports(tmp_path / "old", 2)
    with _engine(url).begin() as connection:
        connection.execute(text("CREATE ROLE rebuild_writer LOGIN"))
    try:
        assert main(["history", "init-db", url, "--grant-to", "rebuild_writer"]) == EXIT_OK
        as_writer = url.replace("harness@", "rebuild_writer@")
        assert main(["history", "register", *map(str, reports), "--history-url", as_writer]) == 0
        capsys.readouterr()
        before = _index_rows(url)
        code, _out, err = _run(["history", "rebuild", "--history-url", as_writer], capsys)
        assert code == EXIT_FAILURE and "Traceback" not in err
        assert "permission denied" in err and "run it as the database's owner" in err
        assert "rebuild_writer@" in err
        assert _index_rows(url) == before  # the transaction rolled back: index intact
    finally:
        with _engine(url).begin() as connection:
            connection.execute(text("DROP OWNED BY rebuild_writer"))
            connection.execute(text("DROP ROLE rebuild_writer"))
