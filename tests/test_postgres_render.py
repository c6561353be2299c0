"""``render index --out DIR --history-url URL`` into a folder rendered before (issue 15):
only what was registered since is fetched and drawn, and the folder is then byte for
byte the one a whole render of the same server state gives in a new folder. When the
folder's copy no longer matches the server (another server, an edited or rebuilt
server, an edited folder, an unfinished render), everything is rendered again, with a
note saying why, and the result is again the whole render's; a record tampered with on
the server fails the render as it fails a whole one."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from _postgres import postgres_socket, postgres_url  # noqa: F401 (fixtures)

from harness.cli import main
from harness.errors import EXIT_OK
from harness.history.records import sha256_bytes
from harness.history.snapshot import META_SOURCE, SNAPSHOT_DIR, snapshot_path
from harness.report import dump_report
from harness.testing import make_example_report


def _report(folder: Path, seed: int, **fields) -> Path:
    created = f"2026-11-30T{8 + seed // 60:02d}:{seed % 60:02d}:00Z"
    doc = make_example_report(seed, reps=2, created_utc=created, **fields)
    path = folder / f"r{seed}.json"
    path.write_bytes(dump_report(doc))
    return path


def _register(url: str, *paths: Path) -> None:
    for path in paths:  # one at a time: one journal line each, in this order
        assert main(["history", "register", str(path), "--history-url", url]) == EXIT_OK


def _render(url: str, out: Path, repo: Path, capsys) -> tuple[str, str]:
    code = main(
        ["render", "index", "--out", str(out), "--history-url", url, "--git-repo", str(repo)]
    )
    captured = capsys.readouterr()
    assert code == EXIT_OK, captured.err
    return captured.out, captured.err


def _files(root: Path) -> dict[str, bytes]:
    """Every file of a rendered folder but its snapshot (whose bookkeeping may differ)."""
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and SNAPSHOT_DIR not in path.relative_to(root).parts
    }


def _assert_same_as_whole_render(url: str, out: Path, tmp_path: Path, capsys) -> None:
    fresh = tmp_path / f"fresh-{len(list(tmp_path.glob('fresh-*')))}"
    _render(url, fresh, tmp_path, capsys)
    held, whole = _files(out), _files(fresh)
    assert sorted(held) == sorted(whole)
    differing = [name for name in whole if held[name] != whole[name]]
    assert not differing, differing


@pytest.fixture
def server(postgres_url: str, tmp_path: Path) -> tuple[str, Path]:  # noqa: F811
    assert main(["history", "init-db", postgres_url]) == EXIT_OK
    reports = tmp_path / "reports"
    reports.mkdir()
    return postgres_url, reports


@pytest.mark.slow  # a server start
def test_a_rerender_fetches_only_what_is_new_and_equals_a_whole_render(
    server, tmp_path: Path, capsys
) -> None:
    from sqlalchemy import create_engine, text

    url, reports = server
    late_baseline = _report(reports, 40, backend="cuda")  # registered last
    _register(url, *(_report(reports, seed) for seed in range(3)))
    declares = _report(
        reports,
        3,
        slowdown=1.5,
        baseline={"sha256": sha256_bytes(late_baseline.read_bytes()), "path": None,
                  "regression_percent": 20.0},
    )  # fmt: skip
    _register(url, declares)
    out = tmp_path / "dash"
    stdout, _ = _render(url, out, tmp_path, capsys)
    assert "rendered every record" in stdout
    source = json.loads(
        sqlite3.connect(snapshot_path(out))
        .execute("SELECT value FROM index_meta WHERE key = ?", (META_SOURCE,))
        .fetchone()[0]
    )
    assert source["complete"] and source["journal_lines"] == 4 and source["records_count"] == 4
    page = out / "dashboard" / "records" / f"{sha256_bytes(declares.read_bytes())}.html"
    before = page.read_bytes()

    engine = create_engine(url)
    with engine.begin() as connection:  # a registration that failed used a seq up
        connection.execute(text("SELECT nextval('records_seq_seq')"))
    engine.dispose()
    # new records in an existing key and in a new one, and the late baseline, which
    # changes the page of the record that declared it
    _register(url, _report(reports, 4, slowdown=1.3), _report(reports, 5, backend="cuda"))
    _register(url, late_baseline)
    stdout, err = _render(url, out, tmp_path, capsys)
    assert "3 records new since the last render" in stdout, stdout
    assert "note:" not in err
    assert page.read_bytes() != before  # now compared with its baseline
    _assert_same_as_whole_render(url, out, tmp_path, capsys)

    stdout, _ = _render(url, out, tmp_path, capsys)  # nothing new: still the same
    assert "0 records new since the last render" in stdout
    _assert_same_as_whole_render(url, out, tmp_path, capsys)


def _superuser(url: str, *statements: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.begin() as connection:
        for statement in statements:
            connection.execute(text(statement))
    engine.dispose()


@pytest.mark.slow
@pytest.mark.parametrize(
    "change",
    [
        "journal-edited",
        "index-rebuilt",
        "folder-journal-edited",
        "render-unfinished",
        "other-options",
    ],
)
def test_a_folder_that_no_longer_matches_its_server_is_rendered_again_whole(
    server, tmp_path: Path, change: str, capsys
) -> None:
    url, reports = server
    _register(url, *(_report(reports, seed) for seed in range(3)))
    out = tmp_path / "dash"
    _render(url, out, tmp_path, capsys)
    _register(url, _report(reports, 3, slowdown=1.4))
    expected = {
        "journal-edited": "no longer begins with the 3 lines",
        "index-rebuilt": "rebuilt or edited since",
        "folder-journal-edited": "journal.jsonl: not the journal",
        "render-unfinished": "did not finish",
        "other-options": "other options",
    }[change]
    args = []
    if change == "journal-edited":
        _superuser(
            url,
            "ALTER TABLE evidence_journal DISABLE TRIGGER USER",
            "UPDATE evidence_journal SET line = convert_to(replace(convert_from(line, 'UTF8'), "
            "'r1.json', 'rX.json'), 'UTF8') WHERE seq = 2",
        )
    elif change == "index-rebuilt":
        assert main(["history", "rebuild", "--history-url", url]) == EXIT_OK
    elif change == "folder-journal-edited":
        journal = out / "journal.jsonl"
        journal.write_bytes(journal.read_bytes().replace(b"r1.json", b"rX.json"))
    elif change == "render-unfinished":  # as if killed between the update and its render
        connection = sqlite3.connect(snapshot_path(out))
        value = json.loads(
            connection.execute(
                "SELECT value FROM index_meta WHERE key = ?", (META_SOURCE,)
            ).fetchone()[0]
        )
        connection.execute(
            "UPDATE index_meta SET value = ? WHERE key = ?",
            (json.dumps({**value, "complete": False}), META_SOURCE),
        )
        connection.commit()
        connection.close()
    else:
        args = ["--no-plots"]
    command = [
        "render",
        "index",
        "--out",
        str(out),
        "--history-url",
        url,
        "--git-repo",
        str(tmp_path),
    ]
    code = main([*command, *args])
    captured = capsys.readouterr()
    assert code == EXIT_OK, captured.err
    assert "rendering everything again" in captured.err and expected in captured.err, captured.err
    assert "rendered every record" in captured.out
    if change == "other-options":  # rendered without plots now: the next one builds on it
        code = main([*command, *args])
        captured = capsys.readouterr()
        assert code == EXIT_OK and "0 records new since the last render" in captured.out
        return
    _assert_same_as_whole_render(url, out, tmp_path, capsys)


@pytest.mark.slow
def test_a_folder_rendered_from_another_server_mirrors_the_new_one(
    server,
    postgres_socket,  # noqa: F811
    tmp_path: Path,
    capsys,
) -> None:
    import uuid

    import psycopg

    url, reports = server
    _register(url, *(_report(reports, seed) for seed in range(3)))
    out = tmp_path / "dash"
    _render(url, out, tmp_path, capsys)
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(host=str(postgres_socket), user="harness", dbname="postgres",
                         autocommit=True) as connection:  # fmt: skip
        connection.execute(f'CREATE DATABASE "{name}"')
    other = f"postgresql+psycopg://harness@/{name}?host={postgres_socket}"
    try:
        assert main(["history", "init-db", other]) == EXIT_OK
        _register(other, _report(reports, 1), _report(reports, 7, backend="cuda"))
        _, err = _render(other, out, tmp_path, capsys)
        assert "rendering everything again" in err and "was rendered from" in err
        # the first server's records are gone from the folder: it mirrors the second
        _assert_same_as_whole_render(other, out, tmp_path, capsys)
        assert len(list((out / "records").rglob("*.json"))) == 2
    finally:
        with psycopg.connect(host=str(postgres_socket), user="harness", dbname="postgres",
                             autocommit=True) as connection:  # fmt: skip
            connection.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.mark.slow
def test_an_edited_record_file_in_the_folder_is_written_again(
    server, tmp_path: Path, capsys
) -> None:
    url, reports = server
    paths = [_report(reports, seed) for seed in range(3)]
    _register(url, *paths)
    out = tmp_path / "dash"
    _render(url, out, tmp_path, capsys)
    sha = sha256_bytes(paths[1].read_bytes())
    record = out / "records" / "sha256" / sha[:2] / f"{sha}.json"
    record.chmod(0o644)
    record.write_bytes(record.read_bytes().replace(b'"cold"', b'"warm"', 1))
    _register(url, _report(reports, 3))
    stdout, err = _render(url, out, tmp_path, capsys)
    assert f"{record}: not the server's bytes; written again" in err
    assert "1 records new since the last render" in stdout
    assert sha256_bytes(record.read_bytes()) == sha
    _assert_same_as_whole_render(url, out, tmp_path, capsys)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["held", "new"])
def test_a_record_tampered_with_on_the_server_fails_the_render(
    server, tmp_path: Path, which: str, capsys
) -> None:
    url, reports = server
    paths = [_report(reports, seed) for seed in range(3)]
    _register(url, *paths)
    out = tmp_path / "dash"
    _render(url, out, tmp_path, capsys)
    late = _report(reports, 3)
    _register(url, late)
    sha = sha256_bytes((paths[1] if which == "held" else late).read_bytes())
    _superuser(
        url,
        "ALTER TABLE evidence_records DISABLE TRIGGER USER",
        f"UPDATE evidence_records SET data = data || ' '::bytea WHERE sha256 = '{sha}'",
    )
    html = (out / "index.html").read_bytes()
    code = main(
        ["render", "index", "--out", str(out), "--history-url", url, "--git-repo", str(tmp_path)]
    )
    err = capsys.readouterr().err
    assert code != EXIT_OK
    assert f"record {sha} no longer matches its bytes" in err and "Traceback" not in err
    assert (out / "index.html").read_bytes() == html  # the dashboard is left as it was


@pytest.mark.slow
def test_a_first_render_with_pages_in_workers_equals_one_without(
    server, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first render hands record pages to worker processes while the records are
    still being exported (forked beside an open server transaction), each once its
    record and the baseline its index row names are in DIR; a page whose baseline comes
    later in the export waits for it, one whose record's bytes declare another baseline
    than its index row is deferred by the worker and written at the end, as is one
    whose baseline is not on the server. The folder is the one pages written in the
    render's own process after the copy give, and the snapshot holds exactly the
    server's index rows."""
    from sqlalchemy import create_engine, select

    import harness.history.snapshot as snapshot
    from harness.history.index_db import IndexMetaRow, RecordRow, SummaryRow, TrialRow
    from harness.render import record_pages

    url, reports = server
    late = _report(reports, 9, backend="cuda")
    after_it = _report(reports, 8, backend="cuda")  # registered after the one declaring it

    def declaring(seed: int, baseline: Path | bytes) -> Path:
        data = baseline if isinstance(baseline, bytes) else baseline.read_bytes()
        return _report(
            reports,
            seed,
            slowdown=1.4,
            baseline={"sha256": sha256_bytes(data), "path": None, "regression_percent": 20.0},
        )

    _register(url, late, *(_report(reports, seed) for seed in range(4)))
    _register(url, declaring(5, late), declaring(6, after_it), after_it)
    _register(url, declaring(7, b"never registered"))  # its baseline is not on the server
    mislabelled = declaring(10, late)
    _register(url, mislabelled)
    # the index row of one record no longer names the baseline its bytes declare
    _superuser(
        url,
        "UPDATE records SET baseline_sha256 = NULL WHERE sha256 = "
        f"'{sha256_bytes(mislabelled.read_bytes())}'",
    )
    monkeypatch.setattr(record_pages, "PARALLEL_PAGES", 10**9)
    alone = tmp_path / "alone"
    _render(url, alone, tmp_path, capsys)

    events = []
    copy_rows, submit, gather = (
        snapshot._copy_rows, record_pages.RecordPages._submit, record_pages.RecordPages._gather
    )  # fmt: skip

    def copying(connection, target, model, where=None):
        events.append(model.__tablename__)
        return copy_rows(connection, target, model, where)

    def submitting(self, chunk):
        events.append(("pages", [row[2:] for row in chunk]))
        return submit(self, chunk)

    def gathering(self):
        written, deferred = gather(self)
        events.append(("deferred", len(deferred)))
        return written, deferred

    monkeypatch.setattr(snapshot, "_copy_rows", copying)
    monkeypatch.setattr(snapshot, "_RECORDS_BATCH", 1)
    monkeypatch.setattr(record_pages.RecordPages, "_submit", submitting)
    monkeypatch.setattr(record_pages.RecordPages, "_gather", gathering)
    monkeypatch.setattr(record_pages, "PARALLEL_PAGES", 1)
    monkeypatch.setattr(record_pages, "PAGES_PER_TASK", 1)
    monkeypatch.setattr(record_pages, "render_processes", lambda: 2)
    workers = tmp_path / "workers"
    stdout, _ = _render(url, workers, tmp_path, capsys)
    assert "rendered every record" in stdout
    tables = [event for event in events if isinstance(event, str)]
    assert tables == ["index_meta", "records", "trials", "summaries"]
    assert isinstance(events[0], tuple) and events[0][0] == "pages"  # during the export
    handed = [row for event in events[: events.index("index_meta")] if event[0] == "pages"
              for row in event[1]]  # fmt: skip
    # 10 pages by the end of the export: 9 provisional ones, the one whose baseline is
    # not on the server as it is
    assert len(handed) == 10 and handed.count(()) == 1
    assert ("deferred", 1) in events  # the mislabelled record's page
    held, whole = _files(workers), _files(alone)
    assert sorted(held) == sorted(whole)
    assert [name for name in whole if held[name] != whole[name]] == []
    assert len([name for name in held if name.startswith("dashboard/records/")]) == 10

    engine = create_engine(url)
    local = sqlite3.connect(snapshot_path(workers))
    try:
        with engine.connect() as connection:
            for model in (RecordRow, TrialRow, SummaryRow):
                table = model.__table__
                order = ", ".join(c.name for c in table.primary_key.columns)
                names = ", ".join(c.name for c in table.columns)
                ours = local.execute(f"SELECT {names} FROM {table.name} ORDER BY {order}")
                theirs = connection.execute(
                    select(*table.columns).order_by(*table.primary_key.columns)
                )
                assert [tuple(r) for r in ours] == [tuple(r) for r in theirs], table.name
            meta = dict(connection.execute(select(IndexMetaRow.key, IndexMetaRow.value)).all())
        held_meta = dict(local.execute("SELECT key, value FROM index_meta"))
        assert all(held_meta[key] == value for key, value in meta.items())
    finally:
        local.close()
        engine.dispose()


@pytest.mark.slow
def test_a_first_render_writes_records_straight_and_the_next_repairs_a_partial_one(
    server, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first render writes each record file straight to its name (no temporary file
    renamed over it), which is not atomic: a render that dies part-way through a record
    leaves it truncated under its own name. The next render must not trust that folder:
    it takes a whole snapshot, which compares every record file with the server's bytes
    and replaces the truncated one (atomically), and the folder is then the one a whole
    render into a new folder gives."""
    import os

    import harness.history.snapshot as snapshot
    from harness.errors import HistoryError

    url, reports = server
    paths = [_report(reports, seed) for seed in range(3)]
    _register(url, *paths)
    out = tmp_path / "dash"
    renamed: list[str] = []
    real_replace = os.replace

    def replacing(source, target, *args, **kwargs):
        renamed.append(str(target))
        return real_replace(source, target, *args, **kwargs)

    monkeypatch.setattr(snapshot.os, "replace", replacing)
    write_new, written = snapshot._write_new_record, []

    def dying(path: str, data: bytes) -> bool:
        if len(written) == 1:  # the second record: half of it, then the render dies
            assert write_new(path, data[: len(data) // 2])
            written.append(path)
            raise HistoryError("killed part-way through a record")
        written.append(path)
        return write_new(path, data)

    monkeypatch.setattr(snapshot, "_write_new_record", dying)
    command = ["render", "index", "--out", str(out), "--history-url", url,
               "--git-repo", str(tmp_path)]  # fmt: skip
    assert main(command) != EXIT_OK
    assert "killed part-way" in capsys.readouterr().err
    partial = Path(written[1])
    sha = partial.name.removesuffix(".json")
    whole = next(p for p in paths if sha256_bytes(p.read_bytes()) == sha).read_bytes()
    assert 0 < partial.stat().st_size < len(whole)
    # the first record went straight to its name: nothing was renamed over a record
    assert Path(written[0]).is_file() and not [t for t in renamed if "/records/" in t]

    monkeypatch.setattr(snapshot, "_write_new_record", write_new)
    stdout, err = _render(url, out, tmp_path, capsys)
    assert "rendering everything again" in err and "rendered every record" in stdout, err
    assert sha256_bytes(partial.read_bytes()) == sha
    assert str(partial) in renamed  # replaced whole, not written into
    assert [t for t in renamed if "/records/sha256/" in t] == [str(partial)]
    _assert_same_as_whole_render(url, out, tmp_path, capsys)
    stdout, err = _render(url, out, tmp_path, capsys)  # and it is trusted from now on
    assert "0 records new since the last render" in stdout and "note:" not in err


@pytest.mark.slow
def test_a_whole_snapshot_has_the_schema_of_a_new_index_and_is_sound(
    server, tmp_path: Path, capsys
) -> None:
    """The snapshot's bulk copy runs without a rollback journal and builds the trials'
    and summaries' indexes after their rows: the file is then a sound SQLite database
    with every table and index a new index has, made by the same statements."""
    from harness.history.index_db import forget_index, open_index

    url, reports = server
    _register(url, *(_report(reports, seed) for seed in range(3)))
    out = tmp_path / "dash"
    _render(url, out, tmp_path, capsys)
    fresh = tmp_path / "fresh.sqlite"
    open_index(fresh).dispose()
    forget_index(fresh)
    schemas = []
    for path in (snapshot_path(out), fresh):
        connection = sqlite3.connect(path)
        try:
            schemas.append(
                sorted(connection.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))
            )
            assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        finally:
            connection.close()
    assert schemas[0] == schemas[1]
    assert any(row[:2] == ("index", "ix_trials_record_seq") for row in schemas[0])
