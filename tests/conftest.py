"""Shared test configuration: paths to shared fixtures and small helpers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_FIXTURES = REPO_ROOT.parent / "shared" / "fixtures"
# QUANTEM_ARINA_SMALL points elsewhere where ../shared does not exist (the device machine).
ARINA_SMALL = Path(os.environ.get("QUANTEM_ARINA_SMALL", SHARED_FIXTURES / "arina-small"))


@pytest.fixture(scope="session")
def arina_small() -> Path:
    if not (ARINA_SMALL / "fixture_master.h5").exists():
        pytest.skip(f"shared ARINA fixtures not found at {ARINA_SMALL}")
    return ARINA_SMALL


@pytest.fixture(autouse=True)
def _index_dir(tmp_path, monkeypatch):
    """Keep frame-index sidecars inside each test's folder, never in ~/.cache."""
    monkeypatch.setenv("QUANTEM_INDEX_DIR", str(tmp_path / "index"))


@pytest.fixture(autouse=True)
def _lock_dir(tmp_path, monkeypatch):
    """Host locks of runs started by a test go to its own folder (tests in parallel
    sessions on one machine must not wait for each other's demo storage lock)."""
    monkeypatch.setenv("HARNESS_LOCK_DIR", str(tmp_path / "host-locks"))
