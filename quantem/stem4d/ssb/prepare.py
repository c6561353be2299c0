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

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.fft

from quantem.stem4d.errors import CalibrationError
from quantem.stem4d.ssb import stream
from quantem.stem4d.ssb.calibration import Calibration
from quantem.stem4d.ssb.rotation import (
    RotationEstimate,
    center_of_mass,
    given_rotation,
    rotation_from_com,
)
from quantem.stem4d.virtual.calibration import Calibration as GeneralCalibration
from quantem.stem4d.virtual.calibration_check import (
    Finding,
    check_bf_radius,
    check_rotation,
    check_scan_step,
    settle,
)

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
    #: The rotation used: given by the caller or the DPC estimate (quantem.stem4d.ssb.rotation).
    rotation: RotationEstimate | None = None
    #: Host ``(n_pix, 2)`` (binned) detector (row, column) of each pixel, row-major order.
    pixels: Any = None
    #: How preparation held the data (mode, blocks, bytes); informational.
    memory: dict = field(default_factory=dict)
    #: Engine-specific arrays derived from this preparation once (see quantem.stem4d.ssb.cpu).
    engine_cache: dict = field(default_factory=dict, repr=False)
    #: The given calibration checked against this data (quantem.stem4d.virtual.calibration_check;
    #: empty when the disk was given, as for the regions of an already checked scan).
    calibration_check: list = field(default_factory=list)

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


def estimate_rotation(
    data: Any, calibration: Calibration, *, disk: BrightFieldDisk | None = None
) -> RotationEstimate:
    """The rotation :func:`prepare` uses for in-memory ``data`` (numpy or CuPy): the
    calibration's if it gives one, else the DPC estimate (:mod:`quantem.stem4d.ssb.rotation`)."""
    if calibration.rotation_deg is not None:
        return given_rotation(calibration.rotation_deg, bool(calibration.transpose))
    if calibration.detector_sampling_mrad is None:
        disk = disk or measure_bright_field_disk(data)
        sampling_px = (calibration.semiangle_mrad / disk.radius,) * 2
    else:
        sampling_px = calibration.detector_sampling_mrad
    return _rotation_from_com(center_of_mass(data), calibration, sampling_px)


def _rotation_from_com(com: Any, calibration: Calibration, sampling_px) -> RotationEstimate:
    return rotation_from_com(
        com,
        energy_ev=calibration.energy_ev,
        semiangle_mrad=calibration.semiangle_mrad,
        detector_sampling_mrad=sampling_px,
        scan_step_a=calibration.scan_step_a,
        transpose=calibration.transpose,
    )


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
    memory_budget_bytes: int | None = None,
    scan_block_rows: int | None = None,
    rotation: RotationEstimate | None = None,
    backend: str | None = None,
    accept_calibration_mismatch: bool = False,
) -> Prepared:
    """Scan Fourier transform of the BF disk, restricted to the left sideband regions.

    Parameters
    ----------
    data
        ``(scan_r, scan_c, det_r, det_c)`` counts or intensities, numpy (CPU) or CuPy
        (CUDA); the result lives on the same device. In streaming mode (below) also any
        source :func:`quantem.stem4d.ssb.stream.open_scan_rows` accepts (an ``h5py`` dataset, a
        memmap, an ARINA master path), read one block of scan rows at a time.
    calibration
        See :class:`~quantem.stem4d.ssb.calibration.Calibration`. Without ``rotation_deg`` the
        rotation is the DPC estimate from this data (:mod:`quantem.stem4d.ssb.rotation`);
        :attr:`Prepared.rotation` says which was used.
    disk
        The BF disk in (unbinned) detector pixels; default: found in the mean pattern.
    detector_bin
        Sum ``b x b`` detector pixels first (the angular sampling grows by ``b``).
    dtype
        ``"complex64"`` (default, both backends) or ``"complex128"``.
    scan_region
        ``(r0, r1, c0, c1)``: use only these scan positions (a regional reconstruction).
    rotation
        The rotation to use as it is (for example the whole scan's estimate, which
        :func:`~quantem.stem4d.ssb.fit.fit_regions` shares among its regions); it overrides the
        calibration's ``rotation_deg`` and ``transpose``.
    memory_budget_bytes, scan_block_rows
        Either one selects the streaming mode: the 4D source is read in blocks of
        scan rows and only the BF-disk pixels are kept (``n_scan * n_pixels`` floats
        beside ``G``), never the whole 4D array. ``memory_budget_bytes`` bounds what
        preparation holds (``G``, the disk pixels and the temporaries) and picks the block
        size; a budget below what ``G`` and the disk pixels need is refused with the
        figure. ``scan_block_rows`` fixes the block instead. For integer counts the result
        is bit-identical to the in-memory path (tested).
    backend
        Streaming mode: where the blocks are reduced and the result lives, ``"cpu"``
        (default) or ``"cuda"`` (the current GPU: an ARINA source is decoded there, any
        other source is read on the CPU and copied block by block; the memory budget is
        then GPU memory). In memory it must name the data's own device.
    """
    streaming = memory_budget_bytes is not None or scan_block_rows is not None
    if backend not in (None, "cpu", "cuda"):
        raise ValueError(f"backend must be 'cpu' or 'cuda', not {backend!r}")
    if streaming:
        rows = stream.open_scan_rows(data, backend or "cpu")
        shape, source_dtype, xp = rows.shape, rows.dtype, rows.xp
    else:
        xp = array_module(data)
        if backend is not None and (backend == "cpu") != (xp is np):
            raise ValueError(
                f"the data are on {'cpu' if xp is np else 'cuda'}, not {backend!r} (backend "
                "picks the device of a streamed source)"
            )
        if getattr(data, "ndim", None) != 4:
            raise ValueError(
                f"SSB needs 4D data (scan_r, scan_c, det_r, det_c), got {getattr(data, 'shape', type(data))}"
            )
        shape, source_dtype = tuple(int(v) for v in data.shape), np.dtype(data.dtype)
    if int(detector_bin) != detector_bin or detector_bin < 1:
        raise ValueError(f"detector_bin must be a positive integer, got {detector_bin!r}")
    detector_bin = int(detector_bin)
    complex_dtype = np.dtype(dtype)
    if complex_dtype not in (np.complex64, np.complex128):
        raise ValueError(f"dtype must be complex64 or complex128, got {dtype!r}")
    real_dtype = np.float32 if complex_dtype == np.complex64 else np.float64
    if scan_region is not None:
        r0, r1, c0, c1 = (int(v) for v in scan_region)
        if not (0 <= r0 < r1 <= shape[0] and 0 <= c0 < c1 <= shape[1]):
            raise ValueError(f"scan_region {scan_region} outside the scan {shape[:2]}")
    else:
        r0, r1, c0, c1 = 0, shape[0], 0, shape[1]
    region = (r0, r1, c0, c1)
    if not streaming and scan_region is not None:
        data = data[r0:r1, c0:c1]
    scan_r, scan_c, det_r, det_c = r1 - r0, c1 - c0, shape[2], shape[3]
    if scan_r < 2 or scan_c < 2:
        raise ValueError(f"SSB needs at least 2x2 scan positions, got {scan_r}x{scan_c}")
    n_scan = scan_r * scan_c
    frame_bytes = det_r * det_c * source_dtype.itemsize
    if streaming:
        if scan_block_rows is not None:
            if int(scan_block_rows) != scan_block_rows or scan_block_rows < 1:
                raise ValueError(
                    f"scan_block_rows must be a positive integer, got {scan_block_rows!r}"
                )
            block_rows = int(scan_block_rows)
        else:
            # Until the geometry is known, the reductions hold a block and its moments.
            block_rows = max(1, int(memory_budget_bytes) // 4 // max(1, scan_c * frame_bytes))

    check_here = disk is None
    if disk is None:
        if streaming:
            disk = find_bright_field_disk(stream.mean_pattern(rows, block_rows, region))
        else:
            disk = measure_bright_field_disk(data)
    if calibration.detector_sampling_mrad is None:
        sampling_px = (calibration.semiangle_mrad / disk.radius,) * 2
    else:
        sampling_px = calibration.detector_sampling_mrad
    estimate, unchecked = None, None
    if rotation is None:
        if calibration.rotation_deg is None or check_here:
            if streaming:
                com = stream.center_of_mass(rows, block_rows, region)
            else:
                com = center_of_mass(data)
            if calibration.rotation_deg is None:
                estimate = _rotation_from_com(com, calibration, sampling_px)
            else:
                try:  # only to check the given rotation: an unreliable estimate checks nothing
                    estimate = _rotation_from_com(com, calibration, sampling_px)
                except CalibrationError as exc:
                    unchecked = str(exc)
        if calibration.rotation_deg is None:
            rotation = estimate
        else:
            rotation = given_rotation(calibration.rotation_deg, bool(calibration.transpose))
    check = (
        check_ssb_calibration(
            calibration,
            disk.radius,
            estimate if calibration.rotation_deg is not None else None,
            accept_mismatch=accept_calibration_mismatch,
            rotation_unchecked=unchecked,
        )
        if check_here
        else []
    )
    calibration = dataclasses.replace(
        calibration, rotation_deg=rotation.rotation_deg, transpose=rotation.transpose
    )
    sampling = (sampling_px[0] * detector_bin, sampling_px[1] * detector_bin)
    alpha = calibration.semiangle_rad

    # Binned pixel centres relative to the beam, rotated into the scan frame (radians).
    bin_r, bin_c = det_r // detector_bin, det_c // detector_bin
    centre_r = (np.arange(bin_r) + 0.5) * detector_bin - 0.5 - disk.center[0]
    centre_c = (np.arange(bin_c) + 0.5) * detector_bin - 0.5 - disk.center[1]
    det_x = centre_r[:, None] * sampling_px[0] * 1e-3 + 0 * centre_c[None, :]
    det_y = centre_c[None, :] * sampling_px[1] * 1e-3 + 0 * centre_r[:, None]
    if rotation.transpose:
        det_x, det_y = det_y, det_x
    theta = math.radians(rotation.rotation_deg)
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
    if streaming and memory_budget_bytes is not None:
        # Before G exists its temporaries (region counts) get a quarter of the budget.
        block_bytes = min(int(block_bytes), max(1, int(memory_budget_bytes) // 4))
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

    flat_pixels = pix_r * bin_c + pix_c
    per_pixel = n_scan * (detector_bin**2 * 4 + 16 + complex_dtype.itemsize * 2)
    # Streamed, the transform and the energy sums run in blocks planned for streaming; on
    # CUDA without a budget the in-memory path's blocks are kept instead, so that cuFFT
    # and CuPy's reductions see the same shapes and give the same bits.
    stream_blocks = streaming and (xp is np or memory_budget_bytes is not None)
    if stream_blocks:
        # The transform's copies per pixel: the intensities twice, the half spectrum, the
        # kept spectrum and its gathers (the binning was done while reading).
        per_pixel = n_scan * (2 * np.dtype(real_dtype).itemsize + 4 * complex_dtype.itemsize)
    memory: dict[str, Any] = {
        "mode": "in_memory",
        "G_bytes": len(keep) * n_pix * complex_dtype.itemsize,
    }
    if streaming:
        resident = memory["G_bytes"] + n_scan * n_pix * np.dtype(real_dtype).itemsize
        # One scan row of frames, its binned band and the disk pixels taken from it.
        row_bytes = scan_c * (frame_bytes + bin_r * bin_c * 8 + n_pix * 16)
        if memory_budget_bytes is not None:
            spare = int(memory_budget_bytes) - resident
            if spare < row_bytes + per_pixel:
                raise ValueError(
                    f"a memory budget of {int(memory_budget_bytes)} bytes is too small: the "
                    f"prepared G and the {n_pix} disk pixels of {n_scan} positions take "
                    f"{resident} bytes, plus at least {row_bytes + per_pixel} bytes of blocks"
                )
            # Half the spare for the read blocks, half for the transform's temporaries.
            if scan_block_rows is None:
                block_rows = max(1, min(scan_r, (spare // 2) // row_bytes))
            block_bytes = min(int(block_bytes), max(per_pixel, spare - block_rows * row_bytes))
            # The region masks: about 48 bytes of temporaries per element.
            freq_block = max(1, block_bytes // (n_pix * 48))
        memory.update(
            {
                "mode": "stream",
                "scan_block_rows": int(block_rows),
                "resident_bytes": int(resident),
                "read_block_bytes": int(block_rows * scan_c * frame_bytes),
                "budget_bytes": None if memory_budget_bytes is None else int(memory_budget_bytes),
            }
        )
        intensities = _gather_disk_pixels(
            rows, region, block_rows, detector_bin, pix_r, flat_pixels, bin_c, real_dtype
        )
    pixel_block = max(1, min(n_pix, block_bytes // max(per_pixel, 1)))
    memory["transform_pixel_block"] = int(pixel_block)

    # Transform, one block of pixels at a time: normalise each pixel by its scan mean
    # (unit bright field), transform over the scan, keep the used frequencies.
    G = xp.zeros((len(keep), n_pix), dtype=complex_dtype)
    keep_device = xp.asarray(keep)
    for start in range(0, n_pix, pixel_block):
        stop = min(start + pixel_block, n_pix)
        if streaming:
            values = xp.ascontiguousarray(intensities[:, start:stop])
        else:
            # Detector rows needed per block: bin whole row bands, then take the pixels.
            block_rows_det = pix_r[start:stop]
            row0, row1 = int(block_rows_det.min()), int(block_rows_det.max()) + 1
            band = data[:, :, row0 * detector_bin : row1 * detector_bin, : bin_c * detector_bin]
            band = band.reshape(n_scan, (row1 - row0) * detector_bin, bin_c * detector_bin)
            binned = _bin_detector(band, detector_bin, xp).reshape(n_scan, -1)
            local = xp.asarray(flat_pixels[start:stop] - row0 * bin_c)
            values = binned[:, local].astype(real_dtype)
            del band, binned
        G[:, start:stop] = _transform_pixels(
            values, scan_r, scan_c, real_dtype, complex_dtype, xp, keep, keep_device
        )
        del values
    if streaming:
        del intensities
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
    if stream_blocks:
        # Row blocks of the same per-row sums (numpy's reduction of each row depends on
        # the row alone), so no temporary of G's size.
        energy = xp.empty(len(keep), dtype=real_dtype)
        for s in range(0, len(keep), freq_block):
            g = G[s : s + freq_block]
            energy[s : s + freq_block] = (g.real**2 + g.imag**2).sum(axis=1)
    else:
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
        rotation=rotation,
        memory=memory,
        pixels=np.stack([pix_r, pix_c], axis=1),
        calibration_check=check,
    )


def check_ssb_calibration(
    calibration: Calibration,
    measured_radius_px: float,
    rotation_estimate: RotationEstimate | None,
    *,
    accept_mismatch: bool = False,
    rotation_unchecked: str | None = None,
) -> list[dict]:
    """The BF radius, scan step and a given rotation checked against the data."""
    sampling = calibration.detector_sampling_mrad
    general = GeneralCalibration(
        energy_ev=calibration.energy_ev,
        convergence_mrad=calibration.semiangle_mrad,
        mrad_per_pixel=None if sampling is None else sampling[0],
        scan_step_angstrom=calibration.scan_step_a,
    )
    findings = [check_bf_radius(general, measured_radius_px), check_scan_step(general)]
    if rotation_estimate is not None:
        findings.append(
            check_rotation(
                calibration.rotation_deg,
                bool(calibration.transpose),
                rotation_estimate.rotation_deg,
                rotation_estimate.transpose,
            )
        )
    if rotation_unchecked is not None:
        findings.append(Finding("rotation", "unchecked", rotation_unchecked))
    return settle(findings, workload="ssb", accept_mismatch=accept_mismatch)


def _transform_pixels(values, scan_r, scan_c, real_dtype, complex_dtype, xp, keep, keep_device):
    """``(n_scan, n)`` intensities of ``n`` pixels -> their spectra at the kept frequencies.

    On the CPU the transform is scipy's real-input FFT over all cores (the intensities
    are real, so ``G(-Q) = conj G(Q)`` gives the other half); on CUDA, CuPy's complex FFT.
    """
    mean = values.mean(axis=0)
    if bool((mean <= 0).any()):
        raise ValueError("a bright-field pixel has no counts over the whole scan")
    values = values / mean[None, :] - real_dtype(1)
    if xp is np:
        half = scipy.fft.rfft2(
            values.reshape(scan_r, scan_c, -1), axes=(0, 1), workers=_fft_workers()
        )
        rows, cols = keep // scan_c, keep % scan_c
        direct = cols <= scan_c // 2
        out = np.empty((len(keep), values.shape[1]), dtype=complex_dtype)
        out[direct] = half[rows[direct], cols[direct]]
        mirrored = ~direct
        out[mirrored] = np.conj(half[(-rows[mirrored]) % scan_r, (-cols[mirrored]) % scan_c])
        return out
    spectrum = xp.fft.fft2(values.reshape(scan_r, scan_c, -1), axes=(0, 1))
    return spectrum.reshape(scan_r * scan_c, -1).astype(complex_dtype, copy=False)[keep_device]


def _fft_workers() -> int:
    """Threads for scipy's FFT: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _gather_disk_pixels(
    rows, region, block_rows, detector_bin, pix_r, flat_pixels, bin_c, real_dtype
):
    """The (binned) disk pixels of every scan position, ``(n_scan, n_pix)``, read by blocks.

    The same integer sums and the same cast as the in-memory path, so the same numbers.
    """
    r0, r1, c0, c1 = region
    scan_c = c1 - c0
    xp = rows.xp
    row0, row1 = int(pix_r.min()), int(pix_r.max()) + 1
    local = xp.asarray(flat_pixels - row0 * bin_c)
    out = xp.empty(((r1 - r0) * scan_c, len(flat_pixels)), dtype=real_dtype)
    for row, block in stream.iter_row_blocks(rows, block_rows, region):
        n = len(block) * scan_c
        band = block[:, :, row0 * detector_bin : row1 * detector_bin, : bin_c * detector_bin]
        band = band.reshape(n, (row1 - row0) * detector_bin, bin_c * detector_bin)
        binned = _bin_detector(band, detector_bin, xp).reshape(n, -1)
        out[row * scan_c : row * scan_c + n] = binned[:, local]
        del block, band, binned
    return out


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
    "estimate_rotation",
    "find_bright_field_disk",
    "measure_bright_field_disk",
    "prepare",
]
