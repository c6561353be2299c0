"""A device copy's git dir made by tools/make_devgit.sh holds HEAD's trees but no file
contents: verifying the revision must say "cannot tell", not crash the run (it raised an
IndexError through the CLI on the device), and a `git add -A` there completes it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from harness.run.fingerprint import collect_source_hashes
from harness.run.git_state import collect_revision_hashes, is_revision_verified

REPO = Path(__file__).resolve().parents[1]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_trees_only_git_dir_is_unverified_then_complete(tmp_path):
    origin = tmp_path / "origin"
    (origin / "harness").mkdir(parents=True)
    (origin / "harness" / "a.py").write_text("x = 1\n")
    (origin / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    git(origin, "init", "-q")
    git(origin, "add", "-A")
    git(origin, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = git(origin, "rev-parse", "HEAD")
    subprocess.run(["bash", str(REPO / "tools" / "make_devgit.sh")], cwd=origin, check=True,
                   capture_output=True)  # fmt: skip
    copy = tmp_path / "copy"
    shutil.copytree(origin, copy, ignore=shutil.ignore_patterns(".git", ".devgit"))
    shutil.move(origin / ".devgit", copy / ".git")
    git(copy, "config", "core.bare", "false")
    git(copy, "reset", "-q")
    assert git(copy, "rev-parse", "HEAD") == head and git(copy, "status", "--short") == ""
    hashes = collect_source_hashes(copy)
    assert collect_revision_hashes(copy, head) is None  # no contents: cannot tell
    assert is_revision_verified(copy, head, hashes) is False
    git(copy, "add", "-A")  # the files match HEAD's trees: their blobs complete it
    assert is_revision_verified(copy, head, hashes) is True
