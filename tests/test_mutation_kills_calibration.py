"""Finding a stored calibration (harness/verdict/calibration_report.py): the exact
refusals of a named lookup. These kill survivors of the mutmut run over harness/verdict/
(tests/mutation-survivors.md)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

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
    null_from_document,
    register_calibration,
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
