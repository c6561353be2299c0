"""A history whose damage, deletions and full disks are detected (issue 12, "History").

Each test fails on the code before this change: the index's own integrity check, one
row per record, a verify that never writes, the journal's hash chain and its head, the
rendered files and leftovers verify names, and errors that name the path and the step.
"""

from __future__ import annotations

import ast
import contextlib
import errno
import hashlib
import json
import os
import sqlite3
from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import HistoryError
from harness.fsio import FileWriteError, replace_file, write_new
from harness.history.index_db import forget_index
from harness.history.journal import GENESIS_HEAD, journal_head, read_journal
from harness.history.layout import HistoryLayout
from harness.history.rebuild import rebuild_history
from harness.history.store import register_reports
from harness.history.verify import verify_history
from harness.render import check_rendered, rebuild_renderer, registration_renderer
from harness.report import dump_report
from harness.testing import make_example_report

HISTORY_PACKAGE = Path(__file__).parents[1] / "harness" / "history"


@pytest.fixture
def history(tmp_path: Path) -> tuple[Path, list]:
    root = tmp_path / "h"
    results = register_reports(
        root,
        [dump_report(make_example_report(s)) for s in range(3)],
        render=registration_renderer("defer"),
    )
    return root, results


def _verify(root: Path, **kwargs):
    return verify_history(root, check_rendered=check_rendered, **kwargs)


def _kinds(root: Path, **kwargs) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for problem in _verify(root, **kwargs).errors:
        found.setdefault(problem.kind.value, set()).add(problem.subject)
    return found


def _close_index(root: Path) -> None:
    """Checkpoint the WAL into the file and close this process's engine on it."""
    forget_index(root / "index.sqlite")
    with sqlite3.connect(root / "index.sqlite") as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


# --- layers: history never imports the views, and store/rebuild/verify form no cycle --


def _imports(module: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_history_store_rebuild_verify_import_no_render_and_no_cycle() -> None:
    graph = {
        path.stem: {
            name.rsplit(".", 1)[-1]
            for name in _imports(path)
            if name.startswith("harness.history.")
        }
        for path in HISTORY_PACKAGE.glob("*.py")
        if path.stem not in ("render", "__init__")
    }
    for module, imported in graph.items():
        assert "render" not in imported, f"harness.history.{module} imports render"
    for start in graph:  # depth-first search for a cycle
        stack, seen = [(start, [start])], set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph.get(node, ()):
                assert nxt != start, f"import cycle: {' -> '.join([*trail, nxt])}"
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))


# --- fsio -------------------------------------------------------------------------------


def test_write_new_never_overwrites_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "a" / "report.json"
    write_new(target, b"first")
    with pytest.raises(FileExistsError):
        write_new(target, b"second")
    assert target.read_bytes() == b"first"
    assert sorted(p.name for p in target.parent.iterdir()) == ["report.json"]
    replace_file(target, b"third")
    assert target.read_bytes() == b"third"


def test_write_errors_name_the_path_and_the_step(tmp_path: Path, monkeypatch) -> None:
    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(FileWriteError) as info:
        write_new(tmp_path / "r.json", b"x", step="writing the report")
    message = str(info.value)
    assert message.startswith(str(tmp_path / ".r.json."))
    assert message.endswith(".tmp: No space left on device while writing the report")
    assert list(tmp_path.iterdir()) == []


# --- 5. SQLite's integrity check --------------------------------------------------------


def _corrupt_table(root: Path, table: str) -> None:
    _close_index(root)
    path = root / "index.sqlite"
    with sqlite3.connect(path) as connection:
        page_size = connection.execute("PRAGMA page_size").fetchone()[0]
        (rootpage,) = connection.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)
        ).fetchone()
    data = bytearray(path.read_bytes())
    start = (rootpage - 1) * page_size
    data[start + 8 : start + page_size] = bytes([0xA5]) * (page_size - 8)
    path.write_bytes(bytes(data))


def test_page_corruption_is_reported_cleanly_by_verify(history, capsys) -> None:
    root, _ = history
    _corrupt_table(root, "summaries")
    kinds = _kinds(root)
    assert kinds["index-damaged"] == {"index.sqlite"}
    assert main(["history", "verify", "--history-dir", str(root)]) == 1
    err = capsys.readouterr().err
    assert "error: index-damaged: index.sqlite: the index is damaged (" in err
    assert "Traceback" not in err


def test_registration_into_a_damaged_records_table_refuses(history, tmp_path, capsys) -> None:
    root, _ = history
    _corrupt_table(root, "records")
    before = sorted(p.name for p in HistoryLayout.at(root).iter_record_files())
    report = tmp_path / "new.json"
    report.write_bytes(dump_report(make_example_report(7)))
    assert main(["history", "register", str(report), "--history-dir", str(root)]) == 1
    err = capsys.readouterr().err
    assert "index.sqlite: the index is damaged (" in err and "Traceback" not in err
    assert sorted(p.name for p in HistoryLayout.at(root).iter_record_files()) == before
    assert main(["history", "rebuild", "--history-dir", str(root), "--no-plots"]) == 0
    assert main(["history", "register", str(report), "--history-dir", str(root)]) == 0


# --- 6. one row per record; verify never modifies anything -------------------------------


def test_record_sha256_is_unique_in_the_table_itself(history) -> None:
    root, results = history
    _close_index(root)
    with sqlite3.connect(root / "index.sqlite") as connection:
        for (name,) in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'records'"
        ).fetchall():
            # the UNIQUE constraint's own index cannot be dropped
            with contextlib.suppress(sqlite3.OperationalError):
                connection.execute(f'DROP INDEX "{name}"')
        columns = [r[1] for r in connection.execute("PRAGMA table_info(records)") if r[1] != "seq"]
        row = connection.execute(
            f"SELECT {', '.join(columns)} FROM records WHERE sha256 = ?", (results[0].sha256,)
        ).fetchone()
        with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
            connection.execute(
                f"INSERT INTO records ({', '.join(columns)}) VALUES ({', '.join('?' * len(row))})",
                row,
            )


def test_verify_never_modifies_anything(history) -> None:
    root, _ = history
    _close_index(root)
    with sqlite3.connect(root / "index.sqlite") as connection:
        connection.execute("DROP TABLE trials")
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = _snapshot(root)
    kinds = _kinds(root)
    assert "index-damaged" in kinds
    assert _snapshot(root) == before
    with sqlite3.connect(root / "index.sqlite") as connection:
        tables = {r[0] for r in connection.execute("SELECT name FROM sqlite_master")}
    assert "trials" not in tables


# --- 7. the journal is a hash chain; its head is printed, rendered and checked ------------


def test_every_registration_prints_the_head_and_history_head_agrees(tmp_path, capsys) -> None:
    root = tmp_path / "h"
    report = tmp_path / "r.json"
    report.write_bytes(dump_report(make_example_report(1)))
    assert main(["history", "register", str(report), "--history-dir", str(root)]) == 0
    printed = capsys.readouterr().out.splitlines()[-1]
    assert printed.startswith("journal head ")
    head = printed.split()[-1]
    assert main(["history", "head", "--history-dir", str(root)]) == 0
    assert capsys.readouterr().out.strip() == head
    assert head == read_journal(HistoryLayout.at(root)).head != GENESIS_HEAD
    assert f"Journal head: `{head}`" in (root / "README.md").read_text()
    assert head in (root / "index.html").read_text()
    assert json.loads((root / "index.json").read_text())["journal_head"] == head


def test_each_journal_line_carries_the_hash_of_the_line_before(history) -> None:
    root, _ = history
    lines = HistoryLayout.at(root).journal.read_bytes().splitlines(keepends=True)
    assert len(lines) == 3
    previous = GENESIS_HEAD
    for line in lines:
        entry = json.loads(line)
        assert entry["v"] == 2 and entry["prev"] == previous
        previous = hashlib.sha256(line).hexdigest()
    assert journal_head(HistoryLayout.at(root)) == previous


def test_removing_a_record_with_its_row_and_journal_line_is_caught_by_the_head(
    history, capsys
) -> None:
    root, results = history
    layout = HistoryLayout.at(root)
    kept_head = journal_head(layout)
    # the quiet deletion: the newest record, its index row and its journal line, re-rendered
    victim = results[2]
    os.chmod(victim.path, 0o644)
    victim.path.unlink()
    _close_index(root)
    with sqlite3.connect(root / "index.sqlite") as connection:
        (seq,) = connection.execute(
            "SELECT seq FROM records WHERE sha256 = ?", (victim.sha256,)
        ).fetchone()
        for table in ("trials", "summaries"):
            connection.execute(f"DELETE FROM {table} WHERE record_seq = ?", (seq,))
        connection.execute("DELETE FROM records WHERE seq = ?", (seq,))
    lines = layout.journal.read_bytes().splitlines(keepends=True)
    layout.journal.write_bytes(
        b"".join(line for line in lines if victim.sha256.encode() not in line)
    )
    assert main(["render", "index", "--history-dir", str(root), "--full"]) == 0
    assert _verify(root).ok  # without a kept head, a removed last line leaves no trace ...
    assert "head-not-found" in _kinds(root, expect_head=kept_head)  # ... with one it does
    assert main(["history", "verify", "--history-dir", str(root), "--expect-head", kept_head]) == 1
    assert "head-not-found" in capsys.readouterr().err


def test_a_removed_or_edited_middle_line_breaks_the_chain(history) -> None:
    root, _ = history
    layout = HistoryLayout.at(root)
    original = layout.journal.read_bytes()
    lines = original.splitlines(keepends=True)
    layout.journal.write_bytes(lines[0] + lines[2])
    assert f"{layout.journal.name}:2" in _kinds(root)["journal-broken"]
    layout.journal.write_bytes(
        lines[0] + lines[1].replace(b'registered_utc":"2', b'registered_utc":"1') + lines[2]
    )
    assert f"{layout.journal.name}:3" in _kinds(root)["journal-broken"]
    layout.journal.write_bytes(original)
    assert _verify(root, expect_head=journal_head(layout)).ok


def test_verify_with_the_expected_head_passes_after_more_registrations(history) -> None:
    root, _ = history
    head = journal_head(HistoryLayout.at(root))
    register_reports(
        root, [dump_report(make_example_report(8))], render=registration_renderer("defer")
    )
    assert journal_head(HistoryLayout.at(root)) != head
    assert _verify(root, expect_head=head).ok


def test_a_missing_journal_is_an_error_and_registration_refuses(history, tmp_path) -> None:
    root, _ = history
    (root / "journal.jsonl").unlink()
    assert "journal-missing" in _kinds(root)
    with pytest.raises(HistoryError, match="journal is missing"):
        register_reports(root, [dump_report(make_example_report(5))])


def test_a_legacy_journal_is_chained_in_memory_and_never_rewritten(history) -> None:
    root, _ = history
    layout = HistoryLayout.at(root)
    legacy = b"".join(
        json.dumps(
            {k: v for k, v in json.loads(line).items() if k not in ("prev", "v")},
            sort_keys=True,
            separators=(",", ":"),
        ).encode()
        + b"\n"
        for line in layout.journal.read_bytes().splitlines()
    )
    layout.journal.write_bytes(legacy)
    layout.marker.write_text('{"format": "quantem-harness/history", "version": 1}\n')
    assert main(["render", "index", "--history-dir", str(root)]) == 0  # the head is new
    assert _verify(root).ok
    legacy_head = journal_head(layout)
    register_reports(
        root, [dump_report(make_example_report(11))], render=registration_renderer("defer")
    )
    data = layout.journal.read_bytes()
    assert data.startswith(legacy)  # the evidence is not rewritten
    assert json.loads(layout.marker.read_text())["version"] == 2  # older harnesses refuse it now
    appended = json.loads(data[len(legacy) :])
    assert appended["v"] == 2 and appended["prev"] == legacy_head
    assert _verify(root, expect_head=legacy_head).ok
    layout.journal.write_bytes(data.replace(b'"registered_utc":"2', b'"registered_utc":"1', 1))
    assert not _verify(root, expect_head=legacy_head).ok
    layout.journal.write_bytes(data + legacy.splitlines(keepends=True)[0])  # unchained append
    assert "journal-broken" in _kinds(root)


# --- 8. rendered garbage, symlinked records, leftovers -----------------------------------


def test_plot_replaced_by_garbage_is_reported(tmp_path) -> None:
    root = tmp_path / "h"
    (result,) = register_reports(
        root, [dump_report(make_example_report(1))], render=registration_renderer("now")
    )
    plot = root / "plots" / f"{result.comparison_key}.png"
    assert _verify(root).ok
    plot.write_bytes(plot.read_bytes()[:8] + b"garbage" * 50)
    assert _kinds(root)["render-damaged"] == {f"plots/{plot.name}"}
    assert main(["render", "index", "--history-dir", str(root), "--all-plots"]) == 0
    assert _verify(root).ok


def test_rendered_file_replaced_by_garbage_is_reported(history) -> None:
    root, _ = history
    (root / "index.html").write_bytes(os.urandom(200))
    assert "index.html" in _kinds(root)["stale-render"]


def test_record_replaced_by_a_symlink_is_reported(history, tmp_path) -> None:
    root, results = history
    record = results[0].path
    copy = tmp_path / "elsewhere.json"
    copy.write_bytes(record.read_bytes())  # the same bytes, but no longer the record file
    os.chmod(record, 0o644)
    record.unlink()
    record.symlink_to(copy)
    assert record.relative_to(root).as_posix() in _kinds(root)["symlink"]


def test_stale_rebuild_index_and_temporaries_are_reported_and_removed(history) -> None:
    root, _ = history
    leftovers = [
        root / "index.sqlite.rebuild-4242",
        root / "index.sqlite.rebuild-4242-wal",
        root / ".README.md.abc.tmp",
        HistoryLayout.at(root).temp / ".x.json.abc.tmp",
    ]
    for path in leftovers:
        path.write_bytes(b"left behind")
    result = _verify(root)
    stale = {p.subject for p in result.warnings if p.kind.value == "stale-temp"}
    assert stale == {p.relative_to(root).as_posix() for p in leftovers}
    rebuilt = rebuild_history(root, render=rebuild_renderer(plots=False))
    assert rebuilt.temps_removed == 4
    assert not any(p.exists() for p in leftovers)


# --- 9. disk full: the path and the step, never a traceback ------------------------------


def _fail_writes_to(monkeypatch, suffix: str) -> None:
    """os.fsync fails with ENOSPC for files whose name ends with ``suffix``."""
    real = os.fsync

    def fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(suffix):
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd (Linux)")
@pytest.mark.parametrize(
    "suffix, where, step",
    [
        (".tmp", "/records/tmp/", "while writing the record"),
        ("journal.jsonl", "/journal.jsonl", "while appending to the journal"),
    ],
)
def test_disk_full_names_the_path_and_the_step(
    history, tmp_path, monkeypatch, capsys, suffix, where, step
) -> None:
    root, _ = history
    report = tmp_path / "new.json"
    report.write_bytes(dump_report(make_example_report(21)))
    _fail_writes_to(monkeypatch, suffix)
    assert main(["history", "register", str(report), "--history-dir", str(root)]) == 1
    err = capsys.readouterr().err
    (line,) = err.strip().splitlines()
    assert where in line and f"No space left on device {step}" in line
    assert "Traceback" not in err


def test_disk_full_in_the_index_names_the_index_and_the_step(
    history, tmp_path, monkeypatch, capsys
) -> None:
    from sqlalchemy.exc import OperationalError

    from harness.history import store

    def full(connection, entry):
        raise OperationalError("INSERT", {}, sqlite3.OperationalError("database or disk is full"))

    monkeypatch.setattr(store, "insert_entry", full)
    root, _ = history
    report = tmp_path / "new.json"
    report.write_bytes(dump_report(make_example_report(22)))
    assert main(["history", "register", str(report), "--history-dir", str(root)]) == 1
    err = capsys.readouterr().err
    assert "index.sqlite: database or disk is full while indexing the records" in err
    assert "Traceback" not in err and "sqlalchemy" not in err.lower()


def test_disk_full_while_rendering_says_the_reports_are_registered(
    history, tmp_path, monkeypatch, capsys
) -> None:
    from harness import fsio

    real = fsio.os.replace

    def full(src, dst):
        if str(dst).endswith("README.md"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(fsio.os, "replace", full)
    root, _ = history
    report = tmp_path / "new.json"
    report.write_bytes(dump_report(make_example_report(23)))
    assert main(["history", "register", str(report), "--history-dir", str(root)]) == 1
    err = capsys.readouterr().err
    assert "README.md: No space left on device while rendering README.md" in err
    assert "the reports are registered" in err and "Traceback" not in err
