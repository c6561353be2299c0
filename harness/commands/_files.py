"""Checks on the file arguments of commands, so that a wrong path says what is wrong."""

from __future__ import annotations

from pathlib import Path

from harness.errors import HarnessError


class NotAFileError(HarnessError, IsADirectoryError):
    """A command that reads one file was given a folder, or nothing at all."""


def require_file(path: str | Path, what: str) -> Path:
    """``path`` as a Path when it is an existing file; else an error naming it and why."""
    path = Path(path)
    if path.is_dir():
        raise NotAFileError(f"{path}: is a directory; expected {what}")
    if not path.exists():
        raise NotAFileError(f"{path}: no such file; expected {what}")
    return path
