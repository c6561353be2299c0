"""quantem against py4DSTEM 0.14.18 (frozen outputs of tools/py4dstem_reference.py).

py4DSTEM needs numpy < 2, so it ran in its own environment on the same counts (the high
dose fixtures, loaded by quantem); its outputs and versions are in
tests/data/srtio3/py4dstem_reference.{npz,json}. Tolerances (docs/compute.md):

* DPC: rotation within 1 degree (py4DSTEM searches a 1-degree grid); phase Pearson
  r >= 0.95 (py4DSTEM reconstructs iteratively with its own padding and scale, so only
  the shape is compared).
* Parallax: fitted C10 within 3% and rotation within 0.5 degree of py4DSTEM's; our
  fitted shift model at py4DSTEM's BF angles within 0.1 scan pixel RMS of its shifts
  (py4DSTEM moves images by +s where quantem reports s: its shifts are negated); and our
  fit on py4DSTEM's shifts reproduces py4DSTEM's C10 and rotation to 1e-6.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from quantem.stem4d.dpc import dpc
from quantem.stem4d.io import load
from quantem.stem4d.parallax import fit_aberrations, parallax
from quantem.stem4d.virtual import Calibration

DATA = Path(__file__).parent / "data" / "srtio3"
TRUTH = json.loads((DATA / "srtio3_truth.json").read_text())
REFERENCE = np.load(DATA / "py4dstem_reference.npz")
FITTED = json.loads((DATA / "py4dstem_reference.json").read_text())["fitted"]


def calibration(name: str) -> Calibration:
    info = TRUTH["datasets"][name]
    return Calibration(
        energy_ev=TRUTH["energy_ev"],
        convergence_mrad=TRUTH["semiangle_mrad"],
        mrad_per_pixel=info["mrad_per_pixel"],
        scan_step_angstrom=info["scan_step_angstrom"],
    )


def test_dpc_agrees_with_py4dstem():
    with load(DATA / TRUTH["datasets"]["focus"]["files"]["high"]) as acq:
        result = dpc(acq, calibration=calibration("focus"))
    assert abs(result.rotation_deg - FITTED["dpc_rotation_deg"]) <= 1.0
    assert result.rotation.transpose is FITTED["dpc_transpose"]
    r = np.corrcoef(result.phase.ravel(), REFERENCE["dpc_phase"].ravel())[0, 1]
    assert r >= 0.95


def shift_model(fit, angles: np.ndarray, step: float) -> np.ndarray:
    phi = math.radians(fit.phi12_deg)
    c12a, c12b = fit.c12_angstrom * math.cos(2 * phi), fit.c12_angstrom * math.sin(2 * phi)
    a = np.array([[fit.c10_angstrom + c12a, c12b], [c12b, fit.c10_angstrom - c12a]])
    t = math.radians(fit.rotation_deg)
    rot = np.array([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]])
    return -(angles @ a.T) @ rot.T / step


def test_parallax_agrees_with_py4dstem():
    step = TRUTH["datasets"]["defocus"]["scan_step_angstrom"]
    with load(DATA / TRUTH["datasets"]["defocus"]["files"]["high"]) as acq:
        result = parallax(acq, calibration=calibration("defocus"), max_shift=3.0)
    fit = result.fit
    c1 = FITTED["parallax_C1_angstrom"]
    assert abs(fit.c10_angstrom - c1) <= 0.03 * abs(c1)
    assert abs(fit.rotation_deg - FITTED["parallax_rotation_deg"]) <= 0.5
    assert fit.transpose is FITTED["parallax_transpose"]
    angles = REFERENCE["parallax_probe_angles_rad"].astype(np.float64)
    theirs = -REFERENCE["parallax_shifts_px"].astype(np.float64)
    ours = shift_model(fit, angles, step)
    difference = (ours - ours.mean(axis=0)) - (theirs - theirs.mean(axis=0))
    assert float(np.sqrt(np.mean(np.sum(difference**2, axis=1)))) <= 0.1
    # The fit itself: our polar decomposition on their shifts gives their numbers.
    same = fit_aberrations(theirs, angles, (step, step))
    assert same.c10_angstrom == pytest.approx(c1, rel=1e-6)
    assert same.rotation_deg == pytest.approx(FITTED["parallax_rotation_deg"], abs=1e-5)
