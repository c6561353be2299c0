"""Which plane of a thick slab parallax and SSB measure C10 at: a study, not the method.

Re-simulates cells of the validation matrix (``tools/simulate_validation.py``, same crystal,
optics and detector, rotation 0) with the projected potential of every slice multiplied by
``scale``, nearly without noise (counts rounded at 1e8 electrons per square angstrom). At
``scale`` 1 it is the matrix's specimen; at a small ``scale`` the specimen is a weak phase
object, the approximation parallax and SSB are built on, for which the image of a uniform
slab is the depth average of its slices' images and the measured C10 that of the slab's
middle (``C10_entrance + t / 2``; abTEM's probe is built at the potential's entrance surface,
``defocus = -C10``). Each simulation runs through the validate workload's stages
(:mod:`harness.run.compute.validate`, the simulation's defocus and rotation as the parallax
guess) and prints the fitted C10 against both planes and the SSB images' correlation with
the projected potential. Run from the repository root (abTEM pinned as in
``simulate_validation``; a few minutes a cell on 2 cores)::

    PYTHONPATH=$PWD python tools/reference_plane_study.py OUT.json [CELL:SCALE ...]

with cells of ``simulate_validation.CELLS`` (default: the 4 nm and 10 nm cells at scales 1
and 0.05). ``OUT.json`` gets every score (an existing one is added to). The committed
``docs/records/reference-plane-study.json`` is its output for every cell at 1 and 0.05.
"""

from __future__ import annotations

import json
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import simulate_validation as sim

DOSE = 1.0e8  # electrons per square angstrom: rounding, not Poisson noise
DEFAULT = ("t4nm_df3nm:1", "t4nm_df3nm:0.05", "t10nm_df0:1", "t10nm_df0:0.05")


def simulate_scaled(cells_z: int, defocus: float, window: tuple[int, int], scale: float):
    """:func:`simulate_validation.simulate` with the potential multiplied by ``scale``."""
    import abtem

    abtem.config.set({"device": "cpu", "precision": "float32"})
    potential = abtem.Potential(
        sim.crystal(cells_z, window),
        gpts=(window[0] * sim.POTENTIAL_PER_CELL, window[1] * sim.POTENTIAL_PER_CELL),
        slice_thickness=sim.LATTICE_A / 2,
        projection="infinite",
        parametrization="lobato",
    )
    built = potential.build().compute()
    scaled = abtem.PotentialArray(
        np.asarray(built.array) * scale,
        slice_thickness=built.slice_thickness,
        sampling=built.sampling,
    )
    probe = abtem.Probe(energy=sim.ENERGY_EV, semiangle_cutoff=sim.SEMIANGLE_MRAD, defocus=defocus)
    scan = abtem.GridScan(
        start=(0, 0),
        end=(window[0] * sim.LATTICE_A, window[1] * sim.LATTICE_A),
        gpts=(window[0] * sim.SCAN_PER_CELL, window[1] * sim.SCAN_PER_CELL),
        endpoint=False,
    )
    measured = probe.scan(
        scaled, scan=scan, detectors=abtem.PixelatedDetector(max_angle="cutoff")
    ).compute()
    patterns = np.asarray(measured.array, dtype=np.float64)
    sampling = tuple(float(s) for s in measured.angular_sampling)
    projected = np.asarray(potential.project().compute().array, dtype=np.float64)
    return patterns, sampling, projected, float(probe.wavelength)


def study(name: str, scale: float, folder: Path) -> dict:
    """One cell at one scale through the validate stages: its scores."""
    from harness.run.compute import validate
    from quantem.stem4d.errors import CalibrationWarning, ParallaxWarning
    from quantem.stem4d.io import load
    from quantem.stem4d.io.synthetic import write_arina_frames
    from quantem.stem4d.virtual import open_frames

    cells_z, defocus, window, _, _ = sim.CELLS[name]
    patterns, sampling, projected, wavelength = simulate_scaled(cells_z, defocus, window, scale)
    frames, mrad_per_pixel = sim.detector_frames(patterns, sampling, 0.0)
    counts = np.rint(frames * DOSE * (sim.LATTICE_A / sim.SCAN_PER_CELL) ** 2)
    master = write_arina_frames(folder, name, counts.astype(np.uint32), overwrite=True)
    thickness = cells_z * sim.LATTICE_A
    truth = {
        "energy_ev": sim.ENERGY_EV,
        "semiangle_mrad": sim.SEMIANGLE_MRAD,
        "scan_step_a": sim.LATTICE_A / sim.SCAN_PER_CELL,
        "cells": {
            name: {
                "thickness_a": thickness,
                "defocus_entrance_a": defocus,
                "c10_entrance_a": -defocus,
                "c10_mid_plane_a": -defocus + thickness / 2,
                "scan_shape": list(patterns.shape[:2]),
                "wavelength_a": wavelength,
                "mrad_per_pixel": mrad_per_pixel,
                "acquisitions": {
                    name: {"rotation_deg": 0.0, "dose": "high", "master": master.name}
                },
            }
        },
    }
    (folder / "truth.json").write_text(json.dumps(truth))
    np.savez(folder / "truth.npz", **{name: sim.potential_at_scan(projected, patterns.shape[:2])})
    with load(master) as acq, warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)
        warnings.simplefilter("ignore", ParallaxWarning)
        state = {"path": master, "acq": acq, "frames": open_frames(acq)}
        for stage in (
            validate.validate_truth,
            validate.validate_dpc,
            validate.validate_parallax,
            validate.validate_ssb,
        ):
            stage(state)
        scores = validate.scores(state)
    return {"cell": name, "scale": scale, **scores}


def main(out: str, requested: list[str]) -> None:
    path = Path(out)
    document = {
        "made_by": "tools/reference_plane_study.py",
        "versions": sim.versions(),
        "dose_e_per_a2": DOSE,
        "results": [],
    }
    if path.exists():  # runs add to the same document, one cell and scale at a time
        document["results"] = json.loads(path.read_text())["results"]
    results = document["results"]
    for item in requested or DEFAULT:
        name, scale = item.split(":")
        with tempfile.TemporaryDirectory() as tmp:
            result = study(name, float(scale), Path(tmp))
        results.append(result)
        print(
            f"{name} x{float(scale):g}: C10 entrance {result['c10_entrance_a']:.1f}, mid "
            f"{result['c10_mid_plane_a']:.1f} | parallax {result['parallax_c10_a']:.1f} +- "
            f"{result['parallax_c10_uncertainty_a']:.2g} | SSB {result['ssb_fitted_c10_a']:.1f} "
            f"| SSB r uncorrected {result['ssb_uncorrected']['r']:.3f} fitted "
            f"{result['ssb_fitted']['r']:.3f} | iDPC r {result['idpc']['r']:.3f}",
            flush=True,
        )
        path.write_text(json.dumps(document, indent=1, sort_keys=True, default=str) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
