"""Shared test configuration: paths to the repository's fixtures and small helpers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
#: ARINA files written by another project, with their known values (see its README).
ARINA_SMALL = REPO_ROOT / "tests" / "data" / "arina-small"


@pytest.fixture(scope="session")
def arina_small() -> Path:
    """The foreign ARINA fixtures; part of the repository, so never skipped."""
    return ARINA_SMALL


@pytest.fixture(scope="session")
def arina_known() -> dict:
    """The fixtures' documented values (``known_values.json``)."""
    return json.loads((ARINA_SMALL / "known_values.json").read_text())


@pytest.fixture(autouse=True)
def _index_dir(tmp_path, monkeypatch):
    """Keep frame-index sidecars inside each test's folder, never in ~/.cache."""
    monkeypatch.setenv("QUANTEM_INDEX_DIR", str(tmp_path / "index"))


@pytest.fixture(autouse=True)
def _lock_dir(tmp_path, monkeypatch):
    """Host locks of runs started by a test go to its own folder (tests in parallel
    sessions on one machine must not wait for each other's demo storage lock)."""
    monkeypatch.setenv("HARNESS_LOCK_DIR", str(tmp_path / "host-locks"))
