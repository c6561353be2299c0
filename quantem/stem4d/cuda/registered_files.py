"""Page-cache ranges of data files kept page-locked across loads (``staging="registered"``).

A warm load with pread staging is bound by the CPU copying every compressed byte out of
the page cache into pinned memory (~30 GB/s while the copy engine reads the same host
memory). Registering a file's read-only mapping with ``cudaHostRegister`` lets the copy
engine read the page-cache pages themselves (55 GB/s on the H200, no CPU copy), but
registering costs about what one copy does (0.06-0.09 s per 3 GiB, serialised in the
driver), so it pays only when the registration outlives the load. This module keeps
those registrations for the life of the process:

* keyed by file identity (device, inode) and checked on every load against the file's
  stat (size, modification and change times): a file rewritten, truncated or replaced
  is released and registered again, never served from the old pages;
* a file that changed within :data:`RACY_NS` before it was registered is used for that
  load only (file times tick coarsely, so a same-size rewrite within a tick would keep
  the stat; the frame-index memo and git treat such "racy" entries the same way);
* bounded by :func:`budget_bytes` (the pages cannot be evicted while registered), least
  recently used first out; ``0`` turns the cache off;
* used from the first load of a file in a process by default (:data:`REGISTER_FROM_ENV`):
  a fresh process's first load is faster registering at once than staging by pread and
  registering from the second load. ``QUANTEM_REGISTER_FROM_LOAD=2`` keeps a
  process that reads each file once from pinning its pages (the first load stages by
  pread and notes the file's stat; a file loaded again is registered then);
* a registration whose file changed is released at the next lookup of that file and
  after any failed GPU load (:meth:`RegisteredFiles.release_changed`);
* released explicitly (:func:`release_registered_files`, e.g. by the harness before it
  evicts a file for a cold load: a registered page cannot leave the page cache) and at
  interpreter exit.

The CPU never dereferences a mapping made here: residency is asked with ``mincore`` and
the bytes are read only by the GPU's DMA. CuPy is imported only when something is
registered, so the release API is safe to call from code that never touched a GPU.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from quantem.stem4d.cuda.mapped_staging import (
    HOST_REGISTER_PORTABLE,
    HOST_REGISTER_READ_ONLY,
    MappedStagingUnavailable,
)
from quantem.stem4d.io.page_cache import PAGE_SIZE, ReadOnlyMapping, page_ceil, page_floor

#: A file whose modification or change time lies less than this before its registration
#: is not kept (see the module docstring).
RACY_NS = 2_000_000_000
#: Environment variable: the cache's budget in bytes (``0`` turns it off).
BUDGET_ENV = "QUANTEM_REGISTERED_FILES_BYTES"
#: Default budget: this share of the machine's physical memory.
DEFAULT_BUDGET_FRACTION = 0.25
#: Environment variable: the load of the same unchanged files (1 = the first, 2 = the
#: second, ...) from which they are registered (default :data:`DEFAULT_REGISTER_FROM`).
REGISTER_FROM_ENV = "QUANTEM_REGISTER_FROM_LOAD"
DEFAULT_REGISTER_FROM = 1
#: Files whose loads are counted (least recently loaded forgotten first).
SEEN_LIMIT = 1 << 16


class RegistrationUnavailable(MappedStagingUnavailable):
    """The files cannot be served from registered pages this time (not resident, over the
    budget, the driver refused, or a file changed during the load); the load uses pread
    staging instead."""


@dataclass(frozen=True)
class FileStat:
    """What identifies one version of a file's contents (as far as ``stat`` can tell)."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileStat:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    @property
    def identity(self) -> tuple[int, int]:
        return (self.dev, self.ino)


def _cuda_register(address: int, nbytes: int) -> None:
    import cupy

    cupy.cuda.runtime.hostRegister(
        address, nbytes, HOST_REGISTER_READ_ONLY | HOST_REGISTER_PORTABLE
    )


def _cuda_unregister(address: int) -> None:
    import cupy

    cupy.cuda.runtime.hostUnregister(address)


def default_register_from() -> int:
    """:data:`REGISTER_FROM_ENV` when set, else :data:`DEFAULT_REGISTER_FROM`."""
    value = os.environ.get(REGISTER_FROM_ENV)
    if value is None or not value.strip():
        return DEFAULT_REGISTER_FROM
    try:
        n = int(value)
    except ValueError:
        raise ValueError(
            f"{REGISTER_FROM_ENV} must be a whole number >= 1, got {value!r}"
        ) from None
    if n < 1:
        raise ValueError(f"{REGISTER_FROM_ENV} must be >= 1, got {n}")
    return n


def default_budget_bytes() -> int:
    """:data:`BUDGET_ENV` when set, else :data:`DEFAULT_BUDGET_FRACTION` of physical memory."""
    value = os.environ.get(BUDGET_ENV)
    if value is not None and value.strip():
        try:
            budget = int(value)
        except ValueError:
            raise ValueError(
                f"{BUDGET_ENV} must be a whole number of bytes, got {value!r}"
            ) from None
        if budget < 0:
            raise ValueError(f"{BUDGET_ENV} must be >= 0, got {budget}")
        return budget
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0
    return int(physical * DEFAULT_BUDGET_FRACTION)


class Registration:
    """One registered range ``[offset, offset + length)`` of one file version."""

    def __init__(self, path: str, stat: FileStat, mapping: ReadOnlyMapping, keep: bool) -> None:
        self.path = path
        self.stat = stat
        self.mapping = mapping
        self.offset = mapping.offset
        self.length = mapping.length
        self.locked_bytes = page_ceil(mapping.length)
        self.keep = keep
        self.leases = 0
        self.released = False
        #: Set when a release was asked while a load held the registration.
        self.doomed = False

    def covers(self, lo: int, hi: int) -> bool:
        return self.offset <= lo and hi <= self.offset + self.length

    def address_of(self, file_offset: int) -> int:
        """The host address of byte ``file_offset`` of the file (inside the range)."""
        if self.released or not (self.offset <= file_offset < self.offset + self.length):
            raise ValueError(f"offset {file_offset} outside the registered range of {self.path}")
        assert self.mapping.address is not None
        return self.mapping.address + (file_offset - self.offset)


def _range_of(lo: int, hi: int) -> tuple[int, int]:
    start = page_floor(lo)
    return start, hi - start


class RegisteredFiles:
    """The cache. One process-wide instance (:func:`registered_files`); tests make their
    own with stand-ins for the CUDA calls (``register(address, nbytes)``,
    ``unregister(address)``) and the clock (nanoseconds, as ``time.time_ns``)."""

    def __init__(
        self,
        budget: int | None = None,
        *,
        register: Callable[[int, int], None] = _cuda_register,
        unregister: Callable[[int], None] = _cuda_unregister,
        clock: Callable[[], int] = time.time_ns,
        register_from: int | None = None,
    ) -> None:
        self._budget = default_budget_bytes() if budget is None else int(budget)
        self._register_from = default_register_from()
        if register_from is not None:
            self.set_register_from(register_from)
        #: Loads counted per file version: identity -> (stat, loads so far).
        self._seen: OrderedDict[tuple[int, int], tuple[FileStat, int]] = OrderedDict()
        self._register = register
        self._unregister = unregister
        self._clock = clock
        self._entries: OrderedDict[tuple[int, int], Registration] = OrderedDict()
        #: Leased registrations not in ``_entries`` (racy ones, and doomed ones).
        self._outside: set[Registration] = set()
        self._lock = threading.RLock()
        self._pid = os.getpid()

    # -- facts ------------------------------------------------------------------------
    @property
    def budget(self) -> int:
        return self._budget

    def set_budget(self, nbytes: int) -> None:
        """Change the budget; registrations beyond it that no load holds are released."""
        if nbytes < 0:
            raise ValueError(f"the budget must be >= 0, got {nbytes}")
        with self._lock:
            self._budget = int(nbytes)
            self._make_room(0)

    @property
    def register_from(self) -> int:
        return self._register_from

    def set_register_from(self, n: int) -> None:
        """Register files from their ``n``-th load in this process (1: the first)."""
        if int(n) < 1:
            raise ValueError(f"register_from must be >= 1, got {n}")
        self._register_from = int(n)

    def forget_loads(self) -> None:
        """Forget how often each file was loaded (the next load of any counts as its first)."""
        with self._lock:
            self._seen.clear()

    def count_load(self, fds: Iterable[int], paths: Iterable[str]) -> None:
        """Count a load of the open files ``fds`` that are not registered; raise
        :class:`RegistrationUnavailable` (the load stages by pread) while any of them has
        been loaded, unchanged, fewer than :attr:`register_from` times, this one included."""
        short = None
        with self._lock:
            self._check_pid()
            for fd, path in zip(fds, paths):
                stat = FileStat.of(os.fstat(fd))
                old = self._seen.pop(stat.identity, None)
                count = old[1] + 1 if old is not None and old[0] == stat else 1
                self._seen[stat.identity] = (stat, count)
                if count < self._register_from and short is None:
                    short = (path, count)
            while len(self._seen) > SEEN_LIMIT:
                self._seen.popitem(last=False)
        if short is not None:
            path, count = short
            raise RegistrationUnavailable(
                f"{path}: load {count} of the unchanged file in this process; files are "
                f"registered from load {self._register_from} ({REGISTER_FROM_ENV})"
            )

    def release_changed(self) -> int:
        """Release kept registrations whose file changed, moved or vanished since it was
        registered; returns the bytes released now."""
        with self._lock:
            self._check_pid()
            freed = 0
            for entry in list(self._entries.values()):
                try:
                    current = FileStat.of(os.stat(entry.path))
                except OSError:
                    current = None
                if current != entry.stat:
                    if entry.leases == 0:
                        freed += entry.locked_bytes
                    self._drop(entry)
            return freed

    def registered_bytes(self) -> int:
        """Bytes page-locked by this cache now (kept and in-use registrations)."""
        with self._lock:
            return sum(r.locked_bytes for r in self._entries.values()) + sum(
                r.locked_bytes for r in self._outside
            )

    def paths(self) -> list[str]:
        """The files with a kept registration, least recently used first."""
        with self._lock:
            return [r.path for r in self._entries.values()]

    # -- loads ------------------------------------------------------------------------
    def lookup(
        self, fd: int, path: str, lo: int, hi: int, st: os.stat_result | None = None
    ) -> Registration | None:
        """A kept registration of the open file ``fd`` covering ``[lo, hi)``, leased to
        the caller (give it back with :meth:`give_back`); ``None`` when there is none, it
        covers less, or the file changed since it was registered (that registration is
        then released). ``st``: ``os.fstat(fd)``, when the caller has just taken it."""
        stat = FileStat.of(os.fstat(fd) if st is None else st)
        with self._lock:
            self._check_pid()
            entry = self._entries.get(stat.identity)
            if entry is None:
                return None
            if entry.stat != stat:
                self._drop(entry)
                return None
            if not entry.covers(lo, hi):  # register() replaces it by the union
                return None
            self._entries.move_to_end(stat.identity)
            entry.leases += 1
            return entry

    def check_resident(self, fd: int, lo: int, hi: int, path: str = "") -> None:
        """Raise :class:`RegistrationUnavailable` unless every page of ``[lo, hi)`` is in
        the page cache (registering absent pages would read them from the disk one fault
        at a time, far slower than the parallel pread of a cold load)."""
        offset, length = _range_of(lo, hi)
        with ReadOnlyMapping(fd, offset, length) as mapping:
            resident = mapping.resident_pages()
            if resident < mapping.pages:
                raise RegistrationUnavailable(
                    f"{path or 'a file'}: {mapping.pages - resident} of {mapping.pages} pages "
                    "are not in the page cache"
                )

    def fits(self, nbytes: int) -> bool:
        """Whether ``nbytes`` more could be registered after releasing every
        registration no load holds."""
        with self._lock:
            held = sum(r.locked_bytes for r in self._entries.values() if r.leases) + sum(
                r.locked_bytes for r in self._outside
            )
            return held + nbytes <= self._budget

    def register(self, fd: int, path: str, lo: int, hi: int) -> Registration:
        """Map and page-lock ``[lo, hi)`` (page-aligned outward) of the open file ``fd`` and
        lease it to the caller. An older registration of the file is replaced (by one
        covering both ranges when the file has not changed). Raises
        :class:`RegistrationUnavailable` over the budget or when the driver refuses."""
        stat = FileStat.of(os.fstat(fd))
        if hi > stat.size:
            raise RegistrationUnavailable(
                f"{path}: {hi - stat.size} bytes of the requested range lie past the end of the file"
            )
        with self._lock:
            self._check_pid()
            for other in list(self._entries.values()):
                # The path now names another file (replaced by a rename): the old
                # version's pages would otherwise stay locked until the LRU reached them.
                if other.path == os.fspath(path) and other.stat.identity != stat.identity:
                    self._drop(other)
            old = self._entries.get(stat.identity)
            if old is not None:
                if old.stat == stat:
                    lo, hi = min(lo, old.offset), max(hi, old.offset + old.length)
                self._drop(old)
            offset, length = _range_of(lo, hi)
            locked = page_ceil(length)
            if not self._make_room(locked):
                raise RegistrationUnavailable(
                    f"{path}: registering {locked} bytes would exceed the budget of "
                    f"{self._budget} bytes ({BUDGET_ENV})"
                )
            mapping = ReadOnlyMapping(fd, offset, length)
            started = self._clock()
            try:
                self._register(mapping.address, locked)
            except Exception as exc:  # CUDARuntimeError: unsupported, pages past the end
                mapping.close()
                raise RegistrationUnavailable(
                    f"{path}: cudaHostRegister of {locked} mapped bytes failed: {exc}"
                ) from exc
            keep = max(stat.mtime_ns, stat.ctime_ns) < started - RACY_NS
            entry = Registration(os.fspath(path), stat, mapping, keep)
            entry.leases = 1
            if keep:
                self._entries[stat.identity] = entry
            else:
                self._outside.add(entry)
            return entry

    def still_current(self, entry: Registration, fd: int) -> bool:
        """Whether the open file still has the stat ``entry`` was registered with."""
        return FileStat.of(os.fstat(fd)) == entry.stat

    def give_back(self, entry: Registration) -> None:
        """End a lease; a racy or doomed registration is released with its last lease."""
        with self._lock:
            entry.leases -= 1
            if entry.leases <= 0 and (not entry.keep or entry.doomed):
                self._outside.discard(entry)
                self._release(entry)

    def forget_version(self, entry: Registration) -> None:
        """Stop serving ``entry`` (its file changed); released once no load holds it."""
        with self._lock:
            self._drop(entry)

    # -- release ----------------------------------------------------------------------
    def release(self, paths: Iterable[str | os.PathLike] | None = None) -> int:
        """Release the registrations of ``paths`` (every registration when ``None``);
        returns the bytes released now (a registration a running load holds goes when
        the load ends). A path that does not exist releases what was registered under
        that name."""
        with self._lock:
            self._check_pid()
            if paths is None:
                victims = list(self._entries.values())
            else:
                identities = set()
                names = set()
                for path in paths:
                    names.add(os.path.abspath(os.fspath(path)))
                    with contextlib.suppress(OSError):  # gone: released by name only
                        identities.add(FileStat.of(os.stat(path)).identity)
                victims = [
                    r
                    for key, r in self._entries.items()
                    if key in identities or os.path.abspath(r.path) in names
                ]
            freed = 0
            for entry in victims:
                if entry.leases == 0:
                    freed += entry.locked_bytes
                self._drop(entry)
            return freed

    # -- internals (lock held) --------------------------------------------------------
    def _drop(self, entry: Registration) -> None:
        key = entry.stat.identity
        if self._entries.get(key) is entry:
            del self._entries[key]
        if entry.leases > 0:
            entry.doomed = True
            self._outside.add(entry)
        else:
            self._outside.discard(entry)
            self._release(entry)

    def _release(self, entry: Registration) -> None:
        if entry.released:
            return
        entry.released = True
        try:
            if os.getpid() == self._pid:
                self._unregister(entry.mapping.address)
        finally:
            entry.mapping.close()

    def _make_room(self, nbytes: int) -> bool:
        """Release unheld registrations, least recently used first, until ``nbytes``
        more fit the budget; whether they do."""

        def held() -> int:
            return sum(r.locked_bytes for r in self._entries.values()) + sum(
                r.locked_bytes for r in self._outside
            )

        for key in list(self._entries):
            if held() + nbytes <= self._budget:
                break
            entry = self._entries[key]
            if entry.leases == 0:
                self._drop(entry)
        return held() + nbytes <= self._budget

    def _check_pid(self) -> None:
        # A forked child inherits the mappings but not the registrations: forget them
        # (never unregister what the parent registered).
        if os.getpid() != self._pid:
            self._entries.clear()
            self._outside.clear()
            self._pid = os.getpid()


_instance_lock = threading.Lock()
_instance: RegisteredFiles | None = None


def registered_files() -> RegisteredFiles:
    """The process-wide cache (created on first use; released at interpreter exit)."""
    global _instance
    with _instance_lock:
        if _instance is None:
            _instance = RegisteredFiles()
            atexit.register(_release_at_exit)
        return _instance


def _release_at_exit() -> None:
    cache = _instance
    if cache is None:
        return
    # CUDARuntimeError (a RuntimeError): the CUDA context may be gone already at exit;
    # the driver then drops the registrations with it.
    with contextlib.suppress(RuntimeError):
        cache.release()


def release_registered_files(paths: Iterable[str | os.PathLike] | None = None) -> int:
    """Release the kept page-cache registrations of ``paths`` (all when ``None``), e.g.
    before evicting those files from the page cache; returns the bytes released. Does
    nothing (and imports nothing) when this process registered nothing."""
    cache = _instance
    if cache is None:
        return 0
    return cache.release(paths)


def release_changed_files() -> int:
    """:meth:`RegisteredFiles.release_changed` of the process-wide cache (nothing when
    this process registered nothing)."""
    cache = _instance
    return 0 if cache is None else cache.release_changed()


@contextlib.contextmanager
def releasing_changed_on_error():
    """Around a GPU load: when it fails, release the registrations of files that changed
    (a truncated or rewritten file fails before its registration is looked up)."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            release_changed_files()
        raise


def set_budget_bytes(nbytes: int) -> None:
    """Set the process-wide cache's budget in bytes (``0`` turns registered staging off:
    loads use pread staging)."""
    registered_files().set_budget(nbytes)


def budget_bytes() -> int:
    """The process-wide cache's budget in bytes."""
    return registered_files().budget


__all__ = [
    "BUDGET_ENV",
    "PAGE_SIZE",
    "RACY_NS",
    "REGISTER_FROM_ENV",
    "FileStat",
    "RegisteredFiles",
    "Registration",
    "RegistrationUnavailable",
    "budget_bytes",
    "default_budget_bytes",
    "default_register_from",
    "registered_files",
    "release_changed_files",
    "release_registered_files",
    "releasing_changed_on_error",
    "set_budget_bytes",
]
