"""Simulate the validation matrix's 1.2 nm SrTiO3 in focus as a weak phase object: a fixture.

In focus a weak phase object gives parallax shifts that are not those of one defocus (the
disk-edge images carry one-sided contrast), yet fit a C10 far from zero with a small
standard error (docs/records/reference-plane-study.json). This writes that case as a small
ARINA fixture for ``tests/test_parallax_focus.py``: the cell ``t1nm_df0`` of
``simulate_validation.CELLS`` (3 unit cells, abTEM defocus 0 at the entrance surface, 4 x 4
cells scanned at 32 x 32), its potential multiplied by :data:`SCALE`
(``reference_plane_study.simulate_scaled``), the detector resampled and binned as the matrix
(rotation 0), Poisson counts at :data:`DOSE` electrons per square angstrom from :data:`SEED`.
Run from the repository root (abTEM pinned as in ``simulate_validation``; under a minute)::

    PYTHONPATH=$PWD python tools/simulate_weak_focus.py tests/data/weak_focus

Writes ``weak_focus_master.h5`` + shard and ``truth.json`` (the parameters a user would read
off the simulation, the truth, the versions and the SHA-256 of the files).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import reference_plane_study
import simulate_validation as sim

CELL = "t1nm_df0"
SCALE = 0.05  # the potential's factor: a weak phase object
DOSE = 1.0e7  # electrons per square angstrom: the weak contrast stays above the noise
SEED = 20261206


def main(out_dir: str) -> None:
    from quantem.stem4d.io.synthetic import write_arina_frames

    found = sim.versions()
    for name, version in sim.PINNED.items():
        if found[name] != version:
            raise SystemExit(f"{name} {found[name]} installed; the fixtures pin {version}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cells_z, defocus, window, _, _ = sim.CELLS[CELL]
    patterns, sampling, _, wavelength = reference_plane_study.simulate_scaled(
        cells_z, defocus, window, SCALE
    )
    frames, mrad_per_pixel = sim.detector_frames(patterns, sampling, 0.0)
    per_position = DOSE * (sim.LATTICE_A / sim.SCAN_PER_CELL) ** 2
    counts = np.random.default_rng(SEED).poisson(frames * per_position)
    if counts.max() > np.iinfo(np.uint16).max:
        raise SystemExit(f"{counts.max()} counts do not fit uint16")
    master = write_arina_frames(out, "weak_focus", counts.astype(np.uint16), overwrite=True)
    thickness = cells_z * sim.LATTICE_A
    truth = {
        "description": __doc__.splitlines()[0],
        "cell": CELL,
        "potential_scale": SCALE,
        "dose_e_per_a2": DOSE,
        "seed": SEED,
        "versions": found,
        "energy_ev": sim.ENERGY_EV,
        "semiangle_mrad": sim.SEMIANGLE_MRAD,
        "scan_step_a": sim.LATTICE_A / sim.SCAN_PER_CELL,
        "mrad_per_pixel": mrad_per_pixel,
        "wavelength_a": wavelength,
        "rotation_deg": 0.0,
        "thickness_a": thickness,
        "defocus_entrance_a": defocus,
        "c10_entrance_a": -defocus,
        "c10_mid_plane_a": -defocus + thickness / 2,
        "master": master.name,
        "sha256": {p.name: sim.sha256(p) for p in sorted(out.iterdir()) if p.suffix == ".h5"},
    }
    (out / "truth.json").write_text(json.dumps(truth, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
