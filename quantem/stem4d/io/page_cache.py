"""Read-only file mappings and page-cache residency (``mmap(2)``, ``mincore(2)`` via libc).

Used by the CUDA loader's mapped staging (the GPU copies straight from page-cache pages
of a mapped shard) to decide whether a file range is in memory, and by the harness's
residency probes. A mapping made here is never read by the CPU: mapping does not fault
pages in, so asking ``mincore`` does not change the state it reports.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap
import os

import numpy as np

PAGE_SIZE = mmap.PAGESIZE


@functools.cache
def libc() -> ctypes.CDLL:
    """The C library with the prototypes this module (and the harness's probes) use."""
    lib = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    lib.syscall.restype = ctypes.c_long
    lib.mmap.restype = ctypes.c_void_p
    lib.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    return lib


def page_floor(offset: int) -> int:
    return offset - offset % PAGE_SIZE


def page_ceil(offset: int) -> int:
    return -(-offset // PAGE_SIZE) * PAGE_SIZE


class ReadOnlyMapping:
    """``length`` bytes of an open file from the page-aligned ``offset``, mapped read-only.

    ``address`` is the start of the mapping; :meth:`close` unmaps it (idempotent).
    """

    def __init__(self, fd: int, offset: int, length: int) -> None:
        if offset % PAGE_SIZE or offset < 0 or length <= 0:
            raise ValueError(
                f"a mapping needs a page-aligned offset and a positive length, got {offset}, {length}"
            )
        self.length = int(length)
        self.offset = int(offset)
        address = libc().mmap(None, self.length, mmap.PROT_READ, mmap.MAP_SHARED, fd, self.offset)
        if address in (None, ctypes.c_void_p(-1).value):
            err = ctypes.get_errno()
            raise OSError(err, f"mmap failed: {os.strerror(err)}")
        self.address: int | None = int(address)

    def resident_pages(self) -> int:
        """Pages of the mapping present in the page cache (``mincore``)."""
        if self.address is None:
            raise ValueError("the mapping is closed")
        n_pages = page_ceil(self.length) // PAGE_SIZE
        vec = (ctypes.c_ubyte * n_pages)()
        if libc().mincore(self.address, self.length, vec) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mincore failed: {os.strerror(err)}")
        return int(np.count_nonzero(np.frombuffer(vec, dtype=np.uint8) & 1))

    @property
    def pages(self) -> int:
        return page_ceil(self.length) // PAGE_SIZE

    def close(self) -> None:
        if self.address is not None:
            libc().munmap(self.address, self.length)
            self.address = None

    def __enter__(self) -> ReadOnlyMapping:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def resident_pages(fd: int, size: int) -> int:
    """Resident pages of the first ``size`` bytes of an open file (0 for an empty file)."""
    if size <= 0:
        return 0
    with ReadOnlyMapping(fd, 0, size) as mapping:
        return mapping.resident_pages()


__all__ = ["PAGE_SIZE", "ReadOnlyMapping", "libc", "page_ceil", "page_floor", "resident_pages"]
