"""iDPC with a defocused probe (issue 34): the CoM is the phase gradient averaged over the
probe's intensity, and far beyond the depth of field the iDPC phase no longer images the
specimen. Given the defocus, dpc warns; checked against the abTEM simulations' projected
potential (tests/data/validation)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from harness.run.compute import validate as compute_validate
from quantem.stem4d.dpc import dpc
from quantem.stem4d.dpc.focus import MAX_DEPTHS_OF_FIELD, depth_of_field_angstrom
from quantem.stem4d.errors import CalibrationError, CalibrationWarning, DPCWarning
from quantem.stem4d.io import load
from quantem.stem4d.virtual import Calibration, open_frames

ROOT = Path(__file__).resolve().parent / "data" / "validation"
TRUTH = json.loads((ROOT / "truth.json").read_text())
HIGH_DOSE = sorted(
    (name, cell_name)
    for cell_name, cell in TRUTH["cells"].items()
    for name, entry in cell["acquisitions"].items()
    if entry["dose"] == "high"
)


def _calibration(cell: dict) -> Calibration:
    return Calibration(
        energy_ev=TRUTH["energy_ev"],
        convergence_mrad=TRUTH["semiangle_mrad"],
        mrad_per_pixel=cell["mrad_per_pixel"],
        scan_step_angstrom=TRUTH["scan_step_a"],
    )


def test_depth_of_field_is_wavelength_over_alpha_squared():
    cell = TRUTH["cells"]["t4nm_df3nm"]
    alpha = TRUTH["semiangle_mrad"] * 1e-3
    # the simulation's own wavelength (abTEM), not ours
    expected = cell["wavelength_a"] / alpha**2
    assert depth_of_field_angstrom(_calibration(cell), "c10") == pytest.approx(expected, rel=1e-6)


def test_a_defocus_without_the_optics_is_refused_before_any_work():
    # a source that is never read: the refusal comes first
    acq = ROOT / "does-not-exist_master.h5"
    with pytest.raises(CalibrationError, match="c10_angstrom needs the calibration's energy_ev"):
        dpc(acq, c10_angstrom=-200.0, calibration=Calibration(convergence_mrad=25.0))
    with pytest.raises(CalibrationError, match="convergence_mrad"):
        dpc(acq, c10_angstrom=-200.0)
    with pytest.raises(CalibrationError, match="finite"):
        dpc(acq, c10_angstrom=float("nan"), calibration=Calibration(energy_ev=3e5))


@pytest.mark.parametrize(("name", "cell_name"), HIGH_DOSE)
def test_dpc_warns_exactly_where_idpc_misses_the_potential(name, cell_name):
    """Given the simulation's defocus, dpc warns on the cells whose iDPC phase fails the
    matrix's criterion against the projected potential, and on no other."""
    cell = TRUTH["cells"][cell_name]
    entry = cell["acquisitions"][name]
    with load(ROOT / entry["master"]) as acq, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", CalibrationWarning)
        result = dpc(
            open_frames(acq),
            calibration=_calibration(cell),
            c10_angstrom=-cell["defocus_entrance_a"],
        )
    warned = [w for w in caught if issubclass(w.category, DPCWarning)]
    step, wavelength = TRUTH["scan_step_a"], cell["wavelength_a"]
    alpha = TRUTH["semiangle_mrad"] * 1e-3
    potential = np.load(ROOT / "truth.npz")[cell_name].astype(np.float64)
    r = compute_validate.correlation(
        compute_validate.band_limited(np.asarray(result.phase), step, wavelength, alpha),
        compute_validate.band_limited(potential, step, wavelength, alpha),
    )["r"]
    fails = abs(r) < compute_validate.CRITERIA["idpc_min_r_high_dose"]
    assert bool(warned) == fails, (r, [str(w.message) for w in warned])
    assert (result.warnings != []) == fails
    assert result.fitted()["warnings"] == result.warnings
    if fails:
        depths = abs(cell["defocus_entrance_a"]) / (wavelength / alpha**2)
        assert depths > MAX_DEPTHS_OF_FIELD
        assert "depths of field" in str(warned[0].message)


def _cli(tmp_path, name, *extra):
    from harness.cli import main

    cell_name = next(c for n, c in HIGH_DOSE if n == name)
    cell = TRUTH["cells"][cell_name]
    master = ROOT / cell["acquisitions"][name]["master"]
    out = tmp_path / "out"
    argv = [
        "run", "compute", "dpc", "--source", str(master), "--backend", "cpu",
        "--output-dir", str(out), "--reps", "1", *extra,
    ]  # fmt: skip
    return main(argv), out, cell


@pytest.mark.slow
def test_cli_dpc_checks_the_focus_given_the_defocus(tmp_path, capsys):
    cell = TRUTH["cells"]["t2nm_df10nm_rect"]
    calibration = [
        "--energy-ev", str(TRUTH["energy_ev"]),
        "--convergence-mrad", str(TRUTH["semiangle_mrad"]),
        "--mrad-per-pixel", str(cell["mrad_per_pixel"]),
        "--scan-step", str(TRUTH["scan_step_a"]),
    ]  # fmt: skip
    c10 = str(-cell["defocus_entrance_a"])
    code, out, _ = _cli(tmp_path, "t2nm_df10nm_rect_rot15_high", *calibration, "--c10-guess", c10)
    assert code == 0
    assert "warning: the probe is defocused by 100 A" in capsys.readouterr().out
    fitted = json.loads((out / "compute.json").read_text())["acquisitions"][0]["fitted"]
    assert fitted["c10_angstrom"] == -cell["defocus_entrance_a"]
    assert len(fitted["warnings"]) == 1 and "depths of field" in fitted["warnings"][0]


def test_cli_dpc_refuses_a_defocus_without_the_energy(tmp_path, capsys):
    code, out, _ = _cli(
        tmp_path, "t4nm_df3nm_rot0_high", "--convergence-mrad", "25", "--c10-guess", "-30"
    )
    assert code == 64
    err = capsys.readouterr().err
    assert "--c10-guess for dpc (its focus check) needs --energy-ev (or --voltage-kv)" in err
    assert "Traceback" not in err
    assert not out.exists()
