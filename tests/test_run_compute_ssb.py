"""``harness run compute ssb``: stages, fitted parameters and output hashes of the SSB workload."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _ssb_abtem import ROOT, calibration, load

from harness.report import parse_report
from harness.run.compute import ComputeConfig, run_compute
from harness.run.compute_workloads import ComputeParameters
from harness.run.manifest import dump_manifest, manifest_entry
from quantem.arrays import array_digest
from quantem.ssb import EXTENDED_PARAMETERS, fit_aberrations, prepare, reconstruct

MASTER = ROOT / "sto_thin_high_master.h5"
CAL = calibration("thin")
PARAMETERS = ComputeParameters(
    energy_ev=CAL.energy_ev,
    convergence_mrad=CAL.semiangle_mrad,
    mrad_per_pixel=CAL.detector_sampling_mrad[0],
    scan_step_angstrom=CAL.scan_step_a[0],
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
    # Independent: quantem.ssb called directly gives the recorded object hash.
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
