"""Content-addressed, write-once record files (``docs/history-format.md`` "Records").

A record is written to a temporary file in ``records/tmp/``, fsynced, made read-only
and hard-linked to ``records/sha256/ab/<hex>.json`` (:func:`harness.fsio.write_new`), and
the folder fsynced, so after a crash a record either exists with exactly the bytes its
name says or not at all. Writing bytes that are already stored is a no-op that says so;
a file already at the final name is never overwritten.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from harness.errors import HistoryError
from harness.fsio import write_new
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


def check_stored_record(path: Path, sha256: str, size: int) -> bool:
    """True when ``path`` is a regular file holding the bytes named ``sha256``.

    False when nothing is there. HistoryError when something else is: a symbolic link
    or bytes that differ (evidence tampered with, reported and never overwritten).
    """
    if path.is_symlink():
        raise HistoryError(
            f"{path}: the record is a symbolic link, not the stored bytes (tampered); "
            "it is left as it is: run `harness history verify`"
        )
    if not path.exists():
        return False
    if path.is_file() and path.stat().st_size == size and sha256_file(path) == sha256:
        return True
    raise HistoryError(
        f"{path}: a record with this name exists but its bytes differ from its SHA-256 "
        "(tampered or damaged); it is left as it is: run `harness history verify`"
    )


def write_record(layout: HistoryLayout, data: bytes) -> RecordWrite:
    """Store ``data`` under its SHA-256; the caller holds the history lock.

    Raises
    ------
    HistoryError
        When a file already at the record's name holds other bytes: evidence was
        tampered with, and it is reported, never overwritten.
    harness.fsio.FileWriteError
        When writing fails (a full disk), naming the path and the step.
    """
    sha256 = sha256_bytes(data)
    final = layout.record_path(sha256)
    if check_stored_record(final, sha256, len(data)):
        return RecordWrite(sha256, final, created=False)
    try:
        write_new(final, data, step="writing the record", mode=RECORD_MODE, temp_dir=layout.temp)
    except FileExistsError:  # only another writer ignoring the lock gets here
        if not check_stored_record(final, sha256, len(data)):
            raise
        return RecordWrite(sha256, final, created=False)
    return RecordWrite(sha256, final, created=True)


__all__ = ["RecordWrite", "check_stored_record", "sha256_bytes", "sha256_file", "write_record"]
