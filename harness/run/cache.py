"""Page-cache control for single files: eviction and residency probes.

Cold trials must start with *this acquisition's* files out of the page cache, and
the runner must be able to prove it. Global caches are never dropped (that needs
root, disturbs other work on the machine and hides what a user will actually see).

Eviction: ``fdatasync`` (dirty pages cannot be dropped) then
``posix_fadvise(POSIX_FADV_DONTNEED)`` over the whole file. The kernel honours this
for clean pages of regular block-backed filesystems; on ``tmpfs`` the pages *are* the
file and stay, which the residency probe then reports.

Residency: the ``cachestat(2)`` system call (Linux >= 6.5) counts cached pages of a
file range without mapping it. Where it is missing (older kernel, seccomp filter)
the fallback maps the file read-only and asks ``mincore(2)`` which pages are
resident; mapping does not fault pages in, so the probe does not disturb the state it
measures. Both paths report bytes, rounded to whole pages, clipped to the file size.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from collections.abc import Iterable
from dataclasses import dataclass

from quantem.stem4d.cuda.registered_files import release_registered_files
from quantem.stem4d.io import page_cache

#: ``cachestat`` uses the unified syscall number on every architecture Linux added it for.
SYS_CACHESTAT = 451
PAGE_SIZE = page_cache.PAGE_SIZE

METHOD_CACHESTAT = "cachestat"
METHOD_MINCORE = "mincore"


class _CachestatRange(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Cachestat(ctypes.Structure):
    _fields_ = [
        ("nr_cache", ctypes.c_uint64),
        ("nr_dirty", ctypes.c_uint64),
        ("nr_writeback", ctypes.c_uint64),
        ("nr_evicted", ctypes.c_uint64),
        ("nr_recently_evicted", ctypes.c_uint64),
    ]


@dataclass(frozen=True)
class Residency:
    """Page-cache residency of one file or a group of files."""

    resident_bytes: int
    file_bytes: int
    method: str

    @property
    def fraction(self) -> float:
        """Resident share of the file bytes, 0.0 for empty files."""
        if self.file_bytes <= 0:
            return 0.0
        return min(1.0, self.resident_bytes / self.file_bytes)


_cachestat_works: bool | None = None


def _cachestat_pages(fd: int) -> int | None:
    """Cached pages of the whole file by ``cachestat``, or None when the call is unavailable."""
    global _cachestat_works
    if _cachestat_works is False:
        return None
    libc = page_cache.libc()
    whole_file = _CachestatRange(0, 0)  # len 0 means "to the end of the file"
    stats = _Cachestat()
    rc = libc.syscall(SYS_CACHESTAT, fd, ctypes.byref(whole_file), ctypes.byref(stats), 0)
    if rc != 0:
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EPERM, errno.EOPNOTSUPP, errno.EINVAL):
            _cachestat_works = False
            return None
        raise OSError(err, f"cachestat failed: {os.strerror(err)}")
    _cachestat_works = True
    return int(stats.nr_cache)


def _mincore_pages(fd: int, size: int) -> int:
    """Resident pages of the first ``size`` bytes by mapping the file and calling ``mincore``."""
    return page_cache.resident_pages(fd, size)


def probe_file_residency(path: str | os.PathLike, *, method: str | None = None) -> Residency:
    """Bytes of ``path`` resident in the page cache.

    Parameters
    ----------
    path
        A regular file.
    method
        ``"cachestat"``, ``"mincore"`` or None (cachestat where it works, else mincore).
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return Residency(0, 0, method or METHOD_CACHESTAT)
        pages = None
        used = METHOD_MINCORE
        if method in (None, METHOD_CACHESTAT):
            pages = _cachestat_pages(fd)
            if pages is not None:
                used = METHOD_CACHESTAT
            elif method == METHOD_CACHESTAT:
                raise OSError(errno.ENOSYS, "cachestat is not available on this kernel")
        if pages is None:
            pages = _mincore_pages(fd, size)
        return Residency(min(size, pages * PAGE_SIZE), size, used)
    finally:
        os.close(fd)


def probe_residency(paths: Iterable[str | os.PathLike]) -> Residency:
    """Combined residency of several files (e.g. an ARINA master and its data shards)."""
    resident = total = 0
    methods = set()
    for path in paths:
        one = probe_file_residency(path)
        resident += one.resident_bytes
        total += one.file_bytes
        methods.add(one.method)
    method = METHOD_MINCORE if METHOD_MINCORE in methods else METHOD_CACHESTAT
    return Residency(resident, total, method)


def evict_file(path: str | os.PathLike) -> None:
    """Ask the kernel to drop ``path``'s pages from the page cache (this file only).

    Dirty pages are written first (``fdatasync``) because the kernel keeps them
    otherwise, and pages this process keeps registered for the GPU (quantem's
    ``staging="registered"``) are released first because the kernel cannot drop a
    page-locked page. Advisory: check the result with :func:`probe_file_residency`.
    """
    release_registered_files([path])
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        try:
            os.fdatasync(fd)
        except OSError as exc:  # some filesystems refuse fdatasync on a read-only descriptor
            if exc.errno not in (errno.EINVAL, errno.EBADF, errno.EROFS):
                raise
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def evict_files(paths: Iterable[str | os.PathLike]) -> None:
    """:func:`evict_file` for each path."""
    for path in paths:
        evict_file(path)
