"""Physics checks against the abTEM SrTiO3 [001] simulation (tools/simulate_srtio3.py).

The fixtures under tests/data/srtio3 are ARINA acquisitions written with quantem's writer:
``focus`` (probe focused on the specimen mid-plane) and ``defocus`` (a known defocus),
each at two doses, with the detector rotated against the scan by a known angle. The
scan covers whole unit cells, so the periodic boundary is exact; "away from the edges"
still excludes a 2-pixel border, where the mirror boundary of the default integration
would differ.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from quantem.stem4d.dpc import dpc
from quantem.stem4d.io import load
from quantem.stem4d.parallax import parallax
from quantem.stem4d.virtual import Calibration, open_frames

DATA = Path(__file__).parent / "data" / "srtio3"
TRUTH = json.loads((DATA / "srtio3_truth.json").read_text())
POTENTIAL = np.load(DATA / "srtio3_truth.npz")["projected_potential"]
BORDER = 2

#: Lattice spacing is 8 scan pixels: the shift search must stay below half of it.
MAX_SHIFT_PX = 3.0


def calibration(name: str) -> Calibration:
    info = TRUTH["datasets"][name]
    return Calibration(
        energy_ev=TRUTH["energy_ev"],
        mrad_per_pixel=info["mrad_per_pixel"],
        scan_step_angstrom=info["scan_step_angstrom"],
    )


def interior(a: np.ndarray) -> np.ndarray:
    return a[BORDER:-BORDER, BORDER:-BORDER].ravel()


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(interior(a), interior(b))[0, 1])


def open_dataset(name: str, dose: str):
    return load(DATA / TRUTH["datasets"][name]["files"][dose])


@pytest.mark.parametrize(("dose", "minimum_r"), [("high", 0.9), ("low", 0.85)])
def test_idpc_phase_correlates_with_projected_potential(dose, minimum_r):
    with open_dataset("focus", dose) as acq:
        result = dpc(acq, calibration=calibration("focus"))
    assert result.units["phase"] == "rad"
    assert pearson(result.phase, POTENTIAL) >= minimum_r
    assert abs(result.rotation_deg - TRUTH["rotation_deg"]) < 1.0
    assert result.rotation.transpose is False


@pytest.mark.parametrize("dose", ["high", "low"])
def test_parallax_recovers_defocus_and_rotation(dose):
    expected_c10 = TRUTH["datasets"]["defocus"]["C10_mid_plane_angstrom"]
    with open_dataset("defocus", dose) as acq:
        result = parallax(
            acq,
            calibration=calibration("defocus"),
            max_shift=MAX_SHIFT_PX,
            correct_aberrations=True,
        )
    fit = result.fit
    assert abs(fit.c10_angstrom - expected_c10) <= 0.05 * abs(expected_c10)
    assert abs(fit.rotation_deg - TRUTH["rotation_deg"]) < 1.0
    assert fit.transpose is False
    assert fit.c12_angstrom < 0.05 * abs(expected_c10)  # none was simulated
    # The defocused bright field is contrast-reversed; the aberration sign flip undoes it.
    assert pearson(result.image[::2, ::2], POTENTIAL) < -0.5
    assert pearson(result.image_corrected[::2, ::2], POTENTIAL) > 0.7


def test_streamed_fixture_gives_the_same_dpc_bits():
    path = DATA / TRUTH["datasets"]["focus"]["files"]["high"]
    with load(path) as acq:
        dense = dpc(acq, calibration=calibration("focus"))
    streamed = dpc(open_frames(path, batch_frames=100), calibration=calibration("focus"))
    for name, array in dense.outputs().items():
        np.testing.assert_array_equal(streamed.outputs()[name], array, err_msg=name)


def test_fixtures_stay_small():
    total = sum(p.stat().st_size for p in DATA.iterdir())
    assert total < 3 * 1024 * 1024
