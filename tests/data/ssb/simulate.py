"""Simulate the SSB test fixtures with abTEM: SrTiO3 [001], a thin and a thicker slab.

Run from the repository root (needs abTEM and ASE, which the project does not depend on)::

    python tests/data/ssb/simulate.py

Writes, next to this script, for each sample (``thin``, ``thick``) and dose (``high``,
``low``) an ARINA acquisition ``sto_<sample>_<dose>_master.h5`` + ``_data_000001.h5``
(Poisson counts, uint8 where they fit else uint16, bitshuffle-LZ4, the layout of ``quantem.io.arina_layout``, chunks
made by ``quantem.io.synthetic.encode_chunk``), the projected potential of each sample at
the scan sampling (``sto_<sample>_potential.npy``, float32, V*Angstrom) and
``fixtures.json`` with the calibration, the simulated aberrations and the versions used.

The detector is cropped to a square around the bright-field disk (all SSB uses) so the
fixtures stay small; the scan covers exactly 3x3 unit cells, so the scan is periodic.
Everything depends only on the constants below and the noise seed.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from quantem.io import arina_layout as layout  # noqa: E402
from quantem.io.synthetic import encode_chunk  # noqa: E402

LATTICE_A = 3.905  # SrTiO3 cubic lattice parameter, Angstrom
CELLS = 3  # unit cells along each scan axis
SCAN_GPTS = 48  # scan positions along each axis (step = CELLS * a / SCAN_GPTS)
POTENTIAL_GPTS = 240  # potential grid along each axis (5 grid points per scan step)
ENERGY_EV = 200e3
SEMIANGLE_MRAD = 25.0
# Krivanek notation, abTEM's sign convention: chi = 2 pi / lambda * (C10 a^2 / 2 + ...).
ABERRATIONS = {"C10": 50.0, "C12": 20.0, "phi12": np.deg2rad(30.0)}  # Angstrom, radians
SAMPLES = {"thin": 4, "thick": 12}  # unit cells along the beam
# Electrons per square Angstrom; per probe position multiply by the step squared.
DOSES = {"high": 1.0e5, "low": 5.0e3}
CROP_HALF = 12  # detector crop: (2 * CROP_HALF) pixels around the undiffracted beam
NOISE_SEED = 16


def srtio3_cell():
    from ase import Atoms

    a = LATTICE_A
    return Atoms(
        "SrTiO3",
        scaled_positions=[(0, 0, 0), (0.5, 0.5, 0.5), (0.5, 0.5, 0), (0.5, 0, 0.5), (0, 0.5, 0.5)],
        cell=[a, a, a],
        pbc=True,
    )


def simulate(cells_z: int):
    import abtem

    abtem.config.set({"device": "cpu", "precision": "float64"})
    atoms = srtio3_cell() * (CELLS, CELLS, cells_z)
    potential = abtem.Potential(
        atoms,
        gpts=POTENTIAL_GPTS,
        slice_thickness=LATTICE_A / 2,
        projection="infinite",
        parametrization="lobato",
    )
    probe = abtem.Probe(
        energy=ENERGY_EV, semiangle_cutoff=SEMIANGLE_MRAD, aberrations=dict(ABERRATIONS)
    )
    extent = CELLS * LATTICE_A
    scan = abtem.GridScan(start=(0, 0), end=(extent, extent), gpts=SCAN_GPTS, endpoint=False)
    detector = abtem.PixelatedDetector(max_angle="cutoff")
    patterns = probe.scan(potential, scan=scan, detectors=detector).compute()
    intensity = np.asarray(patterns.array, dtype=np.float64)
    sampling_mrad = tuple(float(s) for s in patterns.angular_sampling)
    projected = np.asarray(potential.project().compute().array, dtype=np.float64)
    return intensity, sampling_mrad, projected, probe.wavelength


def fourier_downsample(image: np.ndarray, n: int) -> np.ndarray:
    """Band-limited resampling of a periodic image onto an n x n grid."""
    spectrum = np.fft.fftshift(np.fft.fft2(image))
    c = image.shape[0] // 2
    cropped = spectrum[c - n // 2 : c + n // 2, c - n // 2 : c + n // 2]
    scale = n * n / image.size
    return np.real(np.fft.ifft2(np.fft.ifftshift(cropped))) * scale


def write_arina(counts: np.ndarray, directory: Path, name: str, pixel_size_m: float) -> Path:
    """Write (scan_r, scan_c, det_r, det_c) counts as a one-shard ARINA acquisition.

    uint8 when every count fits below the saturation value 254, else uint16 (smaller
    fixtures; the reader widens either).
    """
    import h5py
    import hdf5plugin

    scan_r, scan_c, det_r, det_c = counts.shape
    dtype = np.uint8 if counts.max() < 254 else np.uint16
    frames = counts.reshape(scan_r * scan_c, det_r, det_c).astype(dtype)
    shard_name = layout.shard_file_name(name, layout.SHARD_FIRST_INDEX)
    with h5py.File(directory / shard_name, "w") as f:
        dset = f.create_dataset(
            layout.SHARD_DATASET,
            shape=frames.shape,
            dtype=dtype,
            chunks=(1, det_r, det_c),
            **hdf5plugin.Bitshuffle(nelems=0, cname="lz4"),
        )
        dset.attrs["image_nr_low"] = np.uint64(1)
        dset.attrs["image_nr_high"] = np.uint64(len(frames))
        for i, frame in enumerate(frames):
            dset.id.write_direct_chunk((i, 0, 0), encode_chunk(frame))
    master = directory / f"{name}{layout.MASTER_SUFFIX}"
    with h5py.File(master, "w") as f:
        f.require_group("/entry").attrs["NX_class"] = "NXentry"
        data = f.require_group(layout.DATA_GROUP)
        data.attrs[layout.SCAN_SHAPE_ATTR] = np.asarray((scan_r, scan_c), dtype=np.int64)
        data[layout.shard_link_name(layout.SHARD_FIRST_INDEX)] = h5py.ExternalLink(
            shard_name, layout.SHARD_DATASET
        )
        det = f.require_group(layout.DETECTOR_GROUP)
        det[layout.DESCRIPTION] = np.bytes_(b"abTEM SrTiO3 [001] simulation (quantem ssb fixture)")
        det[layout.BIT_DEPTH_IMAGE] = np.uint32(8 * np.dtype(dtype).itemsize)
        det[layout.SATURATION_VALUE] = np.uint32(np.iinfo(dtype).max - 1)
        for key, value, unit in (
            (layout.X_PIXEL_SIZE, pixel_size_m, "m"),
            (layout.Y_PIXEL_SIZE, pixel_size_m, "m"),
            (layout.DETECTOR_DISTANCE, 0.1, "m"),
            (layout.COUNT_TIME, 9.5e-6, "s"),
            (layout.FRAME_TIME, 1e-5, "s"),
        ):
            det[key] = np.float64(value)
            det[key].attrs["units"] = unit
        spec = f.require_group(layout.DETECTOR_SPECIFIC_GROUP)
        spec[layout.NTRIGGER] = np.uint64(len(frames))
        spec[layout.NIMAGES] = np.uint64(1)
        spec[layout.X_PIXELS] = np.uint32(det_c)
        spec[layout.Y_PIXELS] = np.uint32(det_r)
        spec.create_dataset(layout.PIXEL_MASK, data=np.zeros((det_r, det_c), dtype=np.uint32))
    return master


def main() -> None:
    import abtem
    import ase

    step = CELLS * LATTICE_A / SCAN_GPTS
    record: dict = {
        "description": __doc__.splitlines()[0],
        "versions": {
            "abtem": abtem.__version__,
            "ase": ase.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
        },
        "energy_ev": ENERGY_EV,
        "semiangle_mrad": SEMIANGLE_MRAD,
        "scan_step_a": step,
        "scan_gpts": SCAN_GPTS,
        "rotation_deg": 0.0,
        "aberrations": {
            "C10": ABERRATIONS["C10"],
            "C12": ABERRATIONS["C12"],
            "phi12": float(ABERRATIONS["phi12"]),
        },
        "aberration_units": "C in Angstrom, phi in radians, abTEM/Krivanek convention",
        "axes": "scan and detector axes are abTEM's (x, y) = (rows, columns)",
        "doses_e_per_a2": DOSES,
        "noise_seed": NOISE_SEED,
        "samples": {},
    }
    rng = np.random.default_rng(NOISE_SEED)
    for sample, cells_z in SAMPLES.items():
        print(f"simulating {sample} ({cells_z} cells)", flush=True)
        intensity, sampling_mrad, projected, wavelength = simulate(cells_z)
        record["wavelength_a"] = float(wavelength)
        centre = intensity.shape[-1] // 2
        crop = intensity[
            ..., centre - CROP_HALF : centre + CROP_HALF, centre - CROP_HALF : centre + CROP_HALF
        ]
        # abTEM normalises the probe to unit intensity, so crop.sum() per frame is the
        # share of the electrons inside the crop.
        potential = fourier_downsample(projected, SCAN_GPTS).astype(np.float32)
        np.save(HERE / f"sto_{sample}_potential.npy", potential)
        record["samples"][sample] = {
            "thickness_a": cells_z * LATTICE_A,
            "unit_cells_z": cells_z,
            "detector_sampling_mrad": list(sampling_mrad),
            "undiffracted_beam_pixel": [CROP_HALF, CROP_HALF],
            "files": {},
        }
        for dose_name, dose in DOSES.items():
            counts = rng.poisson(crop * dose * step * step)
            name = f"sto_{sample}_{dose_name}"
            pixel_size_m = 0.1 * sampling_mrad[0] * 1e-3
            write_arina(counts, HERE, name, pixel_size_m)
            record["samples"][sample]["files"][dose_name] = f"{name}{layout.MASTER_SUFFIX}"
    (HERE / "fixtures.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
