"""The commit order that orders a history's series (harness/verdict/changes.py): kills
survivors of the mutmut run over harness/verdict/ (tests/mutation-survivors.md)."""

from __future__ import annotations

import hashlib
import subprocess

from harness.comparability import comparison_key
from harness.history.store import register_reports
from harness.render import registration_renderer
from harness.report import dump_report
from harness.stats import median
from harness.testing import make_example_report
from harness.verdict.changes import e_divisive, git_commit_order, history_changes
from harness.verdict.comparison import collect_cells


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


def _repo_with_commits(tmp_path, n: int) -> tuple[object, list[str]]:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    shas = []
    for i in range(n):
        _git(repo, "commit", "-q", "--allow-empty", "-m", f"c{i}")
        shas.append(_git(repo, "rev-parse", "HEAD"))
    return repo, shas


def _records(revisions: list[str]) -> list[tuple[str, dict]]:
    """One passing record per revision, created in the reverse of the commits' order,
    plus a failed run, a run with wrong output and a recheck record (none counted)."""
    records = []
    for i, revision in enumerate(revisions):
        doc = make_example_report(
            i,
            acquisition_ids=("scan-a",),
            formats=("hdf5",),
            cache_states=("cold",),
            reps=3,
            slowdown=1.0 + i,
            git_revision=revision,
            created_utc=f"2026-11-30T0{len(revisions) - i}:00:00Z",
        )
        records.append((f"{i:064x}", doc))
    failed = make_example_report(7, acquisition_ids=("scan-a",), formats=("hdf5",))
    failed["status"]["execution"] = "failed"
    wrong = make_example_report(8, acquisition_ids=("scan-a",), formats=("hdf5",))
    wrong["status"]["correctness"] = "failed"
    recheck = make_example_report(9, acquisition_ids=("scan-a",), formats=("hdf5",))
    recheck["recheck"] = {"candidate_sha256": "c" * 64}
    return [("f" * 64, failed), ("e" * 64, wrong), *records, ("d" * 64, recheck)]


def test_series_follow_the_commit_order_and_the_key(tmp_path):
    repo, shas = _repo_with_commits(tmp_path, 3)
    records = _records(shas)
    key = comparison_key(records[2][1])
    results = history_changes(tmp_path / "unused", records=records, repository=repo)
    assert [(r.comparison_key, r.cell, r.ordered_by) for r in results] == [
        (key, ("scan-a", "hdf5", "cold"), "git")
    ]
    points = results[0].points
    assert [p.revision for p in points] == shas  # commit order, not creation order
    assert [p.sha256 for p in points] == [f"{i:064x}" for i in range(3)]
    for point, (_, doc) in zip(points, records[2:5], strict=True):
        assert point.created_utc == doc["created_utc"]
        assert point.median == median(collect_cells(doc)[("scan-a", "hdf5", "cold")])
    assert points[0].median < points[1].median < points[2].median  # slowdown 1, 2, 3
    # without the repository: by creation time
    by_time = history_changes(tmp_path / "unused", records=records)
    assert by_time[0].ordered_by == "created_utc"
    assert [p.revision for p in by_time[0].points] == shas[::-1]
    assert (
        history_changes(tmp_path / "unused", records=records, key=key[:6])[0].points
        == by_time[0].points
    )
    assert history_changes(tmp_path / "unused", records=records, key="zzzz") == []
    other = make_example_report(
        5,
        acquisition_ids=("scan-a",),
        formats=("hdf5",),
        cache_states=("cold",),
        reps=3,
        storage_id="another-disk",
    )
    two_keys = [*records, ("9" * 64, other)]
    for wanted in (key, comparison_key(other)):
        found = history_changes(tmp_path / "unused", records=two_keys, key=wanted)
        assert [r.comparison_key for r in found] == [wanted]


def test_a_revision_git_does_not_know_orders_by_creation_time(tmp_path):
    repo, shas = _repo_with_commits(tmp_path, 2)
    records = _records([shas[0], shas[1], "f" * 40])
    (result,) = history_changes(tmp_path / "unused", records=records, repository=repo)
    assert result.ordered_by == "created_utc"
    assert [p.revision for p in result.points] == ["f" * 40, shas[1], shas[0]]


def test_a_history_folder_is_read_when_no_records_are_given(tmp_path):
    paths = []
    for _, doc in _records(["a" * 40, "b" * 40])[2:4]:
        path = tmp_path / f"{doc['provenance']['git_revision'][0]}.json"
        path.write_bytes(dump_report(doc))
        paths.append(path)
    results = register_reports(tmp_path / "h", paths, render=registration_renderer("defer"))
    (series,) = history_changes(tmp_path / "h")
    assert sorted(p.sha256 for p in series.points) == sorted(r.sha256 for r in results)


def test_each_series_is_tested_with_its_own_seeded_permutations(tmp_path):
    """A small step after 4 of 8 records: the change points' p-values come from
    permutations seeded by the series' label (comparison key and cell), so a rerun gives
    the same, and another seed would not."""
    revisions = [f"{i:040x}" for i in range(8)]
    records = []
    for i, revision in enumerate(revisions):
        doc = make_example_report(
            i,
            acquisition_ids=("scan-a",),
            formats=("hdf5",),
            cache_states=("cold",),
            reps=3,
            slowdown=1.0 if i < 4 else 1.02,
            git_revision=revision,
            created_utc=f"2026-11-30T0{i}:00:00Z",
        )
        records.append((f"{i:064x}", doc))
    (result,) = history_changes(
        tmp_path / "unused", records=records, permutations=199, p_threshold=1.0
    )
    assert result.ordered_by == "created_utc"
    medians = [p.median for p in result.points]
    label = f"{result.comparison_key}/scan-a/hdf5/cold".encode()
    seed = int.from_bytes(hashlib.sha256(label).digest()[:8], "little")
    expected = e_divisive(medians, permutations=199, p_threshold=1.0, seed=seed)
    assert result.changes == expected
    assert e_divisive(medians, permutations=199, p_threshold=1.0, seed=seed + 1) != expected
    default = history_changes(tmp_path / "unused", records=records)[0].changes
    assert default == e_divisive(medians, seed=seed)
