"""``harness run compute parallax --c10-guess`` (and ``--rotation`` as the rotation hint):
passed through to the guided alignment, recorded, refused where it cannot be used (issue 34).

Truth: the validation matrix's 4 nm sample at 20 nm overfocus (C10 = +200 A at the entrance
surface, tests/data/validation/truth.json), whose BF images shift beyond a 3 px search.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from harness.cli import main
from harness.errors import UsageError
from harness.run.compute.config import ComputeConfig, check_parallax_guess
from harness.run.compute.kind import run_compute
from harness.run.compute.workloads import ComputeParameters
from harness.run.manifest import dump_manifest, manifest_entry
from quantem.stem4d.errors import ComputeError, ParallaxWarning
from quantem.stem4d.io import load
from quantem.stem4d.parallax import parallax
from quantem.stem4d.parallax.guided import guided_align
from quantem.stem4d.virtual import Calibration, open_frames

ROOT = Path(__file__).resolve().parent / "data" / "validation"
TRUTH = json.loads((ROOT / "truth.json").read_text())
CELL = TRUTH["cells"]["t4nm_dfm20nm"]
NAME = "t4nm_dfm20nm_rot0_high"
MASTER = ROOT / CELL["acquisitions"][NAME]["master"]
CALIBRATION = dict(
    energy_ev=TRUTH["energy_ev"],
    convergence_mrad=TRUTH["semiangle_mrad"],
    mrad_per_pixel=CELL["mrad_per_pixel"],
    scan_step_angstrom=TRUTH["scan_step_a"],
)


def _config(tmp_path: Path, **parameters) -> ComputeConfig:
    tmp_path.mkdir(parents=True, exist_ok=True)
    entry = manifest_entry(NAME, MASTER, ROOT, (32, 32), (18, 18), "uint16")
    manifest = tmp_path / "manifest.json"
    manifest.write_bytes(dump_manifest([entry]))
    return ComputeConfig(
        workload="parallax",
        root=ROOT,
        manifest=manifest,
        backend="cpu",
        storage_id="test",
        output_dir=tmp_path / "out",
        reps=1,
        parameters=ComputeParameters(**CALIBRATION, max_shift=3.0, **parameters),
        progress=False,
    )


@pytest.mark.parametrize(
    ("workload", "guess", "rotation", "message"),
    [
        ("virtual", 100.0, None, "the virtual workload does not use it"),
        ("validate", 100.0, None, "the validate workload does not use it"),
        ("parallax", float("nan"), None, "--c10-guess must be a finite number"),
        ("parallax", float("inf"), None, "--c10-guess must be a finite number"),
        ("parallax", 100.0, float("nan"), "--rotation must be a finite number"),
    ],
)
def test_a_guess_the_run_cannot_use_is_refused(workload, guess, rotation, message):
    parameters = ComputeParameters(c10_guess_angstrom=guess, rotation_deg=rotation)
    with pytest.raises(UsageError, match=message):
        check_parallax_guess(workload, parameters)


def test_cli_refuses_a_bad_guess_with_exit_64_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    common = ["--source", str(MASTER), "--backend", "cpu", "--output-dir", str(out)]
    assert main(["run", "compute", "parallax", *common, "--c10-guess", "nan"]) == 64
    assert "--c10-guess must be a finite number of angstrom" in capsys.readouterr().err
    assert main(["run", "compute", "virtual", *common, "--c10-guess", "-30"]) == 64
    assert "does not use it" in capsys.readouterr().err
    assert not out.exists()


def test_a_guess_whose_shifts_exceed_the_scan_is_refused():
    with (
        load(MASTER) as acq,
        pytest.raises(ComputeError, match=r"c10_guess_angstrom .* more than the 32 x 32 scan"),
    ):
        parallax(
            open_frames(acq),
            calibration=Calibration(**CALIBRATION),
            max_shift=3.0,
            c10_guess_angstrom=2.0e6,  # a guess in the wrong unit, say
        )
    with pytest.raises(ComputeError, match="would not overlap"):
        guided_align(np.zeros((4, 8, 8)), np.eye(4, 2) * 0.02, (0.5, 0.5), 1.0e4, max_shift=3.0)


@pytest.mark.slow
def test_workload_applies_and_records_the_guess_as_the_api_does(tmp_path):
    """From a guess 30% off and a rotation hint 3 degrees off the workload recovers the
    simulation's C10 and rotation (the validation criteria: 5%, 1 degree); without the
    guess the same run does not (its shifts hit the search bound)."""
    guess, hint = 0.7 * CELL["c10_entrance_a"], 3.0
    outcome = run_compute(_config(tmp_path, c10_guess_angstrom=guess, rotation_deg=hint))
    report = json.loads(outcome.report_path.read_text())
    assert report["conditions"]["parameters"]["c10_guess_angstrom"] == guess
    assert report["conditions"]["parameters"]["rotation_deg"] == hint
    fitted = report["acquisitions"][0]["fitted"]
    assert (fitted["c10_guess_angstrom"], fitted["rotation_hint_deg"]) == (guess, hint)
    assert fitted["alignment_at_bound"] == 0
    assert fitted["C10_angstrom"] == pytest.approx(CELL["c10_entrance_a"], rel=0.05)
    assert abs(fitted["rotation_deg"] - CELL["acquisitions"][NAME]["rotation_deg"]) < 1.0
    # the workload's stages and parallax() are one computation
    with load(MASTER) as acq, warnings.catch_warnings():
        warnings.simplefilter("error", ParallaxWarning)
        api = parallax(
            open_frames(acq),
            calibration=Calibration(**CALIBRATION),
            max_shift=3.0,
            c10_guess_angstrom=guess,
            rotation_hint_deg=hint,
        )
    assert fitted["C10_angstrom"] == pytest.approx(api.fit.c10_angstrom, abs=1e-9)
    assert fitted["rotation_deg"] == pytest.approx(api.fit.rotation_deg, abs=1e-9)

    plain = run_compute(_config(tmp_path / "plain"))
    unguided = json.loads(plain.report_path.read_text())["acquisitions"][0]["fitted"]
    assert unguided["c10_guess_angstrom"] is None and unguided["alignment_at_bound"] > 0
    assert abs(unguided["C10_angstrom"] - CELL["c10_entrance_a"]) > 0.5 * CELL["c10_entrance_a"]
