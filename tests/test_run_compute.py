"""``harness run compute``: stages, output hashes, --save-outputs, baseline rule, schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.cli import main
from harness.compare import compare_reports
from harness.errors import ReportValidationError, UsageError
from harness.report import parse_report
from harness.run.compute import workloads as compute_workloads
from harness.run.compute.config import ComputeConfig
from harness.run.compute.kind import run_compute
from harness.run.compute.workloads import ComputeParameters
from harness.run.manifest import dump_manifest, manifest_entry
from quantem.stem4d.arrays import array_digest
from quantem.stem4d.dpc import dpc
from quantem.stem4d.io import load
from quantem.stem4d.virtual import Calibration

DATA = Path(__file__).parent / "data" / "srtio3"
MASTER = DATA / "srtio3_focus_high_master.h5"
REPO = Path(__file__).resolve().parents[1]
PARAMETERS = ComputeParameters(
    energy_ev=200e3, mrad_per_pixel=2.14078876, scan_step_angstrom=0.488125
)


def manifest(tmp_path: Path) -> Path:
    entry = manifest_entry("focus", MASTER, DATA, (24, 24), (32, 32), "uint16")
    path = tmp_path / "manifest.json"
    path.write_bytes(dump_manifest([entry]))
    return path


def config(tmp_path: Path, name: str, **overrides) -> ComputeConfig:
    values = dict(
        workload="dpc",
        root=DATA,
        manifest=manifest(tmp_path),
        backend="cpu",
        storage_id="test",
        output_dir=tmp_path / name,
        reps=2,
        parameters=PARAMETERS,
        progress=False,
    )
    values.update(overrides)
    return ComputeConfig(**values)


def test_dpc_run_records_stages_hashes_and_saves_outputs(tmp_path):
    outcome = run_compute(config(tmp_path, "run", save_outputs=tmp_path / "saved"))
    assert outcome.exit_code == 0
    doc = parse_report(outcome.report_path)  # validates against the compute schema
    assert doc["schema"] == "quantem-harness/compute-report" and doc["benchmark"] == "compute-dpc"
    # issue 39: the files were checked against the manifest, the cpu load verifies chunks
    assert doc["source_check"]["manifest_files"]["state"] == "checked"
    assert doc["source_check"]["chunk_checksums"] is True
    stages = doc["conditions"]["stages"]
    assert stages == ["load", "prepare", "com", "shifts", "rotation", "integration"]
    assert len(doc["trials"]) == 3 * len(stages)
    assert {s["stage"]: s["n_kept"] for s in doc["summaries"]} == dict.fromkeys(stages, 2)
    # Independent: the library's own dpc on the same file gives the recorded hashes.
    cal = Calibration(energy_ev=200e3, mrad_per_pixel=2.14078876, scan_step_angstrom=0.488125)
    with load(MASTER) as acq:
        direct = dpc(acq, calibration=cal)
    recorded = doc["acquisitions"][0]["outputs"]
    assert set(recorded) == set(direct.outputs())
    for name, array in direct.outputs().items():
        assert recorded[name] == array_digest(array), name
        saved = np.load(tmp_path / "saved" / f"dpc.{name}.npy")
        np.testing.assert_array_equal(saved, array)
    meta = json.loads((tmp_path / "saved" / "dpc.json").read_text())
    assert abs(meta["fitted"]["rotation_deg"] - 12.0) < 1.0
    assert meta["calibration"]["energy_ev"] == 200e3


def test_outputs_changed_against_same_backend_baseline(tmp_path):
    base = run_compute(config(tmp_path, "base", reps=1))
    same = run_compute(config(tmp_path, "same", reps=1, baseline=str(base.report_path)))
    assert same.report["status"]["correctness"] == "passed"
    other = ComputeParameters(**{**PARAMETERS.to_dict(), "rotation_deg": 10.0})
    changed = run_compute(
        config(tmp_path, "changed", reps=1, parameters=other, baseline=str(base.report_path))
    )
    assert changed.exit_code == 1
    assert changed.report["status"]["correctness"] == "outputs_changed"
    assert "focus/phase" in changed.report["output_change"]["changed"]
    accepted = run_compute(
        config(
            tmp_path,
            "accepted",
            reps=1,
            parameters=other,
            baseline=str(base.report_path),
            accept_output_change=True,
        )
    )
    assert accepted.exit_code != 1
    record = accepted.report["output_change"]
    assert record["accepted"] is True and "focus/phase" in record["changed"]
    # harness compare applies the same rule to the stored reports.
    base_doc, changed_doc = base.report, changed.report
    assert compare_reports(base_doc, changed_doc, 1000.0).exit_code == 1
    assert compare_reports(base_doc, changed_doc, 1000.0, accept_output_change=True).exit_code != 1
    changed_doc = json.loads(json.dumps(changed_doc))
    changed_doc["status"].update(correctness="passed", failures=[], exit_code=0)
    changed_doc["output_change"] = {"accepted": False, "changed": []}
    verdict = compare_reports(base_doc, changed_doc, 1000.0)
    assert verdict.exit_code == 1 and any("outputs_changed" in f for f in verdict.failures)
    assert compare_reports(base_doc, changed_doc, 1000.0, accept_output_change=True).exit_code != 1
    # Another device: hashes are not expected to match, so no outputs_changed.
    changed_doc["environment"]["device"]["name"] = "another device"
    assert not any(
        "outputs_changed" in f for f in compare_reports(base_doc, changed_doc, 1000.0).failures
    )


def test_nondeterministic_outputs_fail_correctness(tmp_path, monkeypatch):
    workload = compute_workloads.WORKLOADS["virtual"]
    rng = np.random.default_rng()
    noisy = compute_workloads.Workload(
        "virtual",
        workload.stages,
        lambda state: {**workload.outputs(state), "noise": rng.random(3)},
        workload.fitted,
    )
    monkeypatch.setitem(compute_workloads.WORKLOADS, "virtual", noisy)
    # virtual detectors in px use no calibration (a given one would be refused as unused)
    outcome = run_compute(
        config(tmp_path, "noisy", workload="virtual", reps=1, parameters=ComputeParameters())
    )
    assert outcome.exit_code == 1
    assert outcome.report["status"]["correctness"] == "failed"
    assert outcome.report["acquisitions"][0]["deterministic"] is False


def test_bad_configuration_and_tampered_report(tmp_path):
    with pytest.raises(UsageError, match="needs --baseline"):
        run_compute(config(tmp_path, "x", accept_output_change=True))
    with pytest.raises(UsageError, match="float32 is a cuda option"):
        run_compute(config(tmp_path, "y", parameters=ComputeParameters(dtype="float32")))
    outcome = run_compute(config(tmp_path, "ok", workload="virtual", reps=1))
    doc = json.loads(outcome.report_path.read_text())
    doc["trials"][0]["stage"] = "nonsense"
    with pytest.raises(ReportValidationError, match="trials"):
        parse_report(json.dumps(doc).encode())


def test_cli_usage_errors_exit_64_without_traceback(tmp_path):
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            "compute",
            "dpc",
            "--source",
            str(tmp_path / "missing_master.h5"),
            "--backend",
            "cpu",
            "--output-dir",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
    )
    assert result.returncode == 64, result.stderr
    assert "no such file" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_products_workload_records_the_detector_sessions_exact_products(tmp_path):
    outcome = run_compute(
        config(tmp_path, "products", workload="products", reps=1, save_outputs=tmp_path / "out")
    )
    assert outcome.exit_code == 0
    doc = parse_report(outcome.report_path)
    assert doc["conditions"]["stages"] == ["load", "prepare", "mean_dp", "bf", "adf", "com"]
    # Independent of the session: numpy sums of the loaded frames (dead pixels read 0).
    with load(MASTER) as acq:
        frames = np.asarray(acq.data).astype(np.uint64)
    saved = {
        name: np.load(tmp_path / "out" / f"products.{name}.npy")
        for name in ("mean_dp", "bf", "adf")
    }
    np.testing.assert_array_equal(saved["mean_dp"], frames.sum(axis=(0, 1)))
    fitted = json.loads((tmp_path / "out" / "products.json").read_text())["fitted"]
    rows, cols = np.indices(frames.shape[2:])
    (cr, cc), radius = fitted["disk_center_px"], fitted["disk_radius_px"]
    inside = (rows - cr) ** 2 + (cols - cc) ** 2 <= radius**2
    np.testing.assert_array_equal(saved["bf"], (frames * inside).sum(axis=(2, 3)))
    np.testing.assert_array_equal(saved["bf"] + saved["adf"], frames.sum(axis=(2, 3)))


def test_a_new_workload_is_one_registry_entry(tmp_path, monkeypatch, capsys):
    """A workload registered in ``WORKLOADS`` alone runs from the CLI and writes a valid
    record: the CLI's choices and the report schema take the registry's names."""

    def total(state: dict) -> None:
        state["total"] = np.asarray(state["acq"].data).sum(axis=(2, 3), dtype=np.uint64)

    load_stage = compute_workloads.WORKLOADS["virtual"].stages[0]
    assert load_stage[0] == "load"
    entry = compute_workloads.Workload(
        "total", (load_stage, ("total", total)), lambda s: {"total": s["total"]}, lambda s: {}
    )
    monkeypatch.setitem(compute_workloads.WORKLOADS, "total", entry)
    common = ["--source", str(MASTER), "--backend", "cpu", "--storage-id", "test", "--reps", "1"]
    code = main(["run", "compute", "total", *common, "--output-dir", str(tmp_path / "o"),
                 "--save-outputs", str(tmp_path / "saved")])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    doc = parse_report(tmp_path / "o" / "compute.json")  # validates against the schema
    assert doc["benchmark"] == "compute-total" and doc["conditions"]["workload"] == "total"
    assert doc["conditions"]["stages"] == ["load", "total"]
    with load(MASTER) as acq:  # independent of the stage: numpy's sums of the frames
        expected = np.asarray(acq.data).astype(np.uint64).sum(axis=(2, 3))
    np.testing.assert_array_equal(np.load(tmp_path / "saved" / "total.total.npy"), expected)
    # a name the registry lacks is a usage error that names the registered ones
    with pytest.raises(SystemExit) as refused:
        main(["run", "compute", "totals", *common, "--output-dir", str(tmp_path / "p")])
    assert refused.value.code == 64
    assert "'total'" in capsys.readouterr().err
    # the benchmark must be the workload's, now that the schema takes any name
    doc["benchmark"] = "compute-dpc"
    with pytest.raises(ReportValidationError, match="benchmark"):
        parse_report(json.dumps(doc).encode())
