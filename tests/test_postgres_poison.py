"""A server store no writer can poison (issue 39, defects 4 and 5).

The writing role could store ``{}`` as a calibration (every later ``compare`` failed,
``verify`` passed) or as a record chained onto the journal (``init-db`` and ``rebuild``
failed for ever). The server now refuses both, and a second journal line for a record
already journalled; one that got in anyway (an older server, or the owner with the
triggers off) is named by ``verify`` and skipped by the readers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _postgres import postgres_socket, postgres_url  # noqa: F401 (fixtures)
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError

from harness.cli import main
from harness.errors import EXIT_FAILURE, EXIT_OK
from harness.history.evidence_store import journal_line
from harness.history.records import sha256_bytes
from harness.report import dump_report
from harness.testing import make_example_report

EMPTY_SHA = sha256_bytes(b"{}")
#: The issue's statement, as the writing role ran it.
CALIBRATION_INSERT = (
    "insert into evidence_calibrations values (encode(sha256('{}'::bytea),'hex'), '\\x7b7d'::bytea)"
)


def _record(folder: Path, seed: int) -> Path:
    path = folder / f"r{seed}.json"
    doc = make_example_report(seed, reps=3, created_utc=f"2026-11-30T08:0{seed}:00Z")
    path.write_bytes(dump_report(doc))
    return path


def _head(engine) -> str:
    with engine.connect() as connection:
        return connection.execute(
            text("SELECT link FROM evidence_journal ORDER BY seq DESC LIMIT 1")
        ).scalar_one()


def _journal_insert(connection, sha256: str, prev: str) -> None:
    line = journal_line(
        {"registered_utc": "2026-12-05T00:00:00Z", "sha256": sha256, "source": "by hand"}, prev
    )
    connection.execute(
        text("INSERT INTO evidence_journal (line, link, sha256) VALUES (:l, :k, :s)"),
        {"l": line, "k": sha256_bytes(line), "s": sha256},
    )


@pytest.fixture
def server(postgres_url: str, tmp_path: Path, capsys):  # noqa: F811
    owner = create_engine(postgres_url)
    with owner.begin() as connection:
        connection.execute(text("CREATE ROLE poisoner LOGIN"))
    assert main(["history", "init-db", postgres_url, "--grant-to", "poisoner"]) == EXIT_OK
    reports = [_record(tmp_path, seed) for seed in range(2)]
    assert main(["history", "register", *map(str, reports), "--history-url", postgres_url]) == 0
    capsys.readouterr()
    writer = create_engine(postgres_url.replace("harness@", "poisoner@"))
    try:
        yield owner, writer, postgres_url, [sha256_bytes(p.read_bytes()) for p in reports]
    finally:
        writer.dispose()
        with owner.begin() as connection:
            connection.execute(text("DROP OWNED BY poisoner"))
            connection.execute(text("DROP ROLE poisoner"))
        owner.dispose()


@pytest.mark.slow
def test_the_writer_cannot_store_invalid_documents_or_a_second_journal_line(server) -> None:
    owner, writer, _url, shas = server
    refused = [
        (CALIBRATION_INSERT, {}, "not a calibration report"),
        (  # a record {} under its own hash
            "INSERT INTO evidence_records VALUES (:s, '\\x7b7d'::bytea)",
            {"s": EMPTY_SHA},
            "is not a report",
        ),
        (  # a calibration whose bytes are not JSON at all
            "INSERT INTO evidence_calibrations VALUES (:s, :d)",
            {"s": sha256_bytes(b"\xff\xfe"), "d": b"\xff\xfe"},
            "not UTF-8 JSON",
        ),
        (  # a loading report's bytes offered as a calibration
            "INSERT INTO evidence_calibrations SELECT sha256, data FROM evidence_records LIMIT 1",
            {},
            "not a calibration report",
        ),
    ]
    for statement, values, message in refused:
        with pytest.raises(DBAPIError, match=message), writer.begin() as connection:
            connection.execute(text(statement), values)
    # journal lines: for a record the server lacks, and a second one for a stored record
    for sha256, message in ((EMPTY_SHA, "does not hold"), (shas[0], "journalled already")):
        with pytest.raises(DBAPIError, match=message), writer.begin() as connection:
            _journal_insert(connection, sha256, _head(owner))
    with owner.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM evidence_journal")).scalar() == 2
        assert connection.execute(text("SELECT count(*) FROM evidence_calibrations")).scalar() == 0


@pytest.mark.slow
def test_an_invalid_document_that_got_in_is_named_and_never_wedges(
    server, tmp_path: Path, capsys
) -> None:
    owner, _writer, url, shas = server
    where = ["--history-url", url]
    compare = ["compare", shas[1][:16], "--baseline", shas[0][:16], *where, "--format", "json"]
    expected = main(compare)
    verdict = json.loads(capsys.readouterr().out)["verdict"]
    # the owner, triggers off (or an older server): {} as a calibration and a journalled record
    with owner.begin() as connection:
        for table in ("evidence_calibrations", "evidence_records", "evidence_journal"):
            connection.execute(text(f"ALTER TABLE {table} DISABLE TRIGGER USER"))
        connection.execute(text(CALIBRATION_INSERT))
        connection.execute(
            text("INSERT INTO evidence_records VALUES (:s, '\\x7b7d'::bytea)"), {"s": EMPTY_SHA}
        )
        _journal_insert(connection, EMPTY_SHA, _head(owner))
        _journal_insert(connection, shas[0], _head(owner))  # a second line for a record
        for table in ("evidence_calibrations", "evidence_records", "evidence_journal"):
            connection.execute(text(f"ALTER TABLE {table} ENABLE TRIGGER USER"))

    # verify names both, with their kind, and fails
    assert main(["history", "verify", *where]) == EXIT_FAILURE
    err = capsys.readouterr().err
    assert f"calibration {EMPTY_SHA}: stored, but not a valid calibration report" in err
    assert f"record {EMPTY_SHA}: stored, but not a valid report" in err
    assert f"journal line 4: registers record {shas[0]} again (first on line 1)" in err
    # compare skips the calibration with a warning and judges as before
    assert main(compare) == expected
    captured = capsys.readouterr()
    assert json.loads(captured.out)["verdict"] == verdict
    assert "warning: skipped" in captured.err and EMPTY_SHA in captured.err
    # init-db and rebuild complete, naming the record
    assert main(["history", "init-db", url]) == EXIT_OK
    assert EMPTY_SHA in capsys.readouterr().out
    assert main(["history", "rebuild", *where]) == EXIT_OK
    captured = capsys.readouterr()
    assert f"{EMPTY_SHA}.json: not a valid report" in captured.out
    # list and render leave it out (render says so); the others are there
    assert main(["history", "list", *where]) == EXIT_OK
    listing = capsys.readouterr().out
    assert shas[0][:12] in listing and EMPTY_SHA[:12] not in listing
    out = tmp_path / "rendered"
    assert main(["render", "index", "--out", str(out), *where]) == EXIT_OK
    assert f"warning: record {EMPTY_SHA} is not indexed and was left out" in (
        capsys.readouterr().err
    )
    assert (out / "dashboard" / "records" / f"{shas[0]}.html").is_file()
