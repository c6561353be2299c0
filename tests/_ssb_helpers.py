"""A small independent forward model for SSB tests: a probe over a weak phase object.

``I(k, R) = |FFT[p(r - R) exp(i sigma V(r))]|^2`` on a periodic grid, with the probe
``p = IFFT[aperture * exp(-i chi)]`` written here from the textbook formula (polar form,
abTEM's sign convention), not from ``quantem.stem4d.ssb``. Probe positions are whole grid pixels,
so shifting is a roll.
"""

from __future__ import annotations

import numpy as np

from quantem.stem4d.ssb import Calibration, electron_wavelength_a

ENERGY_EV = 200e3
SEMIANGLE_MRAD = 25.0


def smooth_potential(n: int, seed: int, band: float = 0.25) -> np.ndarray:
    """A random periodic potential in [0, 1], low-pass filtered to ``band`` of Nyquist."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal((n, n))
    f = np.fft.fftfreq(n)
    mask = (f[:, None] ** 2 + f[None, :] ** 2) < (0.5 * band) ** 2
    v = np.real(np.fft.ifft2(np.fft.fft2(noise) * mask))
    v -= v.min()
    return v / v.max()


def simulate(
    *,
    scan: int = 32,
    pixels_per_step: int = 2,
    grid_sampling_a: float = 0.1,
    detector_half: int = 14,
    polar: dict | None = None,
    sigma: float = 0.3,
    dose: float | None = None,
    seed: int = 0,
):
    """Returns ``(data, calibration, true_phase)``: data ``(scan, scan, 2h, 2h)`` float64
    (or Poisson counts for ``dose`` electrons per probe position)."""
    polar = polar or {}
    n = scan * pixels_per_step
    wavelength = electron_wavelength_a(ENERGY_EV)
    k = np.fft.fftfreq(n, d=grid_sampling_a)
    kx, ky = np.meshgrid(k * wavelength, k * wavelength, indexing="ij")
    a = np.hypot(kx, ky)
    phi = np.arctan2(ky, kx)
    chi = (
        (
            0.5
            * a**2
            * (
                polar.get("C10", 0.0)
                + polar.get("C12", 0.0) * np.cos(2 * (phi - polar.get("phi12", 0.0)))
            )
            + a**3 / 3 * polar.get("C21", 0.0) * np.cos(phi - polar.get("phi21", 0.0))
            + a**4 / 4 * polar.get("C30", 0.0)
        )
        * 2
        * np.pi
        / wavelength
    )
    aperture = a < SEMIANGLE_MRAD * 1e-3
    probe = np.fft.ifft2(aperture * np.exp(-1j * chi))
    probe /= np.sqrt((np.abs(probe) ** 2).sum())
    potential = smooth_potential(n, seed)
    transmission = np.exp(1j * sigma * potential)
    data = np.empty((scan, scan, 2 * detector_half, 2 * detector_half))
    for i in range(scan):
        for j in range(scan):
            shifted = np.roll(probe, (i * pixels_per_step, j * pixels_per_step), axis=(0, 1))
            wave = np.fft.fft2(shifted * transmission) / n  # unitary: a frame sums to 1
            pattern = np.fft.fftshift(np.abs(wave) ** 2)
            c = n // 2
            data[i, j] = pattern[
                c - detector_half : c + detector_half, c - detector_half : c + detector_half
            ]
    if dose is not None:
        data = np.random.default_rng(seed + 1).poisson(data * dose).astype(np.uint16)
    sampling_mrad = wavelength / (n * grid_sampling_a) * 1e3
    calibration = Calibration(
        energy_ev=ENERGY_EV,
        semiangle_mrad=SEMIANGLE_MRAD,
        scan_step_a=pixels_per_step * grid_sampling_a,
        rotation_deg=0.0,  # the model's detector axes are the scan's
        detector_sampling_mrad=sampling_mrad,
    )
    true_phase = sigma * potential[::pixels_per_step, ::pixels_per_step]
    return data, calibration, true_phase


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64).ravel() - np.mean(a)
    b = np.asarray(b, dtype=np.float64).ravel() - np.mean(b)
    return float((a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()))
