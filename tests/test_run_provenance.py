"""Provenance: module records, foreign-checkout refusal, source fingerprints, git state."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from harness.errors import SourceStabilityError
from harness.run import provenance
from harness.run.trials import classify_trial


def _git(cwd, *args):
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True)


@pytest.fixture
def checkout(tmp_path):
    repo = tmp_path / "checkout"
    (repo / "quantem").mkdir(parents=True)
    (repo / "quantem" / "__init__.py").write_text("X = 1\n")
    (repo / "harness").mkdir()
    (repo / "harness" / "__init__.py").write_text("")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    return repo


def test_modules_are_recorded_with_hashes():
    modules = provenance.collect_modules()
    names = {m["name"] for m in modules}
    assert "harness.run.provenance" in names
    record = next(m for m in modules if m["name"] == "harness.run.provenance")
    assert record["sha256"] == provenance.sha256_file(provenance.__file__)


def test_modules_from_another_checkout_are_refused(checkout, monkeypatch):
    fake = types.ModuleType("quantem._foreign_for_test")
    fake.__file__ = str(checkout / "quantem" / "__init__.py")
    monkeypatch.setitem(sys.modules, "quantem._foreign_for_test", fake)
    measured = provenance.parse_measured_checkout()
    with pytest.raises(SourceStabilityError, match="outside the measured checkout"):
        provenance.check_module_origins(provenance.collect_modules(), measured)


def test_running_from_a_different_checkout_is_refused(checkout):
    with pytest.raises(SourceStabilityError, match="working directory is in checkout"):
        provenance.parse_measured_checkout(cwd=checkout)


def test_fingerprint_changes_with_any_source_edit(checkout):
    before = provenance.compute_source_fingerprint(checkout)
    assert provenance.compute_source_fingerprint(checkout) == before
    (checkout / "quantem" / "__init__.py").write_text("X = 2\n")
    edited = provenance.compute_source_fingerprint(checkout)
    assert edited != before
    (checkout / "harness" / "new.py").write_text("")
    assert provenance.compute_source_fingerprint(checkout) != edited
    (checkout / "harness" / "__pycache__").mkdir()
    (checkout / "harness" / "__pycache__" / "x.pyc").write_bytes(b"1")
    assert provenance.compute_source_fingerprint(checkout) == provenance.compute_source_fingerprint(
        checkout
    )


def test_git_state_dirty_flag_and_diff_hash(checkout):
    clean = provenance.collect_git_state(checkout)
    assert clean["git_dirty"] is False
    assert len(clean["git_revision"]) == 40
    (checkout / "untracked.txt").write_text("new")
    dirty = provenance.collect_git_state(checkout)
    assert dirty["git_dirty"] is True
    assert dirty["diff_sha256"] != clean["diff_sha256"]
    (checkout / "untracked.txt").write_text("other content")
    assert provenance.collect_git_state(checkout)["diff_sha256"] != dirty["diff_sha256"]


def test_tracker_reports_change_during_run(checkout, monkeypatch):
    # the imported modules live in the real checkout; this test measures the fake one
    monkeypatch.setattr(provenance, "collect_modules", lambda: [])
    tracker = provenance.SourceTracker(checkout).start()
    section, stable = tracker.finish()
    assert stable and section["source_fingerprint_start"] == section["source_fingerprint_end"]
    (checkout / "quantem" / "__init__.py").write_text("X = 3\n")
    section, stable = tracker.finish()
    assert not stable
    assert section["source_fingerprint_start"] != section["source_fingerprint_end"]


def test_not_a_git_checkout(tmp_path):
    state = provenance.collect_git_state(tmp_path)
    assert state == {"git_revision": None, "git_dirty": True, "diff_sha256": None}


@pytest.mark.parametrize(
    ("state", "residency", "read", "expected"),
    [
        ("cold", 0.0, 1000, ("cold", True)),
        ("cold", 0.0, 900, ("cold", True)),
        ("cold", 0.0, 899, ("not-cold", False)),
        ("cold", 0.011, 1000, ("not-cold", False)),
        ("cached", 1.0, 0, ("cached", True)),
        ("cached", 1.0, 101, ("not-cached", False)),
        ("cached", 0.98, 0, ("not-cached", False)),
    ],
)
def test_classify_trial(state, residency, read, expected):
    assert classify_trial(state, residency, read, 1000) == expected


def test_cli_refuses_code_from_another_checkout(tmp_path):
    """A copy of quantem in the working directory shadows the measured checkout: refused."""
    import shutil

    repo = Path(__file__).resolve().parents[1]
    other = tmp_path / "other-checkout"
    shutil.copytree(
        repo / "quantem", other / "quantem", ignore=shutil.ignore_patterns("__pycache__")
    )
    _git(other, "init", "-q")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            "io-scale",
            "--demo",
            "--history-dir",
            str(tmp_path / "h"),
        ],
        cwd=other,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    assert "refusing to run" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "h").exists()


def test_cuda_kernel_provenance_is_recorded_and_schema_valid(checkout, monkeypatch):
    import quantem.stem4d.cuda.module_loader as loader
    from harness.report import validate_report
    from harness.testing import make_example_report

    monkeypatch.setattr(provenance, "collect_modules", lambda: [])
    monkeypatch.setattr(loader, "_provenance", {})
    tracker = provenance.SourceTracker(checkout).start()
    section, _ = tracker.finish()
    assert section["cuda_kernels"] == []  # nothing compiled or loaded: an empty list
    records = {
        ("lz4.cu", "k2", 0): {
            "file": "lz4.cu",
            "key": "k2",
            "path": "nvrtc",
            "reason": "no fatbin for this specialisation",
            "device_capability": 90,
        },
        ("bitshuffle.cu", "k1", 0): {
            "file": "bitshuffle.cu",
            "key": "k1",
            "path": "fatbin",
            "binary": "bitshuffle-k1.fatbin",
            "binary_sha256": "ab" * 32,
            "device_capability": 90,
        },
    }
    monkeypatch.setattr(loader, "_provenance", records)
    section, _ = tracker.finish()
    assert [(k["file"], k["path"]) for k in section["cuda_kernels"]] == [
        ("bitshuffle.cu", "fatbin"),
        ("lz4.cu", "nvrtc"),
    ]
    doc = make_example_report(0)
    doc["provenance"]["cuda_kernels"] = section["cuda_kernels"]
    validate_report(doc)
    doc["provenance"]["cuda_kernels"][0]["path"] = "jit"  # not a path the loader takes
    with pytest.raises(Exception, match="jit"):
        validate_report(doc)


def test_quantem_environment_is_recorded_and_schema_valid(checkout, monkeypatch):
    """The QUANTEM_* variables that choose what runs (QUANTEM_RANS_KERNEL: the rANS kernel)
    are part of the record; other variables are not."""
    from harness.report import validate_report
    from harness.testing import make_example_report

    monkeypatch.setattr(provenance, "collect_modules", lambda: [])
    for name in [k for k in os.environ if k.startswith("QUANTEM_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("QUANTEM_RANS_KERNEL", "v1")
    monkeypatch.setenv("QUANTEMX_OTHER", "no")
    section, _ = provenance.SourceTracker(checkout).start().finish()
    assert section["quantem_environment"] == {"QUANTEM_RANS_KERNEL": "v1"}
    doc = make_example_report(0)
    doc["provenance"]["quantem_environment"] = section["quantem_environment"]
    validate_report(doc)
    doc["provenance"]["quantem_environment"]["QUANTEM_RANS_KERNEL"] = 1  # not a string
    with pytest.raises(Exception, match="not of type 'string'"):
        validate_report(doc)


def test_revision_is_verified_against_the_fingerprint_of_a_clean_tree(checkout):
    hashes = provenance.collect_source_hashes(checkout)
    revision = provenance.collect_git_state(checkout)["git_revision"]
    assert provenance.is_revision_verified(checkout, revision, hashes) is True
    (checkout / "harness" / "new.py").write_text("")
    assert not provenance.is_revision_verified(
        checkout, revision, provenance.collect_source_hashes(checkout)
    )


def test_a_stale_git_that_looks_clean_is_not_trusted(checkout, monkeypatch):
    """A tree copied with an older ``.git`` whose stat cache still matches: git calls it
    clean and names its HEAD, but that commit is not the code that ran."""
    source = checkout / "quantem" / "__init__.py"
    old = 1_000_000_000
    os.utime(source, (old, old))
    _git(checkout, "update-index", "--refresh")
    source.write_text("X = 2\n")  # same size and mtime: the index cannot tell
    os.utime(source, (old, old))
    state = provenance.collect_git_state(checkout)
    assert state["git_dirty"] is False
    monkeypatch.setattr(provenance, "collect_modules", lambda: [])
    tracker = provenance.SourceTracker(checkout).start()
    assert tracker.git_state["git_revision"] == state["git_revision"]
    assert tracker.git_state["git_revision_verified"] is False
    source.touch()
    _git(checkout, "add", ".")
    _git(checkout, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "real")
    assert provenance.SourceTracker(checkout).start().git_state["git_revision_verified"] is True
