"""Helpers shared by the tests of ``harness.run`` (folders on a real disk or on tmpfs)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from harness.run.environment import filesystem_type

#: Filesystems on which posix_fadvise(DONTNEED) cannot evict (the pages are the file).
MEMORY_FILESYSTEMS = ("tmpfs", "ramfs", "overlay", "squashfs")


def real_disk_dir(tmp_path: Path) -> Path:
    """A fresh folder on a block-backed filesystem, or skip with the reason."""
    for candidate in (tmp_path, Path("/var/tmp"), Path(__file__).resolve().parents[2]):
        fs = filesystem_type(candidate)
        if fs and fs not in MEMORY_FILESYSTEMS and os.access(candidate, os.W_OK):
            if candidate == tmp_path:
                return tmp_path
            return Path(tempfile.mkdtemp(prefix="harness-run-test-", dir=candidate))
    pytest.skip("no writable folder on a block-backed filesystem (tmp, /var/tmp are memory-backed)")


def tmpfs_dir() -> Path:
    """A fresh folder on tmpfs (/dev/shm), or skip with the reason."""
    shm = Path("/dev/shm")
    if filesystem_type(shm) != "tmpfs" or not os.access(shm, os.W_OK):
        pytest.skip("/dev/shm is not a writable tmpfs here")
    return Path(tempfile.mkdtemp(prefix="harness-run-test-", dir=shm))
