"""End-to-end io-scale runs on small synthetic acquisitions (CPU backend)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _native_support import native_binary_fixture  # noqa: F401  (fixture)
from _run_helpers import real_disk_dir, tmpfs_dir

from harness.history.folder_history import FolderHistory
from harness.run import provenance
from harness.run.demo import write_demo_suite
from harness.run.io_scale.config import IoScaleConfig
from harness.run.io_scale.conversion import REFERENCE_HEADER_DIR
from harness.run.io_scale.kind import run_io_scale
from harness.run.workspace import TEMP_PREFIX, temporary_area

REPO = Path(__file__).resolve().parents[1]
#: Small enough for the default tier: two acquisitions, a few shards each.
SMALL_SUITE = (
    ("small-u8", (8, 8), (32, 32), "uint8", 500.0),
    ("small-u16", (8, 8), (32, 32), "uint16", 5000.0),
)


#: Files the source fingerprint watches in these tests (see the fixture below).
WATCHED: list[Path] = []


@pytest.fixture(autouse=True)
def _fingerprint_only_watched_files(monkeypatch):
    """Fingerprint only files a test names in WATCHED.

    The fingerprint of the real tree is tested in test_run_provenance.py; here other
    work in a shared checkout (an editor saving a file) must not make a run fail. The
    source-stability test below watches its own file.
    """
    WATCHED.clear()

    def watched_hashes(checkout, modules=None):
        return {str(p): p.read_text() for p in WATCHED}

    monkeypatch.setattr(provenance, "collect_source_hashes", watched_hashes)


def _cleanup(folder: Path, tmp_path: Path) -> None:
    if folder != tmp_path and not str(folder).startswith(str(tmp_path)):
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def _written_suite(tmp_path_factory):
    """The synthetic suite, written once per module (copied per test)."""
    return write_demo_suite(tmp_path_factory.mktemp("suite"), SMALL_SUITE, frames_per_shard=24)


@pytest.fixture
def disk_suite(tmp_path, _written_suite):
    """A private copy of the suite on a block-backed filesystem: (folder, suite)."""
    folder = real_disk_dir(tmp_path)
    top = _written_suite.root.parent
    shutil.copytree(top, folder / "suite")
    suite = type(_written_suite)(
        root=folder / "suite" / "data", manifest=folder / "suite" / "manifest.json"
    )
    yield folder, suite
    _cleanup(folder, tmp_path)


def _config(folder: Path, suite, **overrides) -> IoScaleConfig:
    values = dict(
        root=suite.root,
        manifest=suite.manifest,
        backend="cpu",
        storage_id="test-disk",
        output_dir=folder / "out",
        reps=2,
        load_only=True,
        progress=False,
        command=["test"],
    )
    values.update(overrides)
    return IoScaleConfig(**values)


def _leftover_temp(folder: Path) -> list[Path]:
    return [p for p in folder.rglob(f"{TEMP_PREFIX}*")] + [p for p in folder.rglob("*.qem")]


def test_cold_and_cached_trials_verified_and_report_valid(disk_suite):
    from harness.report import parse_report

    folder, suite = disk_suite
    outcome = run_io_scale(
        _config(folder, suite, load_only=False, cold_reloads=1, profile_reload=True)
    )
    assert outcome.exit_code == 0, outcome.report["status"]["failures"]
    doc = parse_report(outcome.report_path)  # schema + cross-section checks
    assert doc == json.loads(outcome.report_path.read_bytes())
    assert len(doc["trials"]) == 2 * 2 * 2 * 2
    for trial in doc["trials"]:
        assert trial["label"] == trial["cache_state"], trial
        if trial["cache_state"] == "cold":
            assert trial["residency_before"] <= 0.01
            assert trial["read_bytes"] >= 0.9 * trial["file_bytes"]  # physical reads counted
        else:
            assert trial["read_bytes"] <= 0.1 * trial["file_bytes"]
    for acquisition in doc["acquisitions"]:
        products = {
            t["product_sha256"] for t in doc["trials"] if t["acquisition"] == acquisition["id"]
        }
        assert products == {acquisition["indexed_product_sha256"]}
        assert acquisition["products_consistent"]
        assert acquisition["first_observation"]["read_bytes"] > 0
    assert all(s["n_kept"] == s["n"] == 2 for s in doc["summaries"])
    assert {c["acquisition"] for c in doc["conversion"]["acquisitions"]} == {
        "small-u8",
        "small-u16",
    }
    assert all("verified_conversion_seconds" in c for c in doc["conversion"]["acquisitions"])
    assert len(doc["cold_reload_runs"]) == 2
    profile = doc["profile"]  # one instrumented cold QEM reload, outside the statistics
    assert profile["calls"]["quantem.stem4d.io.load"]["count"] == 1
    assert profile["io"]["read_bytes"] > 0 and profile["shape"] == [8, 8, 32, 32]
    assert doc["status"]["source_stability"] == "stable"
    assert not _leftover_temp(folder / "out")
    # reference headers are written for a passing run
    assert sorted(p.name for p in (folder / "out" / REFERENCE_HEADER_DIR).iterdir()) == [
        "small-u16.qem-header.json",
        "small-u8.qem-header.json",
    ]


def test_indexed_product_matches_an_independent_computation(disk_suite):
    """The product hash equals one computed here from the synthetic model, without any file."""
    import hashlib

    import numpy as np

    from quantem.stem4d.io.synthetic import SyntheticModel

    folder, suite = disk_suite
    outcome = run_io_scale(_config(folder, suite, reps=1))
    assert outcome.exit_code == 0
    for seed, (name, scan, det, dtype, dose) in enumerate(SMALL_SUITE):
        model = SyntheticModel(
            scan_shape=scan, detector_shape=det, dtype=dtype, dose=dose, seed=seed
        )
        frames = model.make_frames(0, scan[0] * scan[1]).reshape(*scan, *det)
        mask = np.zeros(det, dtype=bool)
        mask[::2, ::2] = True
        mask &= model.pixel_mask == 0  # products are taken over valid pixels only
        expected = frames[..., mask].astype(np.uint64).sum(axis=-1, dtype=np.uint64)
        entry = next(a for a in outcome.report["acquisitions"] if a["id"] == name)
        assert entry["indexed_product_sha256"] == hashlib.sha256(expected.tobytes()).hexdigest()


def test_not_cold_labelling_when_eviction_cannot_work(tmp_path):
    folder = tmpfs_dir()
    try:
        suite = write_demo_suite(folder / "suite", SMALL_SUITE[:1], frames_per_shard=24)
        outcome = run_io_scale(_config(folder, suite, reps=2))
        doc = outcome.report
        cold = [t for t in doc["trials"] if t["cache_state"] == "cold"]
        assert cold and all(t["label"] == "not-cold" and not t["kept"] for t in cold)
        assert all(t["residency_before"] > 0.99 for t in cold)
        cold_summaries = [s for s in doc["summaries"] if s["cache_state"] == "cold"]
        assert all(s["n_kept"] == 0 and s["median"] is None for s in cold_summaries)
        assert doc["label_counts"]["lost_label"] == len(cold)
        assert outcome.exit_code == 0  # honest labels are not a failure
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_mismatching_reference_header_fails(disk_suite, tmp_path):
    from harness.run.manifest import dump_manifest

    folder, suite = disk_suite
    first = run_io_scale(_config(folder, suite, reps=1))
    assert first.exit_code == 0
    headers = folder / "out" / REFERENCE_HEADER_DIR
    manifest = json.loads(suite.manifest.read_text())
    entries = manifest["selected_acquisitions"]
    # the matching header passes; the other acquisition's header (other data) fails
    entries[0]["qem_reference_header"] = str(headers / "small-u8.qem-header.json")
    ok_manifest = folder / "ok.json"
    ok_manifest.write_bytes(dump_manifest(entries[:1]))
    assert (
        run_io_scale(
            _config(folder, suite, manifest=ok_manifest, output_dir=folder / "ok", reps=1)
        ).exit_code
        == 0
    )
    # a header of other data with the same shape: same layout rules, other checksums
    other = write_demo_suite(folder / "other", SMALL_SUITE[:1], seed=7, frames_per_shard=24)
    other_out = run_io_scale(
        _config(
            folder,
            other,
            output_dir=folder / "other-out",
            reps=1,
            manifest=other.manifest,
            root=other.root,
        )
    )
    assert other_out.exit_code == 0
    entries[0]["qem_reference_header"] = str(
        folder / "other-out" / REFERENCE_HEADER_DIR / "small-u8.qem-header.json"
    )
    bad_manifest = folder / "bad.json"
    bad_manifest.write_bytes(dump_manifest(entries[:1]))
    outcome = run_io_scale(
        _config(folder, suite, manifest=bad_manifest, output_dir=folder / "bad", reps=1)
    )
    assert outcome.exit_code == 1
    assert any("reference header" in f for f in outcome.report["status"]["failures"])
    assert outcome.report["status"]["correctness"] == "failed"
    assert not (folder / "bad" / REFERENCE_HEADER_DIR).exists()  # never archive a failing candidate


def test_source_change_during_run_fails(disk_suite, tmp_path):
    folder, suite = disk_suite
    watched = tmp_path / "watched_source.py"
    watched.write_text("VALUE = 1\n")
    WATCHED.append(watched)

    def edit_once(event, details):
        if event == "trial" and watched.read_text() == "VALUE = 1\n":
            watched.write_text("VALUE = 2\n")

    outcome = run_io_scale(_config(folder, suite, reps=1, on_event=edit_once))
    status = outcome.report["status"]
    assert outcome.exit_code == 1
    assert status["source_stability"] == "changed"
    assert status["correctness"] == "passed" and status["execution"] == "completed"
    assert any(
        f.startswith("source-stability") and "watched_source.py" in f for f in status["failures"]
    )
    assert not (folder / "out" / REFERENCE_HEADER_DIR).exists()  # no reference from a failing run
    assert outcome.report_path.is_file()  # the failed run is still evidence


def test_existing_report_is_never_overwritten(disk_suite):
    from harness.errors import HarnessError

    folder, suite = disk_suite
    assert run_io_scale(_config(folder, suite, reps=1)).exit_code == 0
    before = (folder / "out" / "loading.json").read_bytes()
    with pytest.raises(HarnessError, match="never overwritten"):
        run_io_scale(_config(folder, suite, reps=1))
    assert (folder / "out" / "loading.json").read_bytes() == before


# --- through the command line ----------------------------------------------------------


def _cli(*args: str, cwd: Path = REPO, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        **kwargs,
    )


def _cli_args(suite, out: Path, *extra: str, reps: int = 1) -> list[str]:
    return [
        "run",
        "io-scale",
        str(suite.root),
        "--backend",
        "cpu",
        "--selection-manifest",
        str(suite.manifest),
        "--storage-id",
        "test-disk",
        "--output-dir",
        str(out),
        "--reps",
        str(reps),
        "--load-only",
        *extra,
    ]


@pytest.mark.parametrize(
    "args",
    [
        ["run", "io-scale"],
        ["run", "io-scale", "--demo", "/some/root"],
        ["run", "io-scale", "--bogus"],
        ["run"],
    ],
)
def test_cli_usage_errors_exit_64(args):
    done = _cli(*args)
    assert done.returncode == 64, done.stderr
    assert "Traceback" not in done.stderr


def test_cli_bad_values_exit_64(disk_suite):
    folder, suite = disk_suite
    done = _cli(*_cli_args(suite, folder / "out", "--reps", "0"))
    assert done.returncode == 64, done.stderr


def test_cli_wrong_master_sha256_exits_1(disk_suite):
    folder, suite = disk_suite
    doc = json.loads(suite.manifest.read_text())
    doc["selected_acquisitions"][0]["source_master_sha256"] = "0" * 64
    suite.manifest.write_text(json.dumps(doc))
    done = _cli(*_cli_args(suite, folder / "out"))
    assert done.returncode == 1, done.stderr
    assert "SHA-256" in done.stderr and "Traceback" not in done.stderr
    assert not (folder / "out" / "loading.json").exists()


def test_cli_path_escaping_root_exits_1(disk_suite):
    folder, suite = disk_suite
    doc = json.loads(suite.manifest.read_text())
    doc["selected_acquisitions"][0]["filename"] = "../manifest.json"
    suite.manifest.write_text(json.dumps(doc))
    done = _cli(*_cli_args(suite, folder / "out"))
    assert done.returncode == 1, done.stderr
    assert "escapes ROOT" in done.stderr


@pytest.mark.slow
def test_cli_successful_run_exits_0(disk_suite):
    folder, suite = disk_suite
    done = _cli(*_cli_args(suite, folder / "out"))
    assert done.returncode == 0, done.stderr
    assert "kept their cache label" in done.stdout
    assert (folder / "out" / "loading.json").is_file()


def test_keyboard_interrupt_mid_run_leaves_no_temporary_files(disk_suite):
    """In-process Ctrl-C after the QEM exists (the subprocess tests below send real signals)."""
    folder, suite = disk_suite
    seen = []

    def interrupt(event, details):
        if event == "trial":
            seen.append(sorted(p.name for p in (folder / "out").rglob("*.qem")))
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_io_scale(_config(folder, suite, on_event=interrupt))
    assert seen == [["small-u8.qem"]]  # the disposable QEM existed when interrupted
    assert not _leftover_temp(folder / "out")
    assert not (folder / "out" / "loading.json").exists()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_swallowed_by_a_weakref_callback_still_ends_the_run(tmp_path, sig):
    """Python drops an exception raised inside a weakref callback; the signal must not be."""
    import weakref

    class Owner:
        pass

    delivered = []

    def callback(_ref):
        os.kill(os.getpid(), sig)  # the handler raises here, and Python ignores it
        delivered.append(True)

    with pytest.raises(KeyboardInterrupt), temporary_area(tmp_path) as folder:
        owner = Owner()
        ref = weakref.ref(owner, callback)
        del owner
        assert ref() is None
        (folder / "partial.qem").write_bytes(b"x")
        reached_end = True
    assert reached_end  # the body did finish: only the latch can have raised
    assert not delivered  # the handler interrupted the callback
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_leaves_no_temporary_files(tmp_path, sig):
    folder = real_disk_dir(tmp_path)
    try:
        suite = write_demo_suite(
            folder / "suite",
            (("big-u16", (32, 32), (96, 96), "uint16", 20000.0),),
            frames_per_shard=256,
        )
        out = folder / "out"
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness", *_cli_args(suite, out, reps=50)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if list(out.glob(f"{TEMP_PREFIX}*/*.qem")):
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.3)  # inside the trials
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 130, stderr
        assert not _leftover_temp(out), list(out.rglob("*"))
        assert not (out / "loading.json").exists()
    finally:
        _cleanup(folder, tmp_path)


@pytest.mark.slow
def test_demo_runs_and_registers(tmp_path):
    history = tmp_path / "history"
    start = time.monotonic()
    done = _cli(
        "run",
        "io-scale",
        "--demo",
        "--history-dir",
        str(history),
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "160", "PYTHONPATH": str(REPO)},
    )
    elapsed = time.monotonic() - start
    assert done.returncode == 0, done.stderr + done.stdout
    assert "demo-u8" in done.stdout and "demo-u16" in done.stdout
    assert list(history.rglob("*.json"))
    assert elapsed < 60
    # the printed report path, and the source path the journal records, exist afterwards
    (printed,) = [
        line[len("report: ") :] for line in done.stdout.splitlines() if line.startswith("report: ")
    ]
    assert Path(printed).is_file() and Path(printed).is_relative_to(tmp_path / "harness-demo")
    (entry,) = [json.loads(line) for line in (history / "journal.jsonl").read_text().splitlines()]
    assert Path(entry["source"]).is_file(), entry


# --- native backend ---------------------------------------------------------------------


@pytest.mark.native
def test_native_trials_separate_processes_and_hashes_agree(disk_suite, native_binary):
    from harness.report import parse_report

    folder, suite = disk_suite
    outcome = run_io_scale(_config(folder, suite, backend="native", native_binary=native_binary))
    assert outcome.exit_code == 0, outcome.report["status"]["failures"]
    doc = parse_report(outcome.report_path)
    assert {t["format"] for t in doc["trials"]} == {"qem"}
    for trial in doc["trials"]:
        assert trial["label"] == trial["cache_state"]
        assert trial["stages"]["launch"] > 0  # process launch recorded apart
        assert trial["stages"]["native_total"] <= trial["seconds"]
        assert trial["native_io_counted"]
        assert len(trial["sample_hashes_u32_le"]) == len(trial["sample_frames"]) == 3
    assert doc["conditions"]["timing_boundary"].startswith("native:")


@pytest.mark.native
def test_native_sample_hash_mismatch_fails(disk_suite, native_binary):
    folder, suite = disk_suite
    doc = json.loads(suite.manifest.read_text())
    doc["selected_acquisitions"][0]["sample_frames"] = [0, 5]
    doc["selected_acquisitions"][0]["sample_hashes_u32_le"] = ["0" * 64, "1" * 64]
    suite.manifest.write_text(json.dumps(doc))
    outcome = run_io_scale(_config(folder, suite, backend="native", native_binary=native_binary))
    assert outcome.exit_code == 1
    assert any("sample-frame hashes" in f for f in outcome.report["status"]["failures"])


# --- baseline -------------------------------------------------------------------------------


@pytest.mark.slow
def test_baseline_pass_and_incomparable(disk_suite):
    import hashlib

    folder, suite = disk_suite
    history = folder / "history"
    first = run_io_scale(
        _config(folder, suite, output_dir=folder / "a", history=FolderHistory(history))
    )
    assert first.exit_code == 0 and first.registered
    sha = hashlib.sha256(first.report_path.read_bytes()).hexdigest()
    # by record prefix in the history; a generous threshold: timings of tiny files are noisy
    second = run_io_scale(
        _config(
            folder,
            suite,
            output_dir=folder / "b",
            history=FolderHistory(history),
            baseline=sha[:12],
            regression_percent=10000.0,
        )
    )
    assert second.report["baseline"]["sha256"] == sha
    assert second.report["status"]["performance"] == "pass", second.report.get("comparison")
    assert second.exit_code == 0
    # other storage: not comparable -> exit 2
    third = run_io_scale(
        _config(
            folder,
            suite,
            output_dir=folder / "c",
            storage_id="other-disk",
            baseline=str(first.report_path),
        )
    )
    assert third.report["status"]["performance"] == "incomparable"
    assert third.exit_code == 2
    assert third.report["comparison"]["differences"]


def test_unknown_baseline_prefix_is_a_usage_error(disk_suite):
    from harness.errors import UsageError

    folder, suite = disk_suite
    with pytest.raises(UsageError, match="no such history folder"):
        run_io_scale(_config(folder, suite, history=FolderHistory(folder / "h"), baseline="abcdef"))
    (folder / "h").mkdir()
    (folder / "h" / "history.json").write_text('{"format":"quantem-harness/history","version":1}')
    with pytest.raises(UsageError, match="no record"):
        run_io_scale(_config(folder, suite, history=FolderHistory(folder / "h"), baseline="abcdef"))


def test_loader_reported_stages_are_folded_into_trials():
    from harness.run.io_scale.steps import loader_stages

    class Loaded:
        def __init__(self) -> None:
            self.metadata = {
                "load_stats": {"read_seconds": 0.25, "pipeline_seconds": 1.5, "batches": 3}
            }

    assert loader_stages(Loaded()) == {"loader_read": 0.25, "loader_pipeline": 1.5}
    assert loader_stages(object()) == {}


# --- the output directory, the baseline rule, the trial loop ----------------------------


def test_second_run_into_a_busy_output_dir_refuses_before_measuring(disk_suite):
    """A run holding DIR: the second refuses at once (exit 1), measuring nothing."""
    from filelock import FileLock

    from harness.errors import EXIT_FAILURE, HarnessError
    from harness.run.workspace import CLAIM_NAME

    folder, suite = disk_suite
    out = folder / "out"
    out.mkdir()
    events = []
    with FileLock(out / CLAIM_NAME, timeout=0):  # what the first run holds while it measures
        with pytest.raises(HarnessError, match="in use by another run") as caught:
            run_io_scale(_config(folder, suite, on_event=lambda e, d: events.append(e)))
        done = _cli(*_cli_args(suite, out))
    assert caught.value.exit_code == EXIT_FAILURE
    assert events == []  # nothing was measured
    assert done.returncode == 1 and "in use by another run" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not _leftover_temp(out) and not (out / "loading.json").exists()
    # once the first run is gone, the folder is free again
    assert run_io_scale(_config(folder, suite, reps=1)).exit_code == 0
    assert not (out / CLAIM_NAME).exists()


@pytest.mark.parametrize("reference", ["ab", "xyz1"])
def test_run_baseline_follows_the_compare_rule(disk_suite, reference):
    """``run --baseline`` accepts what ``compare --baseline`` accepts: 4-64 hex digits."""
    from harness.errors import UsageError
    from harness.history.backend import load_reference

    folder, suite = disk_suite
    with pytest.raises(UsageError, match="not a SHA-256 prefix") as compare_error:
        load_reference(FolderHistory(folder / "h"), reference)
    with pytest.raises(UsageError, match="not a SHA-256 prefix") as run_error:
        run_io_scale(
            _config(folder, suite, history=FolderHistory(folder / "h"), baseline=reference)
        )
    assert str(run_error.value) == str(compare_error.value)
    assert not (folder / "out" / "loading.json").exists()


def test_trial_loop_interleaves_rounds_and_rechecks_a_subset(tmp_path):
    from harness.run.loop import Cell, TrialLoop
    from harness.run.workspace import Workspace

    cells = [Cell("a", f, c) for f in ("hdf5", "qem") for c in ("cold", "cached")]
    seen, events = [], []
    workspace = Workspace(tmp_path, on_event=lambda e, d: events.append((e, d["index"])))
    loop = TrialLoop(workspace, lambda cell, index: seen.append((index, cell)))
    assert loop.run(cells, 2) == 8
    assert seen == [(i, c) for i in range(2) for c in cells]  # round by round
    seen.clear()
    recheck = [cells[1], cells[3]]
    assert loop.run(recheck, 3, first_index=2) == 6  # K more rounds of a subset, same process
    assert seen == [(i, c) for i in (2, 3, 4) for c in recheck]
    assert [i for e, i in events] == [0] * 4 + [1] * 4 + [2, 2, 3, 3, 4, 4]


def test_verify_source_reaches_the_hdf5_loads_and_the_report(disk_suite, monkeypatch):
    """--verify-source: every HDF5 load of the run checks its chunks (cpu backend), and
    the report's conditions say so; the native backend (.qem only) refuses it before
    measuring (cuda accepts it: tests/hardware/test_cuda_verify_source.py)."""
    import quantem.stem4d.io
    from harness.errors import UsageError
    from harness.run.io_scale.config import check_config

    folder, suite = disk_suite
    seen = []
    real = quantem.stem4d.io.load

    def spy(path, backend="cpu", **options):
        seen.append((Path(path).suffix, options.get("verify_source")))
        return real(path, backend, **options)

    monkeypatch.setattr(quantem.stem4d.io, "load", spy)
    outcome = run_io_scale(_config(folder, suite, verify_source=True))
    assert outcome.exit_code == 0, outcome.report["status"]["failures"]
    assert outcome.report["conditions"]["verify_source"] is True
    assert {flag for suffix, flag in seen if suffix == ".h5"} == {True}
    with pytest.raises(UsageError, match="--verify-source needs --backend cpu or cuda"):
        check_config(_config(folder, suite, backend="native", verify_source=True))


def test_the_demo_suite_has_several_shards_per_acquisition(tmp_path):
    from harness.run.demo import DEMO_FRAMES_PER_SHARD, write_demo_suite

    suite = write_demo_suite(tmp_path)
    for folder in sorted(suite.root.iterdir()):
        shards = sorted(folder.glob("*_data_*.h5"))
        frames = 24 * 24
        assert len(shards) == -(-frames // DEMO_FRAMES_PER_SHARD) > 1, folder


def test_qem_version_2_is_written_recorded_and_kept_apart(disk_suite):
    folder, suite = disk_suite
    v1 = run_io_scale(_config(folder, suite, output_dir=folder / "v1", reps=1))
    v2 = run_io_scale(
        _config(folder, suite, output_dir=folder / "v2", reps=1, qem_version=2, baseline=None)
    )
    assert v1.exit_code == 0 and v2.exit_code == 0, v2.report["status"]
    assert v1.report["conditions"]["qem_version"] == 1
    assert v2.report["conditions"]["qem_version"] == 2
    for name, major in (("v1", 1), ("v2", 2)):
        header = json.loads(
            (folder / name / REFERENCE_HEADER_DIR / "small-u16.qem-header.json").read_text()
        )
        assert header["version"][0] == major
    # a run of the other format is not its baseline
    against = run_io_scale(
        _config(folder, suite, output_dir=folder / "v2b", reps=1, qem_version=2,
                baseline=str(v1.report_path))
    )  # fmt: skip
    assert against.report["status"]["performance"] == "incomparable"
    assert any("qem_version" in str(d) for d in against.report["comparison"]["differences"])


def test_cli_refuses_an_unknown_qem_version(disk_suite):
    folder, suite = disk_suite
    done = subprocess.run(
        [sys.executable, "-m", "harness", "run", "io-scale", str(suite.root),
         "--selection-manifest", str(suite.manifest), "--output-dir", str(folder / "x"),
         "--qem-version", "3"],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 64 and "--qem-version" in done.stderr
    assert "Traceback" not in done.stderr
