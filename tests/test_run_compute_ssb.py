"""``harness run compute ssb``: stages, fitted parameters and output hashes of the SSB workload."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _ssb_abtem import ROOT, calibration, load

import quantem.stem4d.io
from harness.report import parse_report
from harness.run.compute.config import ComputeConfig
from harness.run.compute.kind import run_compute
from harness.run.compute.workloads import ComputeParameters
from harness.run.manifest import dump_manifest, manifest_entry
from quantem.stem4d.arrays import array_digest
from quantem.stem4d.ssb import EXTENDED_PARAMETERS, fit_aberrations, prepare, reconstruct

MASTER = ROOT / "sto_thin_high_master.h5"
CAL = calibration("thin")
PARAMETERS = ComputeParameters(
    energy_ev=CAL.energy_ev,
    convergence_mrad=CAL.semiangle_mrad,
    mrad_per_pixel=CAL.detector_sampling_mrad[0],
    scan_step_angstrom=CAL.scan_step_a[0],
    rotation_deg=CAL.rotation_deg,  # this fixture's cropped detector defeats the DPC estimate
    trials=4,
    seed=1,
    regions=(2, 1),
    refine_evaluations=15,
)


@pytest.mark.slow
def test_ssb_workload_records_stages_fits_and_hashes(tmp_path: Path):
    data = load("thin", "high")
    entry = manifest_entry("thin", MASTER, ROOT, data.shape[:2], data.shape[2:], str(data.dtype))
    manifest = tmp_path / "manifest.json"
    manifest.write_bytes(dump_manifest([entry]))
    outcome = run_compute(
        ComputeConfig(
            workload="ssb",
            root=ROOT,
            manifest=manifest,
            backend="cpu",
            storage_id="test",
            output_dir=tmp_path / "run",
            reps=1,
            parameters=PARAMETERS,
            progress=False,
            save_outputs=tmp_path / "saved",
        )
    )
    assert outcome.exit_code == 0
    doc = parse_report(outcome.report_path)
    assert doc["benchmark"] == "compute-ssb"
    stages = doc["conditions"]["stages"]
    assert stages == [
        "load",
        "prepare",
        "reconstruct",
        "standard_fit",
        "default_fit",
        "regional_fits",
    ]
    assert len(doc["trials"]) == 2 * len(stages)
    # Independent: quantem.stem4d.ssb called directly gives the recorded object hash.
    prepared = prepare(data, CAL)
    fit = fit_aberrations(
        prepared, parameters=EXTENDED_PARAMETERS, n_trials=4, seed=1, refine_max_evaluations=15
    )
    obj = reconstruct(prepared, fit.aberrations).object
    recorded = doc["acquisitions"][0]["outputs"]
    assert set(recorded) == {"object", "phase", "standard_phase", "uncorrected_phase"}
    assert recorded["object"] == array_digest(obj)
    np.testing.assert_array_equal(np.load(tmp_path / "saved" / "ssb.object.npy"), obj)
    fitted = json.loads((tmp_path / "saved" / "ssb.json").read_text())["fitted"]
    assert fitted["default_fit"]["trajectory_sha256"] == fit.trajectory_sha256()
    assert fitted["default_fit"]["n_trials"] == 4 and fitted["default_fit"]["seed"] == 1
    assert [r["region"] for r in fitted["regional_fits"]] == [[0, 24, 0, 48], [24, 48, 0, 48]]
    assert fitted["calibration"]["energy_ev"] == 200e3
    assert fitted["rotation"] == prepared.rotation.to_dict()
    assert fitted["rotation"]["source"] == "given" and fitted["rotation"]["rotation_deg"] == 0.0


SRTIO3 = Path(__file__).parent / "data" / "srtio3"


@pytest.mark.slow
def test_ssb_workload_without_a_rotation_uses_and_records_the_dpc_estimate(tmp_path: Path):
    truth = json.loads((SRTIO3 / "srtio3_truth.json").read_text())
    info = truth["datasets"]["defocus"]
    master = SRTIO3 / info["files"]["high"]
    with quantem.stem4d.io.load(master) as acq:
        shape, dtype = acq.array.shape, str(acq.array.dtype)
    entry = manifest_entry("defocus", master, SRTIO3, shape[:2], shape[2:], dtype)
    manifest = tmp_path / "manifest.json"
    manifest.write_bytes(dump_manifest([entry]))
    parameters = ComputeParameters(
        energy_ev=truth["energy_ev"],
        convergence_mrad=truth["semiangle_mrad"],
        mrad_per_pixel=info["mrad_per_pixel"],
        scan_step_angstrom=info["scan_step_angstrom"],
        trials=4,
        seed=0,
        regions=(2, 1),
        refine_evaluations=10,
    )
    outcome = run_compute(
        ComputeConfig(
            workload="ssb",
            root=SRTIO3,
            manifest=manifest,
            backend="cpu",
            storage_id="test",
            output_dir=tmp_path / "run",
            reps=1,
            parameters=parameters,
            progress=False,
            save_outputs=tmp_path / "saved",
        )
    )
    assert outcome.exit_code == 0
    fitted = json.loads((tmp_path / "saved" / "ssb.json").read_text())["fitted"]
    rotation = fitted["rotation"]
    assert rotation["source"] == "dpc" and rotation["transpose"] is False
    assert abs(rotation["rotation_deg"] - truth["rotation_deg"]) < 0.5, rotation
    assert rotation["residual_curl"] < 0.5
    assert fitted["calibration"]["rotation_deg"] == rotation["rotation_deg"]


def _manifest(tmp_path: Path) -> Path:
    data = load("thin", "high")
    entry = manifest_entry("thin", MASTER, ROOT, data.shape[:2], data.shape[2:], str(data.dtype))
    manifest = tmp_path / "manifest.json"
    manifest.write_bytes(dump_manifest([entry]))
    return manifest


def _run(tmp_path: Path, name: str, parameters: ComputeParameters):
    return run_compute(
        ComputeConfig(
            workload="ssb",
            root=ROOT,
            manifest=_manifest(tmp_path),
            backend="cpu",
            storage_id="test",
            output_dir=tmp_path / name,
            reps=1,
            parameters=parameters,
            progress=False,
        )
    )


@pytest.mark.slow
def test_streamed_ssb_run_gives_the_in_memory_hashes(tmp_path: Path):
    import dataclasses

    dense = _run(tmp_path, "dense", PARAMETERS)
    streamed = _run(tmp_path, "streamed", dataclasses.replace(PARAMETERS, scan_block_rows=5))
    budget = _run(tmp_path, "budget", dataclasses.replace(PARAMETERS, memory_budget_bytes=64 << 20))
    assert dense.exit_code == streamed.exit_code == budget.exit_code == 0
    docs = [parse_report(o.report_path) for o in (dense, streamed, budget)]
    assert docs[1]["conditions"]["stages"][0] == "open"  # no dense load
    assert docs[1]["conditions"]["parameters"]["scan_block_rows"] == 5
    assert docs[2]["conditions"]["parameters"]["memory_budget_bytes"] == 64 << 20
    outputs = [d["acquisitions"][0]["outputs"] for d in docs]
    assert outputs[0] == outputs[1] == outputs[2]  # integer counts: bit-identical


def test_ssb_streaming_options_are_checked(tmp_path: Path, capsys):
    from harness.cli import main

    common = ["run", "compute", "ssb", "--source", str(MASTER), "--output-dir"]
    cal = ["--voltage-kv", "200", "--semiangle-mrad", "20", "--scan-step-a", "0.5"]
    cases = [
        (["dpc", "--memory-budget", "1GiB", "--backend", "cpu"], "ssb options"),
        (["ssb", "--scan-block-rows", "0", "--backend", "cpu"], "at least 1"),
        (["ssb", "--memory-budget", "lots", "--backend", "cpu"], "is not a size"),
        (["ssb", "--memory-budget", "0", "--backend", "cpu"], "not a positive size"),
    ]
    for k, (extra, message) in enumerate(cases):
        argv = [*common[:2], extra[0], *common[3:], str(tmp_path / f"out{k}"), *extra[1:], *cal]
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse's own errors
            code = exit_.code
        err = capsys.readouterr().err
        assert code == 64 and message in err, (extra, code, err)
        assert "Traceback" not in err
        assert not (tmp_path / f"out{k}" / "compute.json").exists()


def test_byte_size_parser():
    import argparse

    from harness.commands.run import byte_size

    assert byte_size("8GiB") == 8 << 30
    assert byte_size("512 MB") == 512 * 10**6
    assert byte_size("1.5KiB") == 1536
    assert byte_size("1000") == 1000
    for bad in ("", "GiB", "-1", "3 parsecs", "0"):
        with pytest.raises(argparse.ArgumentTypeError):
            byte_size(bad)
