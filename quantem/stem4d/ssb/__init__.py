"""Single-sideband (SSB) ptychography with aberration fitting, on numpy or CuPy arrays.

``prepare`` takes the scan Fourier transform of the bright-field disk and keeps the
double-overlap ("trotter") regions; ``reconstruct`` integrates the sidebands with the
aberration phase removed and returns the complex object and its phase; ``fit_aberrations``
finds the aberrations by minimising the sideband residual (seeded TPE search, then
Nelder-Mead). See docs/ssb.md.
"""

from quantem.stem4d.ssb.aberrations import CARTESIAN_NAMES, Aberrations, chi
from quantem.stem4d.ssb.calibration import Calibration, electron_wavelength_a
from quantem.stem4d.ssb.fit import (
    EXTENDED_PARAMETERS,
    STANDARD_PARAMETERS,
    FitResult,
    RegionFit,
    fit_aberrations,
    fit_regions,
    split_regions,
)
from quantem.stem4d.ssb.prepare import (
    BrightFieldDisk,
    Prepared,
    estimate_rotation,
    find_bright_field_disk,
    measure_bright_field_disk,
    prepare,
)
from quantem.stem4d.ssb.reconstruct import Reconstruction, loss, reconstruct, sideband_sums
from quantem.stem4d.ssb.rotation import RotationEstimate
from quantem.stem4d.ssb.stream import open_scan_rows

__all__ = [
    "CARTESIAN_NAMES",
    "EXTENDED_PARAMETERS",
    "STANDARD_PARAMETERS",
    "Aberrations",
    "BrightFieldDisk",
    "Calibration",
    "FitResult",
    "Prepared",
    "Reconstruction",
    "RegionFit",
    "RotationEstimate",
    "chi",
    "electron_wavelength_a",
    "estimate_rotation",
    "find_bright_field_disk",
    "fit_aberrations",
    "fit_regions",
    "loss",
    "measure_bright_field_disk",
    "open_scan_rows",
    "prepare",
    "reconstruct",
    "sideband_sums",
    "split_regions",
]
