"""Rechecks are paired by default whenever the baseline's code can be had (issue 11).

The choice (:mod:`harness.run.paired.pairing`): this checkout when its source fingerprint is the
baseline's (no export), else ``--baseline-tree``, else the baseline's clean git revision;
otherwise the unpaired recheck, with the reason in the report and the output.
``--paired`` requires the pairing, ``--no-paired`` refuses it. The runs here are real
(a small suite, 2 reps); the paired workers are stand-ins that record which tree each
side was started in, so that the choice is checked without two more processes per test
(``tests/test_paired_recheck.py`` runs the real workers).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from _run_helpers import real_disk_dir

from harness.cli import main
from harness.errors import IncomparableError, UsageError
from harness.history.folder_history import FolderHistory
from harness.report import dump_report, parse_report, summarise_trials
from harness.run import provenance, runner
from harness.run.demo import write_demo_suite
from harness.run.io_scale.config import IoScaleConfig
from harness.run.io_scale.kind import run_io_scale
from harness.run.paired import workers as paired_trials
from harness.run.paired.baseline_code import WORKER_FILE
from harness.run.paired.pairing import choose_baseline_code, describe_pairing, parse_pairing_flags
from harness.run.provenance import compute_source_fingerprint
from harness.run.summary import status_lines

SUITE = (("small-u8", (8, 8), (32, 32), "uint8", 500.0),)
CELL = ("small-u8", "hdf5", "cached")
#: The one file the source fingerprint covers here (as in tests/test_recheck.py): other
#: work in a shared checkout cannot change it, and a test changes it to move the code.
WATCHED: list[Path] = []
#: The baseline's git state as recorded: a tree with local changes, which git cannot give back.
DIRTY = {"git_revision": "1" * 40, "git_dirty": True, "diff_sha256": None}


def _watched_hashes(checkout, modules=None):
    return {str(p): p.read_text() for p in WATCHED}


@pytest.fixture(autouse=True)
def _fingerprint_only_watched_files(monkeypatch):
    monkeypatch.setattr(provenance, "collect_source_hashes", _watched_hashes)
    monkeypatch.setattr(provenance, "collect_git_state", lambda checkout: dict(DIRTY))


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """(folder, suite, history, baseline sha, baseline doc): a real run, the baseline."""
    tmp_path = tmp_path_factory.mktemp("pairing")
    folder = real_disk_dir(tmp_path)
    WATCHED[:] = [folder / "watched.py"]
    WATCHED[0].write_text("x = 1\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(provenance, "collect_source_hashes", _watched_hashes)
        patch.setattr(provenance, "collect_git_state", lambda checkout: dict(DIRTY))
        patch.setenv("QUANTEM_INDEX_DIR", str(folder / "index"))
        suite = write_demo_suite(folder / "suite", SUITE, frames_per_shard=24)
        history = folder / "history"
        base = run_io_scale(_config(folder, suite, "base", history=history))
    assert base.exit_code == 0, base.report["status"]["failures"]
    sha = hashlib.sha256(base.report_path.read_bytes()).hexdigest()
    yield folder, suite, history, sha, json.loads(base.report_path.read_bytes())
    if not str(folder).startswith(str(tmp_path)):
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def _own_locks(monkeypatch, tmp_path):
    monkeypatch.setenv("HARNESS_LOCK_DIR", str(tmp_path / "host-locks"))


def _config(folder, suite, name, *, history=None, **extra) -> IoScaleConfig:
    command = ["harness", "run", "io-scale", str(suite.root), "--backend", "cpu",
               "--selection-manifest", str(suite.manifest), "--storage-id", "test-disk"]  # fmt: skip
    return IoScaleConfig(
        root=suite.root,
        manifest=suite.manifest,
        backend="cpu",
        storage_id="test-disk",
        output_dir=folder / name,
        reps=2,
        load_only=True,
        history=None if history is None else FolderHistory(history),
        progress=False,
        command=command,
        **extra,
    )


class _Workers:
    """Stand-ins for the two worker processes: each records its side and tree and answers
    trials copied from the baseline's (the same cell, the index asked, 1.0 s)."""

    def __init__(self, baseline_doc: dict) -> None:
        self.started: list[tuple[str, Path, object]] = []
        self.doc = baseline_doc

    def __call__(self, side, tree, spec, scratch):
        doc, started = self.doc, self.started

        class Worker:
            fingerprint = doc["provenance"]["source_fingerprint_end"]

            def __init__(self) -> None:
                started.append((side, Path(tree), self))

            def trial(self, cell, index):
                model = next(
                    t for t in doc["trials"]
                    if (t["acquisition"], t["format"], t["cache_state"]) == tuple(cell)
                )  # fmt: skip
                return dict(model, trial_index=index, seconds=1.0)

            def close(self):
                return {
                    "source_fingerprint_end": self.fingerprint,
                    "stable": True,
                    "failures": [],
                    "products": {a["id"]: a["indexed_product_sha256"] for a in doc["acquisitions"]},
                }

        return Worker()


@pytest.fixture
def workers(measured, monkeypatch) -> _Workers:
    fake = _Workers(measured[4])
    monkeypatch.setattr(paired_trials, "PairedWorker", fake)
    # the rechecked cell is flagged whatever the timings say
    monkeypatch.setattr(runner, "flagged_for_recheck", lambda *a, **k: [CELL])
    return fake


def _candidate(measured, name: str, **extra):
    folder, suite, _history, _sha, _doc = measured
    return run_io_scale(_config(folder, suite, name, baseline=str(folder / "base" / "loading.json"),
                                recheck=2, **extra))  # fmt: skip


# -- runs ---------------------------------------------------------------------------------


def test_the_default_pairs_with_this_checkout_when_the_fingerprints_match(measured, workers):
    outcome = _candidate(measured, "same")
    doc = parse_report(outcome.report_path)  # the schema accepts the new field
    checkout = provenance.parse_measured_checkout()
    assert doc["recheck"]["pairing"] == {
        "paired": True,
        "requested": "default",
        "reason": f"the baseline's code: this checkout {checkout} (same fingerprint)",
    }
    assert (
        doc["recheck"]["paired"]["baseline_code"] == f"this checkout {checkout} (same fingerprint)"
    )
    # two workers, one per side, each its own instance (its own process), both in this tree
    assert sorted(side for side, _, _ in workers.started) == ["baseline", "candidate"]
    assert {tree for _, tree, _ in workers.started} == {checkout}
    assert workers.started[0][2] is not workers.started[1][2]
    assert doc["recheck"]["paired"]["started_first"] == workers.started[0][0]
    assert len(doc["recheck"]["paired"]["baseline_trials"]) == len(doc["recheck"]["trials"]) == 2
    cell = next(c for c in doc["comparison"]["cells"]
                if (c["acquisition"], c["format"], c["cache_state"]) == CELL)  # fmt: skip
    assert cell["recheck"]["paired"] is True  # judged on the pairs
    line = describe_pairing(doc["recheck"])
    origin = f"this checkout {checkout} (same fingerprint)"
    assert line == f"recheck: paired by default, the baseline's code: {origin}"
    assert line in status_lines(doc)  # the printed summary says it


def test_the_default_is_unpaired_when_the_code_cannot_be_had(measured, workers):
    WATCHED[0].write_text("x = 2\n")  # this checkout is no longer the baseline's code
    try:
        outcome = _candidate(measured, "moved")
    finally:
        WATCHED[0].write_text("x = 1\n")
    doc = parse_report(outcome.report_path)
    pairing = doc["recheck"]["pairing"]
    assert pairing["paired"] is False and pairing["requested"] == "default"
    assert pairing["reason"].startswith("pairing not possible: baseline ")
    assert "local changes" in pairing["reason"] and "--baseline-tree" in pairing["reason"]
    assert "paired" not in doc["recheck"] and not workers.started  # the same-process recheck
    indices = [t["trial_index"] for t in doc["recheck"]["trials"]]
    # after the 2 main trials, 2 rounds a look, as many looks as the cell stayed undecided
    assert indices[:2] == [2, 3] and indices == list(range(2, 2 + len(indices)))
    assert len(indices) % 2 == 0 and len(indices) <= 2 * doc["recheck"]["looks"]
    assert doc["status"]["exit_code"] in (0, 2)  # a reason, not an error
    line = describe_pairing(doc["recheck"])
    assert line.startswith(
        "recheck: unpaired by default, this code alone against the baseline's original trials: "
        "pairing not possible: baseline "
    )
    assert line in status_lines(doc)  # the printed summary says it


def test_no_paired_forces_the_unpaired_recheck(measured, workers):
    outcome = _candidate(measured, "nopaired", paired=False)
    doc = parse_report(outcome.report_path)
    assert doc["recheck"]["pairing"]["paired"] is False
    assert doc["recheck"]["pairing"]["requested"] == "--no-paired"
    assert "paired" not in doc["recheck"] and not workers.started
    # 2 rounds a look, as many looks as the cell stayed undecided (timings decide when)
    n = len(doc["recheck"]["trials"])
    assert n >= 2 and n % 2 == 0 and n <= 2 * doc["recheck"]["looks"]


def test_paired_still_refuses_a_baseline_whose_code_cannot_be_had(measured, workers):
    WATCHED[0].write_text("x = 2\n")
    try:
        with pytest.raises(IncomparableError, match="local changes"):
            _candidate(measured, "forced", paired=True)
    finally:
        WATCHED[0].write_text("x = 1\n")
    assert not (measured[0] / "forced" / "loading.json").exists() and not workers.started
    # with the same code, --paired pairs from this checkout too
    doc = parse_report(_candidate(measured, "forced-same", paired=True).report_path)
    assert doc["recheck"]["pairing"]["requested"] == "--paired"
    assert doc["recheck"]["pairing"]["paired"] is True


def test_harness_recheck_pairs_by_default_and_says_so(measured, workers, capsys):
    folder, _suite, history, _sha, base_doc = measured
    slow = json.loads(json.dumps(base_doc))
    for t in slow["trials"]:
        t["seconds"] *= 10.0
    slow["summaries"] = summarise_trials(slow["trials"])
    candidate = folder / "slow.json"
    candidate.write_bytes(dump_report(slow))
    common = ["recheck", str(candidate), "--baseline", str(folder / "base" / "loading.json"),
              "--history-dir", str(history), "--recheck", "2", "--format", "markdown"]  # fmt: skip
    assert main([*common, "--output-dir", str(folder / "r1")]) in (0, 2)
    out = capsys.readouterr().out
    record = parse_report(folder / "r1" / "loading.json")
    assert record["recheck"]["pairing"]["paired"] is True
    assert "recheck: paired by default, the baseline's code: this checkout" in out
    assert len(workers.started) == 2
    assert main([*common, "--no-paired", "--output-dir", str(folder / "r2")]) in (0, 2)
    out = capsys.readouterr().out
    record = parse_report(folder / "r2" / "loading.json")
    assert record["recheck"]["pairing"] == {
        "paired": False,
        "requested": "--no-paired",
        "reason": "--no-paired asked for this code alone",
    }
    assert "paired" not in record["recheck"] and len(workers.started) == 2
    assert "recheck: unpaired (--no-paired), this code alone" in out


# -- the choice, alone --------------------------------------------------------------------


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return done.stdout.strip()


def _repo(tmp_path: Path, worker: bool = True) -> tuple[Path, str]:
    repo = tmp_path / "repo"
    (repo / "harness" / "run").mkdir(parents=True)
    if worker:
        (repo / WORKER_FILE).write_text("# worker\n")
    (repo / "harness" / "__init__.py").write_text("VALUE = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    return repo, _git(repo, "rev-parse", "HEAD")


def _doc(revision, fingerprint: str, dirty: bool = False) -> dict:
    return {"provenance": {"git_revision": revision, "git_dirty": dirty,
                           "source_fingerprint_end": fingerprint}}  # fmt: skip


def _choose(doc, checkout, fingerprint, paired=None, tree=None, in_process=True):
    return choose_baseline_code(doc, "a" * 64, paired=paired, tree=tree, checkout=checkout,
                                fingerprint=fingerprint, in_process=in_process)  # fmt: skip


def test_the_choice_takes_the_cheapest_source_of_the_baseline_code(tmp_path, monkeypatch):
    monkeypatch.undo()  # the real fingerprints of the small repository
    repo, revision = _repo(tmp_path)
    here = compute_source_fingerprint(repo)
    # the same fingerprint: this checkout, nothing exported, even for a dirty or non-git baseline
    for doc in (_doc(None, here), _doc(revision, here, dirty=True), _doc(revision, here)):
        with _choose(doc, repo, here) as (code, choice):
            assert code is not None and code.tree == repo
            assert code.origin == f"this checkout {repo} (same fingerprint)"
            assert choice.paired and choice.requested == "default"
    # another fingerprint, a clean revision: exported
    (repo / "harness" / "__init__.py").write_text("VALUE = 2\n")
    moved = compute_source_fingerprint(repo)
    with _choose(_doc(revision, here), repo, moved) as (code, choice):
        assert code.origin == f"git archive {revision}" and code.tree != repo
        assert (code.tree / "harness" / "__init__.py").read_text() == "VALUE = 1\n"
        assert choice.reason == f"the baseline's code: git archive {revision}"
    assert not code.tree.exists()  # removed after use
    # a tree given is used (and checked), before the checkout
    with _choose(_doc(None, moved), repo, moved, tree=repo) as (code, choice):
        assert code.origin == f"tree {repo}"


@pytest.mark.parametrize(
    "doc, reason",
    [
        (_doc(None, "0" * 64), "measured from code outside git"),
        (_doc("2" * 40, "0" * 64, dirty=True), "measured from a tree with local changes"),
        (_doc("2" * 40, "0" * 64), "cannot export the baseline's revision 222222222222"),
    ],
)
def test_the_default_falls_back_with_the_reason(tmp_path, monkeypatch, doc, reason):
    monkeypatch.undo()
    repo, _revision = _repo(tmp_path)
    here = compute_source_fingerprint(repo)
    with _choose(doc, repo, here) as (code, choice):
        assert code is None and not choice.paired
        assert reason in choice.reason and choice.reason.startswith("pairing not possible: ")
    refused = pytest.raises(IncomparableError, match=reason.split(" 2")[0])
    with refused, _choose(doc, repo, here, paired=True):  # --paired refuses
        pass


def test_code_from_before_paired_rechecks_is_not_paired_by_default(tmp_path, monkeypatch):
    monkeypatch.undo()
    repo, revision = _repo(tmp_path, worker=False)
    old = compute_source_fingerprint(repo)
    (repo / "harness" / "__init__.py").write_text("VALUE = 2\n")
    with _choose(_doc(revision, old), repo, compute_source_fingerprint(repo)) as (code, choice):
        assert code is None and "predates paired rechecks" in choice.reason


def test_no_paired_native_and_a_wrong_tree(tmp_path, monkeypatch):
    monkeypatch.undo()
    repo, _revision = _repo(tmp_path)
    here = compute_source_fingerprint(repo)
    with _choose(_doc(None, here), repo, here, paired=False) as (code, choice):
        assert code is None and choice.requested == "--no-paired"
    with _choose(_doc(None, here), repo, here, in_process=False) as (code, choice):
        assert code is None and "native load" in choice.reason
    refused = pytest.raises(UsageError, match="--paired needs --backend cpu or cuda")
    with refused, _choose(_doc(None, here), repo, here, paired=True, in_process=False):
        pass
    # a tree given must be the baseline's code, by default too: it was asked for
    refused = pytest.raises(IncomparableError, match="is not the code baseline")
    with refused, _choose(_doc(None, "0" * 64), repo, here, tree=repo):
        pass


def test_the_pairing_flags(tmp_path):
    assert parse_pairing_flags(False, False, None) is None
    assert parse_pairing_flags(True, False, tmp_path) is True
    assert parse_pairing_flags(False, True, None) is False
    with pytest.raises(UsageError, match="contradict"):
        parse_pairing_flags(True, True, None)
    with pytest.raises(UsageError, match="cannot go with --no-paired"):
        parse_pairing_flags(False, True, tmp_path)
    with pytest.raises(UsageError, match="is not a folder"):
        parse_pairing_flags(False, False, tmp_path / "missing")


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--baseline", "a" * 12, "--recheck", "2", "--paired", "--no-paired"], "contradict"),
        (["--baseline", "a" * 12, "--recheck", "2", "--no-paired", "--baseline-tree", "."],
         "cannot go with --no-paired"),
        (["--no-paired"], "--no-paired needs --recheck K"),
        (["--baseline-tree", "."], "--baseline-tree needs --recheck K"),
    ],
)  # fmt: skip
def test_run_pairing_usage_errors_exit_64(tmp_path, capsys, extra, message):
    code = main(["run", "io-scale", "--demo", "--output-dir", str(tmp_path / "o"),
                 "--history-dir", str(tmp_path / "h"), *extra])  # fmt: skip
    assert code == 64
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "o" / "loading.json").exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--paired", "--no-paired"], "--paired and --no-paired contradict"),
        (["--no-paired", "--baseline-tree", "."], "cannot go with --no-paired"),
    ],
)
def test_recheck_pairing_usage_errors_exit_64(tmp_path, capsys, extra, message):
    code = main(["recheck", "x", "--baseline", "y", "--history-dir", str(tmp_path), *extra])
    assert code == 64
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
