"""Tampering, loss and lag are each named by `history verify` (exit 1); rebuild repairs the index."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.history.layout import HistoryLayout
from harness.history.rebuild import rebuild_history
from harness.history.store import register_reports
from harness.history.verify import ProblemKind, verify_history
from harness.render import check_rendered, rebuild_renderer, registration_renderer
from harness.report import dump_report
from harness.testing import make_example_report


@pytest.fixture
def history(tmp_path: Path) -> tuple[Path, list]:
    root = tmp_path / "h"
    results = register_reports(
        root,
        [dump_report(make_example_report(s)) for s in range(3)],
        render=registration_renderer("defer"),
    )
    assert verify_history(root, check_rendered=check_rendered).ok
    return root, results


def _kinds(root: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for problem in verify_history(root, check_rendered=check_rendered).errors:
        found.setdefault(problem.kind.value, set()).add(problem.subject)
    return found


def test_edited_record_is_reported_as_tampered(history, capsys) -> None:
    root, results = history
    record = results[1].path
    os.chmod(record, 0o644)
    record.write_bytes(record.read_bytes().replace(b'"cores":2', b'"cores":4'))
    kinds = _kinds(root)
    subject = record.relative_to(root).as_posix()
    assert subject in kinds["tampered"]
    assert main(["history", "verify", "--history-dir", str(root)]) == 1
    err = capsys.readouterr().err
    assert f"tampered: {subject}" in err


def test_truncated_record_is_reported_as_truncated(history) -> None:
    root, results = history
    record = results[0].path
    os.chmod(record, 0o644)
    record.write_bytes(record.read_bytes()[:1000])
    assert record.relative_to(root).as_posix() in _kinds(root)["truncated"]


def test_deleted_record_is_reported_as_missing(history) -> None:
    root, results = history
    results[2].path.unlink()
    assert results[2].path.relative_to(root).as_posix() in _kinds(root)["missing"]


def test_hand_added_index_row_is_reported_as_orphaned(history) -> None:
    root, _ = history
    fake = "f" * 64
    with sqlite3.connect(root / "index.sqlite") as connection:
        columns = [r[1] for r in connection.execute("PRAGMA table_info(records)") if r[1] != "seq"]
        row = connection.execute(f"SELECT {', '.join(columns)} FROM records LIMIT 1").fetchone()
        values = dict(zip(columns, row), sha256=fake)
        placeholders = ", ".join("?" for _ in columns)
        connection.execute(
            f"INSERT INTO records ({', '.join(columns)}) VALUES ({placeholders})",
            [values[c] for c in columns],
        )
    kinds = _kinds(root)
    assert f"index row {fake}" in kinds["orphaned"]
    assert "missing" not in kinds


def test_edited_index_row_is_reported_as_mismatch(history) -> None:
    root, results = history
    with sqlite3.connect(root / "index.sqlite") as connection:
        connection.execute("UPDATE trials SET seconds = seconds * 0.5 WHERE id = 3")
        connection.execute(
            "UPDATE records SET correctness='passed', performance='pass' WHERE sha256=?",
            (results[1].sha256,),
        )
    mismatched = _kinds(root)["index-mismatch"]
    assert f"index row {results[1].sha256}" in mismatched
    assert f"index row {results[0].sha256}" in mismatched  # trial 3 belongs to the first record


def test_edited_rendered_file_is_reported_stale(history) -> None:
    root, _ = history
    (root / "timings.csv").write_text(
        (root / "timings.csv").read_text().replace("scan-a", "scan-z", 1)
    )
    assert _kinds(root)["stale-render"] == {"timings.csv"}


def test_several_problems_are_all_named(history) -> None:
    root, results = history
    os.chmod(results[0].path, 0o644)
    results[0].path.write_bytes(b"{}")
    results[1].path.unlink()
    kinds = _kinds(root)
    assert results[0].path.relative_to(root).as_posix() in kinds["tampered"]
    assert results[1].path.relative_to(root).as_posix() in kinds["missing"]


def test_unregistered_record_is_reported_listed_by_rebuild_and_adopted_by_register(
    history,
) -> None:
    root, _results = history
    layout = HistoryLayout.at(root)
    # a record written by a registration killed before it reached the journal
    from harness.history.records import write_record

    extra = write_record(layout, dump_report(make_example_report(42)))
    relpath = layout.record_relpath(extra.sha256)
    assert relpath in _kinds(root)["unregistered"]
    result = rebuild_history(root, render=rebuild_renderer(plots=False))
    assert result.indexed == 3 and result.unregistered == [relpath]  # listed, not adopted
    assert relpath in _kinds(root)["unregistered"]
    assert main(["history", "register", "--history-dir", str(root), str(extra.path)]) == 0
    after = verify_history(root, check_rendered=check_rendered)
    assert after.ok and after.records == 4, [str(p) for p in after.errors]
    adopted = [line for line in layout.journal.read_text().splitlines() if extra.sha256 in line]
    assert len(adopted) == 1 and '"adopted":true' in adopted[0]


def test_rebuild_never_deletes_or_repairs_damaged_records(history) -> None:
    root, results = history
    os.chmod(results[0].path, 0o644)
    results[0].path.write_bytes(b'{"edited": true}')
    result = rebuild_history(root, render=rebuild_renderer(plots=False))
    assert [p.kind for p in result.problems] == [ProblemKind.TAMPERED]
    assert results[0].path.read_bytes() == b'{"edited": true}'
    assert result.indexed == 2
    assert main(["history", "rebuild", "--history-dir", str(root), "--no-plots"]) == 1


def test_stale_temporaries_are_warnings_and_rebuild_removes_them(history) -> None:
    root, _ = history
    temp = HistoryLayout.at(root).temp / "abc.tmp"
    temp.write_bytes(b'{"sche')
    result = verify_history(root, check_rendered=check_rendered)
    assert result.ok and ProblemKind.STALE_TEMP in {p.kind for p in result.warnings}
    assert rebuild_history(root, render=rebuild_renderer(plots=False)).temps_removed == 1
    assert not temp.exists()


def test_verify_cli_exit_codes(history, tmp_path: Path) -> None:
    root, results = history
    command = [sys.executable, "-m", "harness", "history", "verify", "--history-dir", str(root)]
    clean = subprocess.run(command, capture_output=True, text=True, check=False)
    assert clean.returncode == 0, clean.stderr
    assert "3 records checked: 0 errors" in clean.stdout
    results[0].path.unlink()
    broken = subprocess.run(command, capture_output=True, text=True, check=False)
    assert broken.returncode == 1
    assert "missing" in broken.stderr and results[0].sha256 in broken.stderr
    assert main(["history", "verify", "--history-dir", str(tmp_path / "nowhere")]) == 1


def test_damaged_index_is_reported_and_registration_refuses_it(history, capsys) -> None:
    from harness.history.index_db import forget_index

    root, _ = history
    forget_index(root / "index.sqlite")  # close this process's connection (it would checkpoint)
    for suffix in ("-wal", "-shm"):
        Path(f"{root / 'index.sqlite'}{suffix}").unlink(missing_ok=True)
    (root / "index.sqlite").write_bytes(b"this is not a database" * 100)
    assert main(["history", "verify", "--history-dir", str(root)]) == 1
    reported = capsys.readouterr().err
    assert "index-damaged" in reported and "the index is damaged" in reported
    report = root.parent / "new.json"
    report.write_bytes(dump_report(make_example_report(9)))
    assert main(["history", "register", "--history-dir", str(root), str(report)]) == 1
    refused = capsys.readouterr().err
    assert "the index is damaged (file is not a database); run `harness history rebuild`" in refused
    assert "Traceback" not in refused
    assert len(list(HistoryLayout.at(root).iter_record_files())) == 3  # nothing stored
    assert main(["history", "rebuild", "--history-dir", str(root), "--no-plots"]) == 0
    register_reports(root, [report], render=registration_renderer("defer"))
    result = verify_history(root, check_rendered=check_rendered)
    assert result.ok and result.records == 4
