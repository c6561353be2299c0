"""Content-addressed, write-once record files (``docs/history-format.md`` "Records").

A record is written to a temporary file in ``records/tmp/``, fsynced, made
read-only, renamed to ``records/sha256/ab/<hex>.json`` and the folder fsynced, so
after a crash a record either exists with exactly the bytes its name says or not
at all. Writing bytes that are already stored is a no-op that says so; a file
already at the final name is never overwritten.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.errors import HistoryError
from harness.history.layout import RECORD_MODE, HistoryLayout

_HASH_CHUNK = 1 << 20


@dataclass(frozen=True)
class RecordWrite:
    """Outcome of :func:`write_record`: the record's SHA-256, path and whether it is new."""

    sha256: str
    path: Path
    created: bool


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def fsync_dir(path: Path) -> None:
    """Make a rename or create in ``path`` durable (POSIX needs the folder fsynced)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_dir(path: Path) -> None:
    """Create ``path`` (and parents) and fsync each parent that gained an entry."""
    missing = []
    current = path
    while not current.exists():
        missing.append(current)
        current = current.parent
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        fsync_dir(folder.parent)


def write_record(layout: HistoryLayout, data: bytes) -> RecordWrite:
    """Store ``data`` under its SHA-256; the caller holds the history lock.

    Raises
    ------
    HistoryError
        When a file already at the record's name holds other bytes: evidence was
        tampered with, and it is reported, never overwritten.
    """
    sha256 = sha256_bytes(data)
    final = layout.record_path(sha256)
    if final.exists():
        if final.stat().st_size == len(data) and sha256_file(final) == sha256:
            return RecordWrite(sha256, final, created=False)
        raise HistoryError(
            f"{final}: a record with this name exists but its bytes differ from its SHA-256 "
            "(tampered or damaged); it is left as it is: run `harness history verify`"
        )
    ensure_dir(layout.temp)
    ensure_dir(final.parent)
    fd, temp_name = tempfile.mkstemp(prefix=f"{sha256[:16]}.", suffix=".tmp", dir=layout.temp)
    temp = Path(temp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, RECORD_MODE)
        os.rename(temp, final)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_dir(final.parent)
    return RecordWrite(sha256, final, created=True)


def read_record(layout: HistoryLayout, sha256: str) -> bytes:
    """The stored bytes of a record; HistoryError when it is missing."""
    path = layout.record_path(sha256)
    try:
        return path.read_bytes()
    except FileNotFoundError as exc:
        raise HistoryError(f"{path}: record {sha256} is missing") from exc
