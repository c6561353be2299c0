"""Simulate the validation matrix (SrTiO3 [001], abTEM) and write it as small ARINA fixtures.

Run from the repository root with the ``simulate`` extra installed (versions pinned in
``PINNED``; the script refuses others)::

    PYTHONPATH=$PWD python tools/simulate_validation.py tests/data/validation

Each cell of ``CELLS`` is one multislice simulation (thickness, defocus, scan window);
rotations and doses are applied afterwards (the detector resampled, then Poisson counts
from ``SEED``), so one simulation serves several acquisitions. Writes per acquisition
``<name>_master.h5`` + shard (quantem's ARINA writer, bitshuffle-LZ4), the projected
potential of each thickness at the scan sampling (``truth.npz``), and ``truth.json``:
every parameter as a user would read it off the simulation, the versions, and the
SHA-256 of every file written.

Conventions (written into truth.json): abTEM's ``defocus`` is ``-C10`` of the probe at
the entrance surface of the slab; at the slab's middle the probe's ``C10`` is
``C10_entrance + t / 2``. The detector is rotated by ``rotation_deg``:
``P'(k) = P(R(theta) k)``, so the rotation that maps a detector vector into scan axes is
``+rotation_deg``. Scan and detector axes are abTEM's (x, y) = (rows, columns).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

LATTICE_A = 3.905  # SrTiO3 cubic lattice constant, angstrom
ENERGY_EV = 300e3
SEMIANGLE_MRAD = 25.0
SCAN_PER_CELL = 8  # scan positions per unit cell: step 0.488 A
POTENTIAL_PER_CELL = 40  # potential grid points per unit cell: 0.098 A
DETECTOR_HALF_MRAD = 35.0  # the cropped detector reaches 1.4 semiangles
DETECTOR_BIN = 3  # the simulated detector pixels binned 3 x 3 (3.8 mrad, BF radius 6.6 px)
DOSES = {"high": 1.0e5, "low": 1.0e4}  # electrons per square angstrom
SEED = 20261205
PINNED = {"abtem": "1.0.11", "ase": "3.29.0"}

# name: (thickness in unit cells, abTEM defocus at the entrance surface in A,
#        scan window in unit cells (rows, cols), detector rotations in degrees, doses);
# the low dose only where it adds a case, to keep the committed fixtures small.
CELLS = {
    "t1nm_df0": (3, 0.0, (4, 4), (0.0,), ("high", "low")),
    "t4nm_df3nm": (10, 30.0, (4, 4), (0.0, 15.0), ("high", "low")),
    "t4nm_dfm20nm": (10, -200.0, (4, 4), (0.0,), ("high",)),
    "t2nm_df10nm_rect": (5, 100.0, (4, 6), (15.0,), ("high",)),
    "t10nm_df20nm": (26, 200.0, (4, 4), (15.0,), ("high", "low")),
    "t10nm_df0": (26, 0.0, (4, 4), (0.0,), ("high",)),
}


def versions() -> dict:
    import importlib.metadata as md

    out = {"python": sys.version.split()[0]}
    for name in ("abtem", "ase", "numpy", "scipy", "h5py", "hdf5plugin"):
        out[name] = md.version(name)
    return out


def crystal(cells_z: int, window: tuple[int, int]):
    from ase import Atoms

    unit = Atoms(
        "SrTiO3",
        scaled_positions=[(0, 0, 0), (0.5, 0.5, 0.5), (0.5, 0.5, 0), (0.5, 0, 0.5), (0, 0.5, 0.5)],
        cell=[LATTICE_A] * 3,
        pbc=True,
    )
    return unit * (window[0], window[1], cells_z)


def simulate(cells_z: int, defocus: float, window: tuple[int, int]):
    """Noise-free patterns, their angular sampling (mrad per axis), the projected potential."""
    import abtem

    abtem.config.set({"device": "cpu", "precision": "float32"})
    potential = abtem.Potential(
        crystal(cells_z, window),
        gpts=(window[0] * POTENTIAL_PER_CELL, window[1] * POTENTIAL_PER_CELL),
        slice_thickness=LATTICE_A / 2,
        projection="infinite",
        parametrization="lobato",
    )
    probe = abtem.Probe(energy=ENERGY_EV, semiangle_cutoff=SEMIANGLE_MRAD, defocus=defocus)
    extent = (window[0] * LATTICE_A, window[1] * LATTICE_A)
    scan = abtem.GridScan(
        start=(0, 0),
        end=extent,
        gpts=(window[0] * SCAN_PER_CELL, window[1] * SCAN_PER_CELL),
        endpoint=False,
    )
    measured = probe.scan(
        potential, scan=scan, detectors=abtem.PixelatedDetector(max_angle="cutoff")
    ).compute()
    patterns = np.asarray(measured.array, dtype=np.float64)
    sampling = tuple(float(s) for s in measured.angular_sampling)
    projected = np.asarray(potential.project().compute().array, dtype=np.float64)
    return patterns, sampling, projected, float(probe.wavelength)


def detector_frames(patterns: np.ndarray, sampling: tuple[float, float], rotation_deg: float):
    """Rotate, resample onto square pixels and bin: (scan_r, scan_c, det, det) probabilities."""
    from scipy.ndimage import map_coordinates

    fine = min(sampling)
    half = round(DETECTOR_HALF_MRAD / (fine * DETECTOR_BIN)) * DETECTOR_BIN
    k_r, k_c = (np.mgrid[-half:half, -half:half].astype(float) + 0.5) * fine
    a = np.radians(rotation_deg)
    centre = np.array(patterns.shape[-2:]) // 2  # abTEM's optical axis (fftshifted)
    src_r = centre[0] + (np.cos(a) * k_r - np.sin(a) * k_c) / sampling[0] - 0.5
    src_c = centre[1] + (np.sin(a) * k_r + np.cos(a) * k_c) / sampling[1] - 0.5
    density = fine * fine / (sampling[0] * sampling[1])  # probability per resampled pixel
    flat = patterns.reshape(-1, *patterns.shape[-2:])
    n = 2 * half // DETECTOR_BIN
    out = np.empty((flat.shape[0], n, n))
    for i, p in enumerate(flat):
        resampled = map_coordinates(p, [src_r, src_c], order=1, mode="constant") * density
        out[i] = resampled.reshape(n, DETECTOR_BIN, n, DETECTOR_BIN).sum(axis=(1, 3))
    return out.reshape(*patterns.shape[:2], n, n), fine * DETECTOR_BIN


def potential_at_scan(projected: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """The projected potential (V*A) at the scan positions (Fourier resampling, periodic)."""
    spectrum = np.fft.fft2(projected)
    keep = np.zeros(shape, dtype=complex)
    hr, hc = shape[0] // 2, shape[1] // 2
    for rows in (slice(0, hr), slice(-hr, None)):
        for cols in (slice(0, hc), slice(-hc, None)):
            keep[rows, cols] = spectrum[rows, cols]
    return np.fft.ifft2(keep).real * (shape[0] * shape[1]) / projected.size


def write_manifest(out: Path, truth: dict) -> None:
    """``manifest.json``: every acquisition, for ``harness run compute validate --source``."""
    import quantem.stem4d.io
    from harness.run.manifest import dump_manifest, manifest_entry

    entries = []
    for cell in truth["cells"].values():
        for name, entry in sorted(cell["acquisitions"].items()):
            with quantem.stem4d.io.load(out / entry["master"]) as acq:
                shape, dtype = acq.array.shape, str(acq.array.dtype)
            scan, det = (shape[0], shape[1]), (shape[2], shape[3])
            entries.append(manifest_entry(name, out / entry["master"], out, scan, det, dtype))
    description = "the validation matrix (tools/simulate_validation.py)"
    (out / "manifest.json").write_bytes(dump_manifest(entries, description=description))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(out_dir: str, only: list[str]) -> None:
    from quantem.stem4d.io.synthetic import write_arina_frames

    found = versions()
    for name, version in PINNED.items():
        if found[name] != version:
            raise SystemExit(f"{name} {found[name]} installed; the fixtures pin {version}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    truth_path = out / "truth.json"
    truth = json.loads(truth_path.read_text()) if truth_path.exists() else {}
    truth.update(
        {
            "description": __doc__.splitlines()[0],
            "lattice_a": LATTICE_A,
            "energy_ev": ENERGY_EV,
            "semiangle_mrad": SEMIANGLE_MRAD,
            "scan_step_a": LATTICE_A / SCAN_PER_CELL,
            "doses_e_per_a2": DOSES,
            "seed": SEED,
            "versions": found,
            "conventions": {
                "defocus": "abTEM defocus = -C10 of the probe at the entrance surface",
                "c10_mid_plane": "C10 at the slab's middle = C10 at the entrance + t / 2",
                "rotation": "P'(k) = P(R(theta) k): +rotation_deg maps detector into scan axes",
                "axes": "scan and detector axes are abTEM's (x, y) = (rows, columns)",
            },
        }
    )
    cells = truth.setdefault("cells", {})
    potentials = dict(np.load(out / "truth.npz")) if (out / "truth.npz").exists() else {}
    for index, (name, (cells_z, defocus, window, rotations, doses)) in enumerate(CELLS.items()):
        if only and name not in only:
            continue
        print(f"simulating {name}", flush=True)
        patterns, sampling, projected, wavelength = simulate(cells_z, defocus, window)
        scan_shape = patterns.shape[:2]
        potentials[name] = potential_at_scan(projected, scan_shape).astype(np.float32)
        thickness = cells_z * LATTICE_A
        cell = {
            "thickness_a": thickness,
            "defocus_entrance_a": defocus,
            "c10_entrance_a": -defocus,
            "c10_mid_plane_a": -defocus + thickness / 2,
            "scan_shape": list(scan_shape),
            "wavelength_a": wavelength,
            "acquisitions": {},
        }
        rng = np.random.default_rng([SEED, index])
        for rotation in rotations:
            frames, mrad_per_pixel = detector_frames(patterns, sampling, rotation)
            cell["mrad_per_pixel"] = mrad_per_pixel
            for dose_name in doses:
                dose = DOSES[dose_name]
                per_position = dose * (LATTICE_A / SCAN_PER_CELL) ** 2
                counts = rng.poisson(frames * per_position)
                dtype = np.uint8 if counts.max() < 255 else np.uint16
                file_name = f"{name}_rot{rotation:g}_{dose_name}"
                write_arina_frames(out, file_name, counts.astype(dtype), overwrite=True)
                cell["acquisitions"][file_name] = {
                    "rotation_deg": rotation,
                    "dose": dose_name,
                    "master": f"{file_name}_master.h5",
                }
        cells[name] = cell
    np.savez_compressed(out / "truth.npz", **potentials)
    write_manifest(out, truth)
    truth["sha256"] = {
        p.name: sha256(p) for p in sorted(out.iterdir()) if p.suffix in (".h5", ".npz")
    }
    truth_path.write_text(json.dumps(truth, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/validation", sys.argv[2:])
