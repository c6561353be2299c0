"""A read-only history can be audited, and a full or unwritable disk is named with the
path and the step (issue 39, defects 7 and 8).

Readers (list, show, compare, changes, head, verify, render --out elsewhere) write
nothing into the history: no ``.lock``, no ``-wal``/``-shm``. As root, permissions do not
stop a write, so the tests check that no file appears or changes; on a read-only mount
(``unshare`` with a read-only bind, where the system allows it) they run for real.
"""

from __future__ import annotations

import builtins
import errno
import io
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import HistoryError
from harness.history.folder_history import FolderHistory
from harness.history.index_db import forget_index
from harness.history.store import register_reports
from harness.render import registration_renderer
from harness.report import dump_report
from harness.run.registration import register_measured
from harness.testing import make_example_report

REPO = Path(__file__).resolve().parents[1]


def _history(root: Path, count: int = 3) -> tuple[Path, list[str]]:
    history = root / "h"
    shas = []
    for seed in range(count):
        doc = make_example_report(seed, reps=2, created_utc=f"2026-11-30T08:0{seed}:00Z")
        (result,) = register_reports(
            history, [dump_report(doc)], render=registration_renderer("now")
        )
        shas.append(result.sha256)
    forget_index(history / "index.sqlite")  # the writer's engine closed: no -wal left
    return history, shas


def _state(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    }


def _readers(history: Path, shas: list[str], out: Path) -> list[list[str]]:
    where = ["--history-dir", str(history)]
    return [
        ["history", "list", *where],
        ["history", "show", shas[0][:12], *where],
        ["history", "head", *where],
        ["history", "verify", *where],
        ["history", "changes", "--repo", str(out.parent), *where],
        ["compare", shas[2][:12], "--baseline", shas[0][:12], "--format", "markdown", *where],
        ["render", "index", "--out", str(out), *where],
    ]


def test_readers_write_nothing_into_the_history(tmp_path: Path, capsys) -> None:
    history, shas = _history(tmp_path)
    (history / ".lock").unlink()  # a reader must not create it
    assert not list(history.glob("index.sqlite-*"))
    for path in [history, *history.rglob("*")]:
        path.chmod(path.stat().st_mode & ~0o222)
    before = _state(history)
    try:
        for argv in _readers(history, shas, tmp_path / "elsewhere"):
            code = main(argv)
            captured = capsys.readouterr()
            assert code in (0, 2), (argv, captured.err)  # compare: 2 is a review verdict
            assert "Traceback" not in captured.err
            assert _state(history) == before, argv  # no file created, removed or written
    finally:
        for path in [history, *history.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)
    assert not list(history.glob("index.sqlite-*")) and not (history / ".lock").exists()


def _read_only_mount_available() -> bool:
    if shutil.which("unshare") is None or sys.platform != "linux":
        return False
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        probe = subprocess.run(
            ["unshare", "-rm", "sh", "-c", f"mount --bind {folder} {folder}"],
            capture_output=True,
        )
    return probe.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(
    not _read_only_mount_available(), reason="no user namespaces with mounts (unshare -rm)"
)
def test_readers_work_on_a_read_only_mount(tmp_path: Path) -> None:
    history, shas = _history(tmp_path)
    mount = tmp_path / "ro"
    mount.mkdir()
    out = tmp_path / "elsewhere"
    script = [f"mount --bind {history} {mount}", f"mount -o remount,ro,bind {mount}"]
    for argv in _readers(mount, shas, out):
        quoted = " ".join(f"'{a}'" for a in argv)
        script.append(f"{sys.executable} -m harness {quoted} >/dev/null || exit 9")
    script.append(f"touch {mount}/probe 2>/dev/null && exit 8 || exit 0")  # it is read-only
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", " && ".join(script[:2]) + "; " + "; ".join(script[2:])],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr
    assert (out / "index.html").is_file()


def test_a_run_whose_history_cannot_be_written_names_its_report(tmp_path: Path) -> None:
    report = tmp_path / "run" / "loading.json"
    report.parent.mkdir()
    report.write_bytes(dump_report(make_example_report(1, reps=2)))
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    with pytest.raises(HistoryError) as caught:
        register_measured(FolderHistory(blocked / "h"), report)
    message = str(caught.value)
    assert f"the report is kept at {report}" in message
    assert f"harness history register {report} --history-dir {blocked / 'h'}" in message
    assert "while" in message  # the step


def _inject_enospc(monkeypatch: pytest.MonkeyPatch, at: int) -> dict:
    """Make the ``at``-th file opened for writing (1-based) fail with ENOSPC."""
    real_open, real_os_open = builtins.open, os.open
    state = {"count": 0, "path": None}

    def hit(path) -> None:
        state["count"] += 1
        if state["count"] == at:
            state["path"] = path
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def fake_open(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+"):
            hit(file)
        return real_open(file, mode, *args, **kwargs)

    def fake_os_open(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            hit(path)
        return real_os_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(io, "open", fake_open)
    monkeypatch.setattr(os, "open", fake_os_open)
    return state


def _render_full_with_enospc_at(history: Path, at: int, capsys) -> tuple[int, str, dict]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        state = _inject_enospc(monkeypatch, at)
        code = main(["render", "index", "--full", "--all-plots", "--history-dir", str(history)])
    return code, capsys.readouterr().err, state


def _check_full_disk_render(tmp_path: Path, capsys, points) -> None:
    source, _ = _history(tmp_path / "source")
    shutil.rmtree(source / "dashboard")  # every page, asset and plot written again
    copy = tmp_path / "copy"
    shutil.copytree(source, copy)
    code, _err, state = _render_full_with_enospc_at(copy, 0, capsys)
    assert code == 0
    total = state["count"]
    assert total > 10
    for at in points(total):
        shutil.rmtree(copy)
        shutil.copytree(source, copy)
        code, err, state = _render_full_with_enospc_at(copy, at, capsys)
        assert code == 1, (at, state["path"], err)
        assert "No space left on device while" in err, (at, state["path"], err)
        assert str(copy) in err and "Traceback" not in err, (at, err)


def test_render_full_on_a_full_disk_names_the_file_and_step(tmp_path: Path, capsys) -> None:
    # the lock, the first and the last file written
    _check_full_disk_render(tmp_path, capsys, lambda total: (1, 2, total))


@pytest.mark.slow
def test_render_full_names_the_file_and_step_at_every_write(tmp_path: Path, capsys) -> None:
    _check_full_disk_render(tmp_path, capsys, lambda total: range(1, total + 1))


def test_render_index_indexes_a_record_journalled_but_left_unindexed(
    tmp_path: Path, capsys
) -> None:
    history, shas = _history(tmp_path)
    # a registration cut short after its journal line (a full disk): no index rows
    with sqlite3.connect(history / "index.sqlite") as connection:
        seq = connection.execute("SELECT seq FROM records WHERE sha256 = ?", (shas[1],)).fetchone()
        for table, column in (("trials", "record_seq"), ("summaries", "record_seq")):
            connection.execute(f"DELETE FROM {table} WHERE {column} = ?", seq)
        connection.execute("DELETE FROM records WHERE seq = ?", seq)
    connection.close()
    capsys.readouterr()
    assert main(["history", "verify", "--history-dir", str(history)]) == 1
    assert shas[1] in capsys.readouterr().err
    assert main(["render", "index", "--history-dir", str(history)]) == 0
    assert "indexed 1 journalled records the index lacked" in capsys.readouterr().out
    assert main(["history", "verify", "--history-dir", str(history)]) == 0
    assert (history / "dashboard" / "records" / f"{shas[1]}.html").is_file()


def test_a_reader_waits_for_a_writer_and_readers_share(tmp_path: Path) -> None:
    from harness.history.layout import HistoryLayout
    from harness.history.lock import history_lock, reader_lock

    history, _ = _history(tmp_path, count=1)
    layout = HistoryLayout.at(history)
    with (
        history_lock(layout),
        pytest.raises(HistoryError, match="held the history lock"),
        reader_lock(layout, timeout=0.2),
    ):
        pass
    with reader_lock(layout), reader_lock(layout, timeout=0.2):
        pass  # two readers at once
