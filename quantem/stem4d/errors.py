"""Error types of quantem.

Every error derives from :class:`QuantemError` and from the built-in exception that
matches it, so callers can catch either. Errors about a file carry the file's path
(and, where it applies, the section, block or frame) as structured fields.
"""

from __future__ import annotations

import os


class QuantemError(Exception):
    """Base class of every error raised by quantem."""


class SourceError(QuantemError):
    """An error about one input file; ``path`` names it, ``detail`` says what is wrong."""

    def __init__(self, path: str | os.PathLike | None, detail: str, **fields: object) -> None:
        self.path = os.fspath(path) if path is not None else None
        self.detail = detail
        self.fields = fields
        where = f"{self.path}: " if self.path else ""
        extra = ", ".join(f"{k} {v}" for k, v in fields.items() if v is not None)
        super().__init__(f"{where}{detail}" + (f" ({extra})" if extra else ""))


class SourceNotFoundError(SourceError, FileNotFoundError):
    """A file (master, shard, index, .qem) does not exist."""


class SourceIsDirectoryError(SourceError, IsADirectoryError):
    """A folder was given where a file (master, .qem) is expected."""


class ArinaFormatError(SourceError, ValueError):
    """An HDF5 file is not a readable ARINA acquisition (layout, shapes, counts, chunks)."""


class ChunkDecodeError(SourceError, ValueError):
    """A compressed frame chunk is corrupt; ``fields`` name the frame."""


class QemFormatError(SourceError, ValueError):
    """A .qem file is malformed; ``fields`` name the section or block."""


class QemVersionError(QemFormatError):
    """A .qem file has a version this reader does not support."""


class ScanShapeError(QuantemError, ValueError):
    """The scan shape cannot be resolved or does not match the frame count."""


class UnsupportedDtypeError(QuantemError, TypeError):
    """A data type the operation does not support."""


class BackendUnavailableError(QuantemError, RuntimeError):
    """The requested backend cannot run here (no CuPy, no device)."""


class VerificationError(QuantemError, ValueError):
    """A written or decoded result differs from its source."""


class DetectorError(QuantemError, ValueError):
    """A detector product cannot be computed: a bad mask or geometry, a closed or
    inconsistent acquisition, or a mean pattern with no signal to find the disk in."""


class CalibrationError(QuantemError, ValueError):
    """A computation needs a calibration (energy, angles, scan step) that is missing or invalid."""


class ComputeError(QuantemError, ValueError):
    """A compute workload (virtual detectors, DPC, parallax) cannot run on these inputs."""


class SourceIntegrityError(SourceError, ValueError):
    """A raw chunk's bytes differ from their checksum recorded in the frame index (the
    chunk changed since the acquisition was first observed); ``fields`` name the frame."""


class FrameIndexWarning(UserWarning):
    """A frame-index sidecar failed its checksums and was discarded and rebuilt."""


class CalibrationWarning(UserWarning):
    """A given calibration disagrees with what the data show, beyond the documented tolerance."""


class SSBFitWarning(UserWarning):
    """An SSB aberration fit gave a phase that an independent check finds worse than none."""


class DPCWarning(UserWarning):
    """The DPC phase is no faithful image of the specimen under the given conditions (a
    probe defocused far beyond its depth of field)."""


class ParallaxWarning(UserWarning):
    """Parallax shifts reached the edge of the alignment's search range: the true shifts may
    lie beyond it (give a defocus guess, or a larger ``max_shift``)."""
