"""Which format a source path holds: the one place that sniffs a path.

Readers, writers and loaders ask here (never retype a suffix test), so a new format
is one entry in :data:`FORMAT_SUFFIXES`. A path with no registered suffix is an
ARINA HDF5 master (``*_master.h5``), whose reader gives the precise error when it is not.
"""

from __future__ import annotations

import os
from pathlib import Path

from quantem.stem4d.errors import SourceIsDirectoryError

QEM_SUFFIX = ".qem"
#: The format read from a path with no registered suffix.
DEFAULT_FORMAT = "hdf5"
#: Lower-case file suffix -> format name (the key loaders register under).
FORMAT_SUFFIXES: dict[str, str] = {QEM_SUFFIX: "qem"}


def is_qem(path: str | os.PathLike) -> bool:
    """True when ``path`` names a ``.qem`` file (by its suffix, in any case)."""
    return Path(path).suffix.lower() == QEM_SUFFIX


def detect_format(path: str | os.PathLike) -> str:
    """The format name of the source at ``path``: ``"qem"``, ``"hdf5"`` or a registered one.

    Raises :class:`~quantem.stem4d.errors.SourceIsDirectoryError` for a directory.
    """
    if Path(path).is_dir():
        raise SourceIsDirectoryError(
            Path(path).absolute(), "is a directory; expected an ARINA *_master.h5 or a .qem file"
        )
    return FORMAT_SUFFIXES.get(Path(path).suffix.lower(), DEFAULT_FORMAT)


def register_format(name: str, suffix: str) -> None:
    """Read paths ending in ``suffix`` (e.g. ``".npy"``) as format ``name``."""
    if not suffix.startswith(".") or len(suffix) < 2:
        raise ValueError(f"suffix must start with a dot, got {suffix!r}")
    known = FORMAT_SUFFIXES.get(suffix.lower())
    if known is not None and known != name:
        raise ValueError(f"suffix {suffix!r} is already format {known!r}")
    FORMAT_SUFFIXES[suffix.lower()] = name


__all__ = [
    "DEFAULT_FORMAT",
    "FORMAT_SUFFIXES",
    "QEM_SUFFIX",
    "detect_format",
    "is_qem",
    "register_format",
]
