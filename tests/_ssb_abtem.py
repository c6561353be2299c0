"""Loading the abTEM SrTiO3 fixtures of tests/data/ssb (see simulate.py there)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

import quantem.stem4d.io
from quantem.stem4d.detector import prepare as prepare_detector
from quantem.stem4d.ssb import Aberrations, Calibration

ROOT = Path(__file__).resolve().parent / "data" / "ssb"
META = json.loads((ROOT / "fixtures.json").read_text())


def calibration(sample: str) -> Calibration:
    return Calibration(
        energy_ev=META["energy_ev"],
        semiangle_mrad=META["semiangle_mrad"],
        scan_step_a=META["scan_step_a"],
        rotation_deg=META["rotation_deg"],
        detector_sampling_mrad=META["samples"][sample]["detector_sampling_mrad"][0],
    )


def master(sample: str, dose: str) -> Path:
    return ROOT / META["samples"][sample]["files"][dose]


def load(sample: str, dose: str) -> np.ndarray:
    with quantem.stem4d.io.load(master(sample, dose)) as acq:
        return np.asarray(acq.array).copy()


def simulated() -> dict[str, float]:
    return dict(META["aberrations"])


def focus_at_mid_plane(sample: str) -> Aberrations:
    """The simulated probe with its focus moved to the middle of the slab.

    abTEM defines the probe at the entrance surface; propagating it by ``z`` adds
    ``pi lambda z k^2`` to chi, i.e. ``C10 -> C10 + z``. SSB sees a thick object through
    the probe inside it, so the defocus it measures is about ``C10 + t / 2``.
    """
    polar = simulated()
    polar["C10"] += META["samples"][sample]["thickness_a"] / 2
    return Aberrations.from_polar(**polar)


def potential(sample: str, cal: Calibration, band_limited: bool = True) -> np.ndarray:
    """The projected potential at the scan sampling, low-passed to the SSB band 2 alpha."""
    v = np.load(ROOT / f"sto_{sample}_potential.npy").astype(np.float64)
    if not band_limited:
        return v
    fx = np.fft.fftfreq(v.shape[0], d=cal.scan_step_a[0]) * cal.wavelength_a
    fy = np.fft.fftfreq(v.shape[1], d=cal.scan_step_a[1]) * cal.wavelength_a
    inside = fx[:, None] ** 2 + fy[None, :] ** 2 < (2 * cal.semiangle_rad) ** 2
    return np.real(np.fft.ifft2(np.fft.fft2(v) * inside))


def com_integrated_phase(sample: str, dose: str, cal: Calibration) -> np.ndarray:
    """A plain iDPC phase: quantem.stem4d.detector's centre of mass, Fourier-integrated.

    The intensity centre of mass (as an angle) is ``lambda / (2 pi)`` times the phase
    gradient (convolved with the probe intensity), so ``grad phi = 2 pi / lambda * com``
    and ``phi(Q) = (Qx Gx + Qy Gy) / (2 pi i |Q|^2)``, zero at Q = 0.
    """
    with quantem.stem4d.io.load(master(sample, dose)) as acq:
        com = prepare_detector(acq).center_of_mass()
    sampling = META["samples"][sample]["detector_sampling_mrad"][0] * 1e-3
    gx = (com.row - com.row.mean()) * sampling * 2 * math.pi / cal.wavelength_a
    gy = (com.col - com.col.mean()) * sampling * 2 * math.pi / cal.wavelength_a
    qx = np.fft.fftfreq(gx.shape[0], d=cal.scan_step_a[0])[:, None]
    qy = np.fft.fftfreq(gx.shape[1], d=cal.scan_step_a[1])[None, :]
    q2 = qx**2 + qy**2
    q2[0, 0] = 1.0
    spectrum = (qx * np.fft.fft2(gx) + qy * np.fft.fft2(gy)) / (2j * math.pi * q2)
    spectrum[0, 0] = 0.0
    return np.real(np.fft.ifft2(spectrum))
