"""Simulate SrTiO3 [001] 4D-STEM with abTEM and write it in the ARINA layout (test fixtures).

Run from the repository root (abTEM and ase installed; 2 cores take about a minute)::

    PYTHONPATH=$PWD python tools/simulate_srtio3.py tests/data/srtio3

Writes, for each dataset and dose, ``<name>_master.h5`` + shard (quantem's ARINA writer,
bitshuffle-LZ4), and ``srtio3_truth.npz`` + ``srtio3_truth.json``: the projected
potential sampled at the scan positions, the calibration, the known defocus and
rotation, and the versions of every package used. Frames are Poisson draws from a fixed
seed. The committed fixtures are the output of one full run of this script (2026-12-01,
about 10 minutes on the shared 2-core VM); an earlier run with the same code gave the
same projected potential bit for bit but different counts in about half the pixels, so
treat a rerun as statistically equivalent, not byte-identical (the physics and py4DSTEM
tests passed on both).

Datasets (one crystal, ``CELLS`` x ``CELLS`` unit cells, ``THICKNESS_CELLS`` thick):

* ``focus``: probe focused on the specimen's mid-plane, for iDPC against the potential;
* ``defocus``: a known defocus, for parallax (C10 and rotation);

both with the detector rotated by ``ROTATION_DEG`` against the scan (the patterns are
resampled: ``P'(k) = P(R(theta) k)`` about the optical axis, so the rotation that maps a
detector-frame vector into scan axes is ``+ROTATION_DEG``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

CELL = 3.905  # SrTiO3 lattice constant, angstrom
CELLS = 3  # unit cells per side of the (periodic) scan window
THICKNESS_CELLS = 5  # 1.95 nm
ENERGY_EV = 200e3
SEMIANGLE_MRAD = 20.0
SAMPLING = 0.05  # potential sampling, angstrom
SLICE_THICKNESS = CELL / 4
SCAN_PER_CELL = 8  # scan step CELL / 8 = 0.488 A
DETECTOR = 32  # detector pixels per side (cropped around the optical axis)
ROTATION_DEG = 12.0
DEFOCUS_ANGSTROM = 60.0  # abTEM's defocus (= -C10) of the "defocus" dataset at mid-plane
DOSES = {"high": 2.0e5, "low": 2.0e4}  # electrons per probe position
SEED = 20261201


def versions() -> dict:
    import importlib.metadata as md

    out = {"python": sys.version.split()[0]}
    for name in ("abtem", "ase", "numpy", "scipy", "dask", "h5py", "hdf5plugin", "bitshuffle"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def crystal():
    from ase import Atoms

    unit = Atoms(
        "SrTiO3",
        scaled_positions=[(0, 0, 0), (0.5, 0.5, 0.5), (0.5, 0.5, 0), (0.5, 0, 0.5), (0, 0.5, 0.5)],
        cell=[CELL] * 3,
        pbc=True,
    )
    return unit * (CELLS, CELLS, THICKNESS_CELLS)


def simulate(defocus_mid: float):
    """Noise-free patterns (scan_r, scan_c, det, det) and the angular pixel size (mrad)."""
    import abtem

    atoms = crystal()
    thickness = CELL * THICKNESS_CELLS
    potential = abtem.Potential(
        atoms, sampling=SAMPLING, slice_thickness=SLICE_THICKNESS, projection="finite"
    )
    # abTEM's defocus is measured from the entrance surface; the mid-plane is t/2 deeper.
    probe = abtem.Probe(
        energy=ENERGY_EV, semiangle_cutoff=SEMIANGLE_MRAD, defocus=defocus_mid + thickness / 2
    )
    step = CELL / SCAN_PER_CELL
    n_scan = CELLS * SCAN_PER_CELL
    scan = abtem.GridScan(
        start=(0, 0), end=(CELLS * CELL, CELLS * CELL), gpts=(n_scan, n_scan), endpoint=False
    )
    detector = abtem.PixelatedDetector(max_angle="valid")
    measurement = probe.scan(potential, scan=scan, detectors=detector).compute()
    patterns = np.asarray(measurement.array)
    angular = np.asarray(measurement.angular_sampling, dtype=float)
    return patterns, angular, step, potential


def crop_and_rotate(patterns: np.ndarray) -> np.ndarray:
    from scipy.ndimage import map_coordinates

    n_r, n_c = patterns.shape[-2:]
    centre = np.array([n_r // 2, n_c // 2], dtype=float)  # abTEM's optical axis (fftshifted)
    half = DETECTOR // 2
    rows, cols = np.mgrid[-half:half, -half:half].astype(float)
    a = np.radians(ROTATION_DEG)
    # P'(k) = P(R(theta) k): sample the unrotated pattern at R(theta) k.
    src_r = centre[0] + np.cos(a) * rows - np.sin(a) * cols
    src_c = centre[1] + np.sin(a) * rows + np.cos(a) * cols
    flat = patterns.reshape(-1, n_r, n_c)
    out = np.empty((flat.shape[0], DETECTOR, DETECTOR))
    for i, p in enumerate(flat):
        out[i] = map_coordinates(p, [src_r, src_c], order=1, mode="constant")
    return out.reshape(*patterns.shape[:2], DETECTOR, DETECTOR)


def projected_potential_at_scan(potential) -> np.ndarray:
    """The projected potential (V*A) sampled at the scan positions (Fourier resampling)."""
    projected = np.asarray(potential.project().compute().array, dtype=float)
    n = CELLS * SCAN_PER_CELL
    spectrum = np.fft.fft2(projected)
    keep = np.zeros((n, n), dtype=complex)
    h = n // 2
    keep[:h, :h] = spectrum[:h, :h]
    keep[:h, -h:] = spectrum[:h, -h:]
    keep[-h:, :h] = spectrum[-h:, :h]
    keep[-h:, -h:] = spectrum[-h:, -h:]
    return np.fft.ifft2(keep).real * (n * n) / projected.size


def main(out_dir: str) -> None:
    from quantem.stem4d.io.synthetic import write_arina_frames

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    truth: dict = {
        "cell_angstrom": CELL,
        "cells": CELLS,
        "thickness_angstrom": CELL * THICKNESS_CELLS,
        "energy_ev": ENERGY_EV,
        "semiangle_mrad": SEMIANGLE_MRAD,
        "rotation_deg": ROTATION_DEG,
        "doses": DOSES,
        "seed": SEED,
        "versions": versions(),
        "datasets": {},
    }
    arrays = {}
    for name, defocus in (("focus", 0.0), ("defocus", DEFOCUS_ANGSTROM)):
        patterns, angular, step, potential = simulate(defocus)
        if "projected_potential" not in arrays:
            arrays["projected_potential"] = projected_potential_at_scan(potential)
        rotated = crop_and_rotate(patterns)
        rotated /= rotated.sum(axis=(2, 3), keepdims=True).mean()  # probability per pixel
        truth["datasets"][name] = {
            "defocus_mid_plane_angstrom": defocus,
            "C10_mid_plane_angstrom": -defocus,
            "mrad_per_pixel": float(angular.mean()),
            "scan_step_angstrom": step,
            "files": {},
        }
        for dose_name, dose in DOSES.items():
            counts = rng.poisson(rotated * dose).astype(np.uint16)
            file_name = f"srtio3_{name}_{dose_name}"
            write_arina_frames(out, file_name, counts, overwrite=True)
            truth["datasets"][name]["files"][dose_name] = f"{file_name}_master.h5"
    np.savez_compressed(out / "srtio3_truth.npz", **arrays)
    (out / "srtio3_truth.json").write_text(json.dumps(truth, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/srtio3")
