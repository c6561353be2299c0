"""Virtual detectors over dense, encoded or streamed 4D-STEM data (``docs/compute.md``).

:func:`open_frames` wraps an acquisition, a scan region of one or an ARINA file streamed
in batches; :func:`virtual_images` computes BF/ADF/DF images of :class:`Disk`,
:class:`Annulus` or mask detectors, with radii in pixels or in mrad given a
:class:`Calibration`.
"""

from quantem.stem4d.virtual.calibration import Calibration, electron_wavelength_angstrom
from quantem.stem4d.virtual.detectors import (
    Annulus,
    Disk,
    adf,
    bf,
    detector_mask,
    df,
    virtual_image,
    virtual_images,
)
from quantem.stem4d.virtual.frames import Frames, open_frames

__all__ = [
    "Annulus",
    "Calibration",
    "Disk",
    "Frames",
    "adf",
    "bf",
    "detector_mask",
    "df",
    "electron_wavelength_angstrom",
    "open_frames",
    "virtual_image",
    "virtual_images",
]
