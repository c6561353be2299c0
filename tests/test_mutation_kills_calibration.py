"""Finding a stored calibration (harness/verdict/calibration_report.py): the exact
refusals of a named lookup. These kill survivors of the mutmut run over harness/verdict/
(tests/mutation-survivors.md)."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from harness.comparability import comparison_key
from harness.errors import HistoryError, ReportValidationError, UsageError
from harness.history.folder_history import FolderHistory
from harness.history.records import sha256_bytes
from harness.history.store import register_reports
from harness.render import registration_renderer
from harness.report import dump_report
from harness.testing import make_example_report
from harness.verdict.calibration import CalibratedNull
from harness.verdict.calibration_report import (
    build_calibration,
    dump_calibration,
    find_calibration,
    iter_calibrations,
    null_from_document,
    parse_calibration,
    register_calibration,
    resolve_calibration,
    store_calibration,
    validate_calibration,
)


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    folder = tmp_path_factory.mktemp("calibrated")
    history = folder / "h"
    paths = []
    for seed in range(6):
        path = folder / f"aa{seed}.json"
        path.write_bytes(dump_report(make_example_report(seed, reps=3, noise=0.02)))
        paths.append(path)
    results = register_reports(history, paths, render=registration_renderer("defer"))
    runs = [(json.loads(p.read_bytes()), r.sha256) for p, r in zip(paths, results, strict=True)]
    doc = build_calibration(runs, regression_percent=20, alpha=0.05, command=["test"])
    return history, register_calibration(history, dump_calibration(doc))


def test_a_named_calibration_is_found_with_its_label(stored):
    history, calibration = stored
    key = calibration.doc["comparison_key"]
    found, note = find_calibration(history, prefix=calibration.sha256[:10].upper(), key=key)
    assert (found.sha256, found.path, found.doc) == (
        calibration.sha256,
        calibration.path,
        calibration.doc,
    )
    assert note == "named with --calibration"


def test_a_named_lookup_refuses_exactly(stored, tmp_path):
    history, calibration = stored
    key = calibration.doc["comparison_key"]
    with pytest.raises(UsageError) as info:
        find_calibration(history, prefix="zz", key=key)
    assert str(info.value) == (
        "calibration 'zz': no such report file, and not a SHA-256 prefix (4 to 64 hex digits)"
    )
    missing = tmp_path / "nothing-here"
    with pytest.raises(HistoryError) as info:
        find_calibration(missing, prefix="abcd", key=key)
    assert str(info.value) == f"{missing}: no such history folder"
    other = "0000" if not calibration.sha256.startswith("0000") else "ffff"
    with pytest.raises(UsageError) as info:
        find_calibration(history, prefix=other, key=key)
    assert str(info.value) == (
        f"calibration {other}: no record in {history} (calibrations) starts with {other}"
    )
    with pytest.raises(UsageError) as info:
        find_calibration(history, prefix=calibration.sha256[:8], key="0" * 16)
    assert str(info.value) == (
        f"calibration {calibration.sha256[:12]} is for comparison key {key}, not this "
        f"comparison's {'0' * 16}"
    )


def test_a_tampered_or_invalid_named_calibration_is_named(stored, tmp_path):
    history, calibration = stored
    copy = tmp_path / "h"
    shutil.copytree(history, copy)
    label = Path(str(calibration.path).replace(str(history), str(copy), 1))
    os.chmod(label, 0o644)
    label.write_bytes(label.read_bytes() + b" ")
    key = calibration.doc["comparison_key"]
    with pytest.raises(HistoryError) as info:
        find_calibration(copy, prefix=calibration.sha256[:12], key=key)
    assert str(info.value) == (f"{label}: calibration bytes no longer match their name (tampered)")
    # bytes that match their name but are no calibration: named by their label
    invalid = b'{"schema": "something-else"}'
    name = Path(FolderHistory(copy).calibration_label(sha256_bytes(invalid)))
    name.parent.mkdir(parents=True, exist_ok=True)
    name.write_bytes(invalid)
    with pytest.raises(ReportValidationError) as info:
        find_calibration(copy, prefix=sha256_bytes(invalid)[:12], key=key)
    assert str(info.value) == f"{name}: not a calibration report (schema 'something-else')"


KEY = ("scan-a", "hdf5", "cold")
STAMP = "2026-12-05T00:00:00Z"
RUNS = [[1.0 + 0.01 * ((i * 7 + j) % 5 - 2) for j in range(3)] for i in range(6)]


def test_calibrated_p_values_count_ties_by_the_add_one_rule():
    null = CalibratedNull({KEY: RUNS}, draws_per_pair=4)
    ratios = null.null_ratios(KEY, 3, 3)
    m = ratios.size
    assert null.smallest_p(KEY, 3, 3) == 1.0 / (1 + m)
    assert null.p_slower(KEY, float(ratios.max()) * 2, 3, 3) == 1.0 / (1 + m)
    for ratio in (float(np.median(ratios)), float(ratios.min()), float(ratios.max())):
        assert ratio in ratios  # a tie: the observed ratio is one of the null's
        assert null.p_slower(KEY, ratio, 3, 3) == (1 + np.sum(ratios >= ratio)) / (1 + m)
        assert null.p_faster(KEY, ratio, 3, 3) == (1 + np.sum(ratios <= ratio)) / (1 + m)


def test_a_stored_calibration_gives_back_its_null(stored):
    _, calibration = stored
    doc = dict(calibration.doc, seed=12345, draws_per_pair=7)
    null = null_from_document(doc)
    assert (null.seed, null.draws_per_pair) == (12345, 7)
    cell = doc["cells"][0]
    key = (cell["acquisition"], cell["format"], cell["cache_state"])
    again = CalibratedNull({key: cell["runs_seconds"]}, draws_per_pair=7, seed=12345)
    np.testing.assert_array_equal(null.null_ratios(key, 3, 3), again.null_ratios(key, 3, 3))


def _runs(n: int = 6, noise: float = 0.02) -> list[tuple[dict, str]]:
    return [
        (make_example_report(seed, reps=3, noise=noise), f"{seed:x}" * 64)
        for seed in range(1, n + 1)
    ]


def _build(runs, **options):
    return build_calibration(runs, regression_percent=20, alpha=0.05, command=["c"], **options)


def test_build_calibration_refuses_exactly():
    with pytest.raises(UsageError) as info:
        _build(_runs(4))
    assert str(info.value) == "a calibration needs at least 5 runs, not 4"
    assert len(_build(_runs(5))["runs"]) == 5  # five is enough
    runs = _runs()
    runs[1][0]["status"]["source_stability"] = "unstable"
    with pytest.raises(ReportValidationError) as info:
        _build(runs)
    assert str(info.value) == f"calibration run {'2' * 12} did not pass: {runs[1][0]['status']}"
    runs = _runs()
    runs[1] = (make_example_report(2, reps=3, storage_id="other"), "2" * 64)
    with pytest.raises(ReportValidationError) as info:
        _build(runs)
    key, odd = comparison_key(runs[0][0]), comparison_key(runs[1][0])
    assert str(info.value) == f"calibration run {'2' * 12} has comparison key {odd}, not {key}"
    runs = _runs()
    runs[3] = (make_example_report(4, reps=4), "4" * 64)
    with pytest.raises(ReportValidationError) as info:
        _build(runs)
    assert str(info.value) == "calibration runs differ in reps: [3, 4]"


def test_build_calibration_records_its_seed_draws_command_and_time(monkeypatch):
    runs = _runs(noise=0.4)  # noisy: some A/A ratios pass the 20% threshold
    doc = _build(runs, seed=7, draws_per_pair=9, created_utc="2026-12-05T00:00:00Z")
    assert (doc["seed"], doc["draws_per_pair"], doc["created_utc"]) == (
        7,
        9,
        "2026-12-05T00:00:00Z",
    )
    null = null_from_document(doc)
    independent = CalibratedNull({k: v for k, v in null.runs.items()}, draws_per_pair=9, seed=7)
    per_cell, _ = independent.false_positive_rates(3, 3, threshold_percent=20, alpha=0.05)
    for cell in doc["cells"]:
        key = (cell["acquisition"], cell["format"], cell["cache_state"])
        ratios = independent.null_ratios(key, 3, 3)
        assert cell["ratio_quantiles"]["0.5"] == float(np.quantile(ratios, 0.5))
        assert (cell["false_positive_rule"], cell["false_positive_verdict"]) == per_cell[key]
    assert any(cell["false_positive_rule"] > 0 for cell in doc["cells"])
    assert _build(runs, created_utc="T")["command"] == ["c"]
    assert build_calibration(
        runs, regression_percent=20, alpha=0.05, command=["a", 2], created_utc="T"
    )["command"] == ["a", "2"]
    monkeypatch.setenv("TZ", "Asia/Tokyo")  # a local time 9 hours off UTC
    time.tzset()
    try:
        created = _build(runs)["created_utc"]
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    now = datetime.datetime.now(datetime.timezone.utc)
    stamp = datetime.datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ")
    assert abs(now.replace(tzinfo=None) - stamp) < datetime.timedelta(minutes=5)


def test_a_cell_some_runs_lack_is_kept_and_an_unusable_one_skipped():
    runs = _runs()
    first, last = ("scan-a", "hdf5", "cached"), ("scan-b", "qem", "cold")

    def drop(doc, cell):
        doc["trials"] = [
            t for t in doc["trials"] if (t["acquisition"], t["format"], t["cache_state"]) != cell
        ]

    for doc, _ in runs[1:]:
        drop(doc, first)  # in one run only: unusable, and first in order
    drop(runs[-1][0], last)  # missing from the last run only
    doc = _build(runs, created_utc="T")
    cells = {(c["acquisition"], c["format"], c["cache_state"]): c for c in doc["cells"]}
    assert first not in cells and len(cells) == 7
    assert cells[last]["runs_seconds"][-1] == [] and len(cells[last]["runs_seconds"]) == 6


def test_calibration_bytes_are_deterministic_compact_ascii_and_finite():
    doc = _build(_runs(), created_utc=STAMP)
    doc["command"] = ["é", "b"]
    data = dump_calibration(doc)
    assert data.endswith(b"}\n") and data.count(b"\n") == 1
    text = data.decode("ascii")  # é escaped
    assert '"command":["\\u00e9","b"]' in text  # compact separators
    keys = [k for k in json.loads(text)]
    assert keys == sorted(keys) and text.startswith('{"alpha":')
    doc["cells"][0]["noise_floor_percent"] = float("nan")
    with pytest.raises(ValueError):
        dump_calibration(doc)


def test_parse_calibration_names_the_file_and_what_is_wrong():
    doc = _build(_runs(), created_utc=STAMP)
    with pytest.raises(ReportValidationError) as info:
        parse_calibration(b"[1]", name="cal.json")
    assert str(info.value) == "cal.json: $: a report is a JSON object, not list"
    with pytest.raises(ReportValidationError) as info:
        parse_calibration(json.dumps({"schema": "x"}).encode(), name="cal.json")
    assert str(info.value) == "cal.json: not a calibration report (schema 'x')"
    newer = dict(doc, schema_version=doc["schema_version"] + 1)
    with pytest.raises(ReportValidationError) as info:
        parse_calibration(json.dumps(newer).encode(), name="cal.json")
    assert str(info.value) == (
        f"cal.json: calibration schema_version {doc['schema_version'] + 1} is newer than this "
        f"harness reads ({doc['schema_version']}); upgrade quantem-harness"
    )
    broken = json.loads(json.dumps(doc))
    broken["cells"][1]["runs_seconds"][2] = "slow"
    with pytest.raises(ReportValidationError) as info:
        parse_calibration(json.dumps(broken).encode(), name="cal.json")
    assert str(info.value).startswith("cal.json: $.cells[1].runs_seconds[2]: 'slow' is not of")
    with pytest.raises(ReportValidationError) as info:
        validate_calibration(broken)
    assert str(info.value).startswith("calibration: $.cells[1].runs_seconds[2]: ")
    broken["command"] = ["x" * 400]
    broken["cells"][1]["runs_seconds"][2] = 1.0
    broken["reps"] = "x" * 400
    with pytest.raises(ReportValidationError) as info:
        validate_calibration(broken)
    assert len(str(info.value).split(": ", 2)[2]) == 300  # the message cut at 300


def test_storing_a_calibration_returns_what_was_stored(tmp_path):
    doc = _build(_runs(), created_utc=STAMP)
    data = dump_calibration(doc)
    history = FolderHistory(tmp_path / "h")
    register_reports(tmp_path / "h", [], render=registration_renderer("defer"))
    first = store_calibration(history, data)
    assert (first.doc, first.created) == (doc, True)
    assert store_calibration(history, data).created is False
    with pytest.raises(ReportValidationError) as info:
        store_calibration(history, b'{"schema": "x"}')
    assert str(info.value) == "calibration: not a calibration report (schema 'x')"


def test_the_calibration_records_each_runs_revision_and_the_overall_rates():
    runs = _runs(noise=0.4)
    runs[2][0]["provenance"]["git_revision"] = "f" * 40
    doc = _build(runs, created_utc=STAMP)
    assert [r["git_revision"] for r in doc["runs"]][1:3] == [
        runs[1][0]["provenance"]["git_revision"],
        "f" * 40,
    ]
    null = null_from_document(doc)
    _, (rule, verdict) = null.false_positive_rates(3, 3, threshold_percent=20, alpha=0.05)
    assert rule > verdict  # the comparison's two rates differ here
    assert doc["comparison"] == {"false_positive_rule": rule, "false_positive_verdict": verdict}
    assert CalibratedNull({KEY: [[1.0]]}).false_positive_rates(
        3, 3, threshold_percent=20, alpha=0.05
    ) == ({}, (0.0, 0.0))


def test_stored_calibrations_list_oldest_first_and_skip_an_invalid_one(tmp_path, capsys):
    register_reports(tmp_path / "h", [], render=registration_renderer("defer"))
    history = FolderHistory(tmp_path / "h")
    runs = _runs()
    stored = [
        store_calibration(history, dump_calibration(_build(runs, created_utc=stamp)))
        for stamp in ("2026-12-05T02:00:00Z", "2026-12-05T01:00:00Z")
    ]
    first = min(c.sha256 for c in stored)
    invalid = next(
        data for k in range(10_000) if sha256_bytes(data := b'{"schema": "x", "k": %d}' % k) < first
    )
    label = Path(history.calibration_label(sha256_bytes(invalid)))
    label.parent.mkdir(parents=True, exist_ok=True)
    label.write_bytes(invalid)  # stored by hand: its bytes match its name
    found = iter_calibrations(tmp_path / "h")
    assert [(c.sha256, c.path) for c in found] == [(c.sha256, c.path) for c in stored[::-1]]
    assert capsys.readouterr().err == (
        f"warning: skipped {label}: not a calibration report (schema 'x') "
        "(history verify names it)\n"
    )


def test_a_calibration_file_is_read_from_its_path(stored, tmp_path):
    _, calibration = stored
    path = tmp_path / "cal.json"
    path.write_bytes(calibration.path.read_bytes())
    key = calibration.doc["comparison_key"]
    found, note = find_calibration(None, prefix=str(path), key=key)
    assert (found.sha256, found.path, found.doc, note) == (
        calibration.sha256,
        path,
        calibration.doc,
        "named with --calibration",
    )


def test_a_lookup_without_a_history_or_with_a_bad_file_says_why(tmp_path):
    assert find_calibration(None, prefix=None, key="k") == (
        None,
        "no history to look calibrations up in",
    )
    with pytest.raises(UsageError) as info:
        find_calibration(None, prefix="abcd", key="k")
    assert str(info.value) == "--calibration needs --history-dir (where calibrations are stored)"
    path = tmp_path / "bad.json"
    path.write_bytes(b'{"schema": "x"}')
    with pytest.raises(ReportValidationError) as info:
        find_calibration(None, prefix=str(path), key="k")
    assert str(info.value) == f"{path}: not a calibration report (schema 'x')"


def test_what_a_comparison_records_of_its_calibration(stored):
    history, calibration = stored
    doc = calibration.doc
    report = make_example_report(1, reps=3, noise=0.02)
    newest = resolve_calibration(history, None, report)
    assert (newest.sha256, newest.runs, newest.reps, newest.created_utc, newest.note) == (
        calibration.sha256,
        len(doc["runs"]),
        doc["reps"],
        doc["created_utc"],
        "the most recent matching calibration",
    )
    named = resolve_calibration(history, calibration.sha256[:12], report)
    assert (named.sha256, named.note) == (calibration.sha256, "named with --calibration")
    none = resolve_calibration(None, None, report)
    assert (none.sha256, none.note) == (None, "no history to look calibrations up in")
