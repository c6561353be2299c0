"""Registration: content addressing, no-op duplicates, refusal before writing, index and renders."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from harness.errors import HistoryError, ReportValidationError
from harness.history.index_db import INDEX_SCHEMA_VERSION
from harness.history.layout import HistoryLayout
from harness.history.rebuild import rebuild_history
from harness.history.store import register_reports
from harness.history.verify import verify_history
from harness.render import check_rendered, rebuild_renderer, registration_renderer
from harness.report import dump_report
from harness.testing import make_example_report, write_example_reports

FIXTURES = Path(__file__).parent / "report_fixtures"


def _files_under(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_records_are_named_by_sha256_and_read_only(tmp_path: Path) -> None:
    paths = write_example_reports(tmp_path / "in", [1, 2])
    results = register_reports(tmp_path / "h", paths, render=registration_renderer("defer"))
    layout = HistoryLayout.at(tmp_path / "h")
    for path, result in zip(paths, results):
        data = path.read_bytes()
        expected = hashlib.sha256(data).hexdigest()
        assert result.sha256 == expected and result.created
        record = layout.record_path(expected)
        assert record == tmp_path / "h" / "records" / "sha256" / expected[:2] / f"{expected}.json"
        assert record.read_bytes() == data
        assert stat.S_IMODE(record.stat().st_mode) == 0o444
    assert verify_history(tmp_path / "h").ok


def test_identical_bytes_are_a_no_op_that_says_so(tmp_path: Path) -> None:
    (path,) = write_example_reports(tmp_path / "in", [3])
    (first,) = register_reports(tmp_path / "h", [path], render=registration_renderer("defer"))
    before = _files_under(tmp_path / "h" / "records")
    journal = (tmp_path / "h" / "journal.jsonl").read_bytes()
    second, third = register_reports(
        tmp_path / "h", [path, path.read_bytes()], render=registration_renderer("defer")
    )
    assert first.created and not second.created and not third.created
    assert "already stored" in second.message and "nothing written" in second.message
    assert _files_under(tmp_path / "h" / "records") == before
    assert (tmp_path / "h" / "journal.jsonl").read_bytes() == journal


def test_changed_report_is_a_new_record(tmp_path: Path) -> None:
    doc = make_example_report(4)
    register_reports(tmp_path / "h", [dump_report(doc)], render=registration_renderer("defer"))
    doc["status"]["failures"] = ["note"]
    doc["status"]["correctness"] = "failed"
    (changed,) = register_reports(
        tmp_path / "h", [dump_report(doc)], render=registration_renderer("defer")
    )
    assert changed.created
    assert len(list(HistoryLayout.at(tmp_path / "h").iter_record_files())) == 2


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda data: data[: len(data) // 2], "truncated JSON"),
        (
            lambda data: data.replace(b'"execution":"completed"', b'"execution":"done"'),
            r"\$\.status\.execution",
        ),
        (lambda data: data.replace(b'"schema_version":1', b'"schema_version":7'), "upgrade"),
    ],
)
def test_bad_report_is_refused_before_anything_is_written(
    tmp_path: Path, mutate, expected: str
) -> None:
    good = dump_report(make_example_report(5))
    bad = tmp_path / "bad.json"
    bad.write_bytes(mutate(good))
    with pytest.raises(ReportValidationError, match=expected) as info:
        register_reports(tmp_path / "new-history", [good, bad])
    assert str(bad) in str(info.value)
    assert not (tmp_path / "new-history").exists()
    # and in an existing history nothing changes either
    register_reports(
        tmp_path / "h", [dump_report(make_example_report(6))], render=registration_renderer("defer")
    )
    before = _files_under(tmp_path / "h")
    with pytest.raises(ReportValidationError):
        register_reports(tmp_path / "h", [good, bad])
    assert _files_under(tmp_path / "h") == before


def test_older_report_is_stored_verbatim_and_indexed_migrated(tmp_path: Path) -> None:
    v0 = FIXTURES / "loading-report.v0.json"
    (result,) = register_reports(tmp_path / "h", [v0], render=registration_renderer("defer"))
    assert result.path.read_bytes() == v0.read_bytes()
    index = json.loads((tmp_path / "h" / "index.json").read_text())
    (entry,) = index["records"]
    assert entry["sha256"] == hashlib.sha256(v0.read_bytes()).hexdigest()
    assert entry["status"]["performance"] == "no_baseline"
    assert verify_history(tmp_path / "h").ok


def test_foreign_folder_and_newer_layout_are_refused(tmp_path: Path) -> None:
    report = dump_report(make_example_report(7))
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(HistoryError, match="not a history"):
        register_reports(foreign, [report])
    with pytest.raises(HistoryError, match="not a history"):
        verify_history(foreign, check_rendered=check_rendered)
    with pytest.raises(HistoryError, match="not a history"):
        rebuild_history(foreign)
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]  # not even a lock file
    register_reports(tmp_path / "h", [report], render=registration_renderer("defer"))
    (tmp_path / "h" / "history.json").write_text(
        '{"format": "quantem-harness/history", "version": 99}\n'
    )
    with pytest.raises(HistoryError, match="upgrade"):
        register_reports(tmp_path / "h", [report])


def test_existing_record_with_other_bytes_is_never_overwritten(tmp_path: Path) -> None:
    data = dump_report(make_example_report(8))
    (result,) = register_reports(tmp_path / "h", [data], render=registration_renderer("defer"))
    os.chmod(result.path, 0o644)
    result.path.write_bytes(data.replace(b"bench-host", b"evil-host"))
    with pytest.raises(HistoryError, match="differ from its SHA-256"):
        register_reports(tmp_path / "h", [data], render=registration_renderer("defer"))
    assert b"evil-host" in result.path.read_bytes()


def test_index_rows_and_cells_match_the_reports(tmp_path: Path) -> None:
    docs = [make_example_report(s, reps=3) for s in (9, 10)]
    register_reports(
        tmp_path / "h", [dump_report(d) for d in docs], render=registration_renderer("defer")
    )
    with sqlite3.connect(tmp_path / "h" / "index.sqlite") as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        (n_records,) = connection.execute("SELECT count(*) FROM records").fetchone()
        (n_trials,) = connection.execute("SELECT count(*) FROM trials").fetchone()
        seconds = sorted(r[0] for r in connection.execute("SELECT seconds FROM trials"))
        storage = connection.execute(
            "SELECT DISTINCT storage_id, backend, correctness FROM records"
        ).fetchall()
    assert n_records == 2
    assert n_trials == sum(len(d["trials"]) for d in docs)
    assert seconds == sorted(t["seconds"] for d in docs for t in d["trials"])
    assert storage == [("test-nvme", "cpu", "passed")]


def test_incremental_renders_equal_a_full_rebuild(tmp_path: Path) -> None:
    history = tmp_path / "h"
    for seed in range(5):
        created = f"2026-11-30T08:0{seed}:00Z"
        register_reports(
            history,
            [dump_report(make_example_report(seed, created_utc=created))],
            render=registration_renderer("defer"),
        )
    incremental = {n: (history / n).read_bytes() for n in ("index.json", "timings.csv")}
    rebuild_history(history, render=rebuild_renderer(plots=False))
    assert {n: (history / n).read_bytes() for n in incremental} == incremental
    csv_lines = incremental["timings.csv"].decode().splitlines()
    assert len(csv_lines) == 1 + 5 * 40


def test_timings_csv_is_rewritten_when_its_bookkeeping_does_not_match(tmp_path: Path) -> None:
    history = tmp_path / "h"
    register_reports(
        history, [dump_report(make_example_report(1))], render=registration_renderer("defer")
    )
    (history / "timings.csv").write_text("garbage\n")
    register_reports(
        history, [dump_report(make_example_report(2))], render=registration_renderer("defer")
    )
    lines = (history / "timings.csv").read_text().splitlines()
    assert lines[0].startswith("record_sha256,") and len(lines) == 1 + 2 * 40
    assert verify_history(history, check_rendered=check_rendered).ok


def test_old_index_without_migration_is_rebuilt_newer_is_refused(tmp_path: Path) -> None:
    history = tmp_path / "h"
    register_reports(
        history, [dump_report(make_example_report(1))], render=registration_renderer("defer")
    )
    with sqlite3.connect(history / "index.sqlite") as connection:
        connection.execute("UPDATE index_meta SET value='0' WHERE key='schema_version'")
        connection.execute("DELETE FROM trials")
    register_reports(
        history, [dump_report(make_example_report(2))], render=registration_renderer("defer")
    )
    with sqlite3.connect(history / "index.sqlite") as connection:
        version = connection.execute(
            "SELECT value FROM index_meta WHERE key='schema_version'"
        ).fetchone()[0]
        (n_trials,) = connection.execute("SELECT count(*) FROM trials").fetchone()
    assert int(version) == INDEX_SCHEMA_VERSION and n_trials == 2 * 40
    with sqlite3.connect(history / "index.sqlite") as connection:
        connection.execute("UPDATE index_meta SET value='99' WHERE key='schema_version'")
    with pytest.raises(HistoryError, match="newer than this harness"):
        register_reports(
            history, [dump_report(make_example_report(3))], render=registration_renderer("defer")
        )


def test_plots_are_drawn_per_comparison_key(tmp_path: Path) -> None:
    history = tmp_path / "h"
    results = register_reports(
        history,
        [
            dump_report(make_example_report(1)),
            dump_report(make_example_report(2, storage_id="other")),
        ],
        render=registration_renderer(),
    )
    keys = {r.comparison_key for r in results}
    assert len(keys) == 2
    for key in keys:
        png = history / "plots" / f"{key}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"(plots/{key}.png)" in (history / "README.md").read_text()
    assert (
        verify_history(history, check_rendered=check_rendered).ok
        and not verify_history(history, check_rendered=check_rendered).warnings
    )


def test_deferred_plots_are_pending_until_rendered(tmp_path: Path) -> None:
    from harness.cli import main

    history = tmp_path / "h"
    (result,) = register_reports(
        history, [dump_report(make_example_report(1))], render=registration_renderer("defer")
    )
    readme = (history / "README.md").read_text()
    assert "pending" in readme
    warnings = verify_history(history, check_rendered=check_rendered).warnings
    assert [w.kind.value for w in warnings] == ["plot-pending"]
    assert main(["render", "index", "--history-dir", str(history)]) == 0
    assert (history / "plots" / f"{result.comparison_key}.png").exists()
    assert "pending" not in (history / "README.md").read_text()
    assert not verify_history(history, check_rendered=check_rendered).problems


def test_auto_plots_are_drawn_for_small_groups_and_deferred_for_large_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.render import update as render

    monkeypatch.setattr(render, "PLOT_INLINE_RECORDS", 2)
    history = tmp_path / "h"
    stamps = ("2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z")
    reports = [
        dump_report(make_example_report(seed, created_utc=created))
        for seed, created in zip((1, 2, 3), stamps)
    ]
    results = register_reports(history, reports[:2], render=registration_renderer())  # "auto"
    (key,) = {r.comparison_key for r in results}
    png = history / "plots" / f"{key}.png"
    drawn = png.read_bytes()
    assert drawn[:8] == b"\x89PNG\r\n\x1a\n"
    assert "pending" not in (history / "README.md").read_text()
    register_reports(
        history, reports[2:], render=registration_renderer()
    )  # the group now holds 3 > 2 records
    assert png.read_bytes() == drawn  # not redrawn ...
    assert "pending" in (history / "README.md").read_text()  # ... and said so
    assert [
        w.kind.value for w in verify_history(history, check_rendered=check_rendered).warnings
    ] == ["plot-pending"]
    register_reports(
        history, [dump_report(make_example_report(4))], render=registration_renderer("now")
    )
    assert png.read_bytes() != drawn
    assert "pending" not in (history / "README.md").read_text()


def test_unknown_plot_policy_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="plots must be one of"):
        register_reports(
            tmp_path / "h",
            [dump_report(make_example_report(1))],
            render=registration_renderer("sometimes"),
        )
    assert not (tmp_path / "h").exists()
