"""The commit order that orders a history's series (harness/verdict/changes.py): kills
survivors of the mutmut run over harness/verdict/ (tests/mutation-survivors.md)."""

from __future__ import annotations

import subprocess

from harness.verdict.changes import git_commit_order


def _git(repo, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
        "PATH": "/usr/bin:/bin:/usr/local/bin",
    }
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=env
    )
    return done.stdout.strip()


def test_commits_are_numbered_oldest_first_over_every_ref(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    shas = []
    for i in range(3):
        _git(repo, "commit", "-q", "--allow-empty", "-m", f"c{i}")
        shas.append(_git(repo, "rev-parse", "HEAD"))
    _git(repo, "checkout", "-q", "-b", "side", shas[0])
    _git(repo, "commit", "-q", "--allow-empty", "-m", "side")
    side = _git(repo, "rev-parse", "HEAD")
    order = git_commit_order(repo)
    assert set(order) == {*shas, side}  # every ref's commits, not only HEAD's
    assert order[shas[0]] == 0 and order[shas[0]] < order[shas[1]] < order[shas[2]]
    assert order[shas[0]] < order[side]
    assert sorted(order.values()) == list(range(4))


def test_no_repository_or_no_git_gives_no_order(tmp_path):
    assert git_commit_order(None) is None
    assert git_commit_order(tmp_path) is None  # not a git checkout: git fails
