"""Preparation: the scan Fourier transform of the bright-field disk, kept for the sidebands.

For intensities ``I(k, R)`` (detector angle ``k``, probe position ``R``) of a weak object
``psi = 1 + phi`` and a probe ``A(k) = aperture(k) exp(-i chi(k))``, the transform over
the scan, ``G(k, Q) = sum_R I(k, R) exp(-2 pi i Q.R)``, is, for ``Q != 0`` (Rodenburg et
al. 1993)::

    G(k, Q) = A*(k) A(k - Q) Phi(Q) + A(k) A*(k + Q) Phi*(-Q)

with ``Q`` written as an angle (``lambda * Q``). Where ``k`` and ``k - Q`` are inside the
aperture but ``k + Q`` is not (the *left* double-overlap region, a "trotter") only the first
term is left: ``G = exp(i (chi(k) - chi(k - Q))) Phi(Q)``. As the intensities are real,
``G(k, -Q) = conj(G(k, Q))``, so the right region of ``Q`` holds the complex conjugate of the
left region of ``-Q``: the left regions of all ``Q`` carry all the information, and SSB
here uses those.

:func:`prepare` keeps ``G`` only where it is used: the pixels of the BF disk (optionally
binned), the scan frequencies whose left region is not empty, and zero outside each
frequency's left region, as a dense ``(n_frequencies, n_pixels)`` complex array. The
transform is taken one block of detector pixels at a time, so the intensities never exist
in floating point all at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from quantem.ssb.calibration import Calibration

#: Default bytes of temporaries per block (pixel blocks for the transform, frequency
#: blocks for the sideband sums). Results never depend on it.
DEFAULT_BLOCK_BYTES = 256 * 2**20


@dataclass(frozen=True)
class BrightFieldDisk:
    """The undiffracted beam on the detector, in detector pixels (row, column)."""

    center: tuple[float, float]
    radius: float


@dataclass
class Prepared:
    """The sideband data and geometry of one scan (region), on one array module."""

    G: Any  # (n_freq, n_pix) complex, zero outside each frequency's left region
    q_index: Any  # (n_freq,) flat index into the scan's FFT grid
    qx: Any  # (n_freq,) scan frequency as an angle, radians, axis 0
    qy: Any
    kx: Any  # (n_pix,) detector angle, radians, scan frame, axis 0
    ky: Any
    region_pixels: Any  # (n_freq,) pixels in each left region
    energy: Any  # (n_freq,) sum of |G|^2 over each left region
    energy_total: float  # energy.sum(), once (the loss's denominator)
    scan_shape: tuple[int, int]
    calibration: Calibration
    disk: BrightFieldDisk
    detector_sampling_mrad: tuple[float, float]
    detector_bin: int
    xp: Any

    @property
    def wavelength_a(self) -> float:
        return self.calibration.wavelength_a

    @property
    def alpha(self) -> float:
        return self.calibration.semiangle_rad

    @property
    def nbytes(self) -> int:
        return int(self.G.nbytes)


def array_module(array: Any) -> Any:
    """numpy, or cupy for a CuPy array (dispatch follows the input's array type)."""
    module = type(array).__module__.split(".")[0]
    if module == "cupy":
        import cupy

        return cupy
    return np


def find_bright_field_disk(mean_pattern: np.ndarray, threshold: float = 0.5) -> BrightFieldDisk:
    """The BF disk of a mean pattern: pixels above ``threshold`` of the maximum.

    Centre: the intensity-weighted centroid of those pixels; radius: ``sqrt(area / pi)``
    (the area counts fractional edge pixels by their intensity relative to the disk's
    median, so it is sub-pixel accurate for a flat-topped disk).
    """
    pattern = np.asarray(mean_pattern, dtype=np.float64)
    if pattern.ndim != 2 or not np.isfinite(pattern).all() or pattern.max() <= 0:
        raise ValueError("the mean pattern must be a finite 2D array with positive values")
    inside = pattern > threshold * pattern.max()
    rows, cols = np.nonzero(inside)
    weights = pattern[inside]
    center = (
        float((rows * weights).sum() / weights.sum()),
        float((cols * weights).sum() / weights.sum()),
    )
    level = float(np.median(weights))
    area = float(np.clip(pattern / level, 0.0, 1.0).sum())
    return BrightFieldDisk(center=center, radius=math.sqrt(area / math.pi))


def measure_bright_field_disk(data: Any) -> BrightFieldDisk:
    """The BF disk of a 4D array's mean pattern (numpy or CuPy), in detector pixels."""
    scan_r, scan_c, det_r, det_c = data.shape
    frames = data.reshape(scan_r * scan_c, det_r, det_c)
    return find_bright_field_disk(_to_host(frames.mean(axis=0, dtype=np.float64)))


def _bin_detector(block: Any, factor: int, xp: Any) -> Any:
    if factor == 1:
        return block
    n, r, c = block.shape
    r, c = r // factor * factor, c // factor * factor
    block = block[:, :r, :c].reshape(n, r // factor, factor, c // factor, factor)
    return block.sum(axis=(2, 4))


def prepare(
    data: Any,
    calibration: Calibration,
    *,
    disk: BrightFieldDisk | None = None,
    detector_bin: int = 1,
    dtype: str = "complex64",
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    scan_region: tuple[int, int, int, int] | None = None,
) -> Prepared:
    """Scan Fourier transform of the BF disk, restricted to the left sideband regions.

    Parameters
    ----------
    data
        ``(scan_r, scan_c, det_r, det_c)`` counts or intensities, numpy (CPU) or CuPy
        (CUDA); the result lives on the same device.
    calibration
        See :class:`~quantem.ssb.calibration.Calibration`.
    disk
        The BF disk in (unbinned) detector pixels; default: found in the mean pattern.
    detector_bin
        Sum ``b x b`` detector pixels first (the angular sampling grows by ``b``).
    dtype
        ``"complex64"`` (default, both backends) or ``"complex128"``.
    scan_region
        ``(r0, r1, c0, c1)``: use only these scan positions (a regional reconstruction).
    """
    xp = array_module(data)
    if getattr(data, "ndim", None) != 4:
        raise ValueError(
            f"SSB needs 4D data (scan_r, scan_c, det_r, det_c), got {getattr(data, 'shape', type(data))}"
        )
    if int(detector_bin) != detector_bin or detector_bin < 1:
        raise ValueError(f"detector_bin must be a positive integer, got {detector_bin!r}")
    detector_bin = int(detector_bin)
    complex_dtype = np.dtype(dtype)
    if complex_dtype not in (np.complex64, np.complex128):
        raise ValueError(f"dtype must be complex64 or complex128, got {dtype!r}")
    real_dtype = np.float32 if complex_dtype == np.complex64 else np.float64
    if scan_region is not None:
        r0, r1, c0, c1 = (int(v) for v in scan_region)
        if not (0 <= r0 < r1 <= data.shape[0] and 0 <= c0 < c1 <= data.shape[1]):
            raise ValueError(f"scan_region {scan_region} outside the scan {data.shape[:2]}")
        data = data[r0:r1, c0:c1]
    scan_r, scan_c, det_r, det_c = data.shape
    if scan_r < 2 or scan_c < 2:
        raise ValueError(f"SSB needs at least 2x2 scan positions, got {scan_r}x{scan_c}")
    n_scan = scan_r * scan_c

    if disk is None:
        disk = measure_bright_field_disk(data)
    if calibration.detector_sampling_mrad is None:
        sampling_px = (calibration.semiangle_mrad / disk.radius,) * 2
    else:
        sampling_px = calibration.detector_sampling_mrad
    sampling = (sampling_px[0] * detector_bin, sampling_px[1] * detector_bin)
    alpha = calibration.semiangle_rad

    # Binned pixel centres relative to the beam, rotated into the scan frame (radians).
    bin_r, bin_c = det_r // detector_bin, det_c // detector_bin
    centre_r = (np.arange(bin_r) + 0.5) * detector_bin - 0.5 - disk.center[0]
    centre_c = (np.arange(bin_c) + 0.5) * detector_bin - 0.5 - disk.center[1]
    det_x = centre_r[:, None] * sampling_px[0] * 1e-3 + 0 * centre_c[None, :]
    det_y = centre_c[None, :] * sampling_px[1] * 1e-3 + 0 * centre_r[:, None]
    theta = math.radians(calibration.rotation_deg)
    kx_all = math.cos(theta) * det_x - math.sin(theta) * det_y
    ky_all = math.sin(theta) * det_x + math.cos(theta) * det_y
    in_disk = kx_all**2 + ky_all**2 < alpha**2
    pix_r, pix_c = np.nonzero(in_disk)
    kx = kx_all[pix_r, pix_c]
    ky = ky_all[pix_r, pix_c]
    n_pix = len(kx)
    if n_pix < 4:
        raise ValueError(
            f"only {n_pix} detector pixels inside the {calibration.semiangle_mrad} mrad aperture "
            f"(sampling {sampling} mrad per binned pixel): check the calibration"
        )

    # Scan frequencies (1/Angstrom) as angles, and which of them have a left region.
    step = calibration.scan_step_a
    wavelength = calibration.wavelength_a
    fx = np.fft.fftfreq(scan_r, d=step[0]) * wavelength
    fy = np.fft.fftfreq(scan_c, d=step[1]) * wavelength
    # Geometry in the working precision, so the region counts and the region masks below
    # are the same comparisons of the same numbers.
    qx_all = np.repeat(fx, scan_c).astype(real_dtype)
    qy_all = np.tile(fy, scan_r).astype(real_dtype)
    kx = kx.astype(real_dtype)
    ky = ky.astype(real_dtype)
    freq_block = max(1, block_bytes // (n_pix * 32))
    # Region sizes on the data's device (the same comparisons as the masks below).
    qx_device, qy_device = xp.asarray(qx_all), xp.asarray(qy_all)
    kx_device, ky_device = xp.asarray(kx), xp.asarray(ky)
    alpha_real = real_dtype(alpha)
    counts = np.concatenate(
        [
            _to_host(
                _left_region(
                    qx_device[s : s + freq_block, None],
                    qy_device[s : s + freq_block, None],
                    kx_device[None, :],
                    ky_device[None, :],
                    alpha_real,
                ).sum(axis=1)
            )
            for s in range(0, n_scan, freq_block)
        ]
    )
    keep = np.nonzero(counts > 0)[0]
    if len(keep) == 0:
        raise ValueError("no scan frequency has a double-overlap region: check the calibration")

    # Transform, one block of pixels at a time: normalise each pixel by its scan mean
    # (unit bright field), transform over the scan, keep the used frequencies.
    G = xp.zeros((len(keep), n_pix), dtype=complex_dtype)
    keep_device = xp.asarray(keep)
    flat_pixels = pix_r * bin_c + pix_c
    per_pixel = n_scan * (detector_bin**2 * 4 + 16 + complex_dtype.itemsize * 2)
    pixel_block = max(1, min(n_pix, block_bytes // max(per_pixel, 1)))
    # Detector rows needed per block: bin whole row bands, then take the block's pixels.
    for start in range(0, n_pix, pixel_block):
        stop = min(start + pixel_block, n_pix)
        rows = pix_r[start:stop]
        row0, row1 = int(rows.min()), int(rows.max()) + 1
        band = data[:, :, row0 * detector_bin : row1 * detector_bin, : bin_c * detector_bin]
        band = band.reshape(n_scan, (row1 - row0) * detector_bin, bin_c * detector_bin)
        binned = _bin_detector(band, detector_bin, xp).reshape(n_scan, -1)
        local = xp.asarray(flat_pixels[start:stop] - row0 * bin_c)
        values = binned[:, local].astype(real_dtype)
        mean = values.mean(axis=0)
        if bool((mean <= 0).any()):
            raise ValueError("a bright-field pixel has no counts over the whole scan")
        values = values / mean[None, :] - real_dtype(1)
        spectrum = xp.fft.fft2(values.reshape(scan_r, scan_c, -1), axes=(0, 1))
        spectrum = spectrum.reshape(n_scan, -1).astype(complex_dtype, copy=False)
        G[:, start:stop] = spectrum[keep_device]
    qx_keep = xp.asarray(qx_all[keep])
    qy_keep = xp.asarray(qy_all[keep])
    for s in range(0, len(keep), freq_block):
        block = slice(s, s + freq_block)
        G[block] *= _left_region(
            qx_keep[block, None],
            qy_keep[block, None],
            kx_device[None, :],
            ky_device[None, :],
            alpha_real,
        )
    energy = (G.real**2 + G.imag**2).sum(axis=1)
    return Prepared(
        G=G,
        q_index=xp.asarray(keep),
        qx=qx_keep,
        qy=qy_keep,
        kx=kx_device,
        ky=ky_device,
        region_pixels=xp.asarray(counts[keep].astype(real_dtype)),
        energy=energy,
        energy_total=float(energy.sum()),
        scan_shape=(scan_r, scan_c),
        calibration=calibration,
        disk=disk,
        detector_sampling_mrad=sampling,
        detector_bin=detector_bin,
        xp=xp,
    )


def _left_region(qx, qy, kx, ky, alpha: float):
    """``|k| < alpha`` is given; ``|k - Q| < alpha`` and ``|k + Q| >= alpha``."""
    # Products written out (not ** 2), so numpy and CuPy round the same operations.
    mx, my, px, py = kx - qx, ky - qy, kx + qx, ky + qy
    limit = alpha * alpha
    return (mx * mx + my * my < limit) & (px * px + py * py >= limit)


def _to_host(array: Any) -> np.ndarray:
    if hasattr(array, "get"):
        return array.get()
    return np.asarray(array)


__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "BrightFieldDisk",
    "Prepared",
    "array_module",
    "find_bright_field_disk",
    "measure_bright_field_disk",
    "prepare",
]
