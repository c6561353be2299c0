"""Floors of the copies a CUDA load cannot avoid: host to device, device to device.

* ``h2d_pinned``: the bytes copied from page-locked host memory to the device (the copy
  a pread-staged load makes after its reads);
* ``h2d_registered_page_cache``: the files' own page-cache pages, mapped read-only and
  registered with ``cudaHostRegister`` as ``quantem.stem4d.cuda.registered_files`` keeps
  them, copied by DMA to the device: the copy a warm registered load makes, and so its
  floor (a parallel ``pread`` floor is one such a load can beat);
* ``d2d_copy``: a device-to-device copy of the decoded size (a decoding load writes
  every decoded byte into device memory).

Each copy is timed between device barriers over a stated sweep of piece sizes, the best
median is the floor and the sweep is recorded; the copied bytes are compared with their
source after the timer. The CUDA calls go through :class:`CupyRuntime`; tests pass a
stand-in whose "device" is host memory, so the planning, coverage and checks run
without a GPU.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.report import quantile
from harness.run.floors.reads import plan_pieces
from harness.run.timers import WallTimer
from harness.run.trials import make_resident
from quantem.stem4d.cuda.mapped_staging import HOST_REGISTER_PORTABLE, HOST_REGISTER_READ_ONLY
from quantem.stem4d.io.page_cache import ReadOnlyMapping, page_ceil

H2D_PINNED = "h2d_pinned"
H2D_REGISTERED = "h2d_registered_page_cache"
D2D_COPY = "d2d_copy"
DEFAULT_COPY_PIECES = (8 << 20, 64 << 20, 256 << 20)
_HOST_TO_DEVICE, _DEVICE_TO_DEVICE = 1, 3
#: The window of the after-timer comparison of copied bytes with their files.
_CHECK_WINDOW = 256 << 20


class CupyRuntime:
    """The CUDA calls of the copy floors, through CuPy, on one non-blocking stream."""

    def __init__(self) -> None:
        import cupy

        self._cupy = cupy
        self._stream = cupy.cuda.Stream(non_blocking=True)

    def device_buffer(self, nbytes: int) -> Any:
        return self._cupy.empty(max(1, int(nbytes)), dtype=self._cupy.uint8)

    def pinned_buffer(self, nbytes: int) -> Any:
        import cupyx

        return cupyx.empty_pinned(max(1, int(nbytes)), dtype="uint8")

    def device_address(self, buffer: Any) -> int:
        return int(buffer.data.ptr)

    def host_address(self, buffer: Any) -> int:
        return int(buffer.ctypes.data)

    def copy(self, dst: int, src: int, nbytes: int, kind: int) -> None:
        self._cupy.cuda.runtime.memcpyAsync(dst, src, nbytes, kind, self._stream.ptr)

    def barrier(self) -> None:
        self._cupy.cuda.runtime.deviceSynchronize()

    def register(self, address: int, nbytes: int) -> None:
        flags = HOST_REGISTER_READ_ONLY | HOST_REGISTER_PORTABLE  # as registered_files does
        self._cupy.cuda.runtime.hostRegister(address, nbytes, flags)

    def unregister(self, address: int) -> None:
        self._cupy.cuda.runtime.hostUnregister(address)

    def device_bytes(self, buffer: Any, lo: int, hi: int) -> bytes:
        return buffer[lo:hi].get().tobytes()

    def fill_pattern(self, buffer: Any) -> None:
        cp = self._cupy
        step = 16 << 20  # an index array of the whole decoded size would not fit
        for lo in range(0, buffer.size, step):
            hi = min(buffer.size, lo + step)
            buffer[lo:hi] = (cp.arange(lo, hi, dtype=cp.int64) % 251).astype(cp.uint8)

    def equal(self, a: Any, b: Any) -> bool:
        return bool(self._cupy.array_equal(a, b))


def _best(sweep: list[dict]) -> dict | None:
    usable = [s for s in sweep if s["median"] is not None]
    return min(usable, key=lambda s: s["median"]) if usable else None


def _time_copies(
    runtime: Any, pieces: list[tuple[int, int, int]], kind: int, repeats: int
) -> list[float]:
    """Time ``repeats`` passes of ``(dst, src, nbytes)`` copies between device barriers."""
    seconds = []
    for _ in range(repeats):
        timer = WallTimer(runtime.barrier).start()
        for dst, src, n in pieces:
            runtime.copy(dst, src, n, kind)
        seconds.append(timer.stop())
    return seconds


def _sweep(
    method: str,
    nbytes: int,
    pieces: Sequence[int],
    repeats: int,
    plan: Callable[[int], list[tuple[int, int, int]]],
    kind: int,
    runtime: Any,
    check: Callable[[list[tuple[int, int, int]]], None],
) -> dict:
    sweep = []
    for piece in pieces:
        copies = plan(piece)
        runs = sorted(_time_copies(runtime, copies, kind, repeats))
        check(copies)  # after the timer: the copied bytes must be the source's
        sweep.append(
            {
                "piece_bytes": int(piece),
                "n": len(runs),
                "median": quantile(runs, 0.5),
                "min": runs[0],
            }
        )
    best = _best(sweep)
    return {
        "method": method,
        "seconds": best["median"] if best else None,
        "bytes": int(nbytes),
        "settings": {"piece_bytes": best["piece_bytes"]} if best else None,
        "sweep": sweep,
    }


def h2d_pinned(
    nbytes: int, runtime: Any, pieces: Sequence[int] = DEFAULT_COPY_PIECES, repeats: int = 3
) -> dict:
    """``nbytes`` copied host to device from one pinned buffer of the largest piece."""
    largest = min(max(pieces), max(1, nbytes))
    host = runtime.pinned_buffer(largest)
    host[:] = np.resize(np.arange(251, dtype=np.uint8), largest)
    device = runtime.device_buffer(nbytes)
    src, dst = runtime.host_address(host), runtime.device_address(device)

    def plan(piece: int) -> list[tuple[int, int, int]]:
        piece = min(piece, largest)
        return [(dst + off, src, n) for _, off, n in plan_pieces([nbytes], piece)]

    def check(copies: list[tuple[int, int, int]]) -> None:
        # Every piece copies the buffer's head into its own slot: the first and last show it.
        for at, _, n in {copies[0], copies[-1]}:
            lo = at - dst
            if runtime.device_bytes(device, lo, lo + n) != host[:n].tobytes():
                raise RuntimeError(
                    f"{H2D_PINNED}: the device bytes {lo}-{lo + n} differ from the pinned source"
                )

    return _sweep(H2D_PINNED, nbytes, pieces, repeats, plan, _HOST_TO_DEVICE, runtime, check)


@contextlib.contextmanager
def registered_mappings(files: Sequence[Path], runtime: Any):
    """Each file mapped read-only, made resident and registered; released on exit."""
    done: list[tuple[ReadOnlyMapping, int]] = []
    fds = []
    try:
        make_resident(files)
        for path in files:
            fd = os.open(path, os.O_RDONLY)
            fds.append(fd)
            size = os.fstat(fd).st_size
            if size == 0:
                raise ValueError(f"{path}: an empty file has no pages to register")
            mapping = ReadOnlyMapping(fd, 0, size)
            runtime.register(mapping.address, page_ceil(size))
            done.append((mapping, size))
        yield [(m.address, size) for m, size in done]
    finally:
        for mapping, _ in done:
            with contextlib.suppress(Exception):
                runtime.unregister(mapping.address)
            mapping.close()
        for fd in fds:
            os.close(fd)


def h2d_registered(
    files: Sequence[Path],
    runtime: Any,
    pieces: Sequence[int] = DEFAULT_COPY_PIECES,
    repeats: int = 3,
) -> dict:
    """The files' registered page-cache pages copied by DMA into one device buffer."""
    files = [f for f in files if Path(f).stat().st_size > 0]  # nothing to map or copy
    sizes = [Path(f).stat().st_size for f in files]
    nbytes = sum(sizes)
    device = runtime.device_buffer(nbytes)
    base = runtime.device_address(device)
    with registered_mappings(files, runtime) as mapped:
        starts, offset = [], 0
        for _, size in mapped:
            starts.append(offset)
            offset += size

        def plan(piece: int) -> list[tuple[int, int, int]]:
            sizes_ = [size for _, size in mapped]
            return [
                (base + starts[i] + off, mapped[i][0] + off, n)
                for i, off, n in plan_pieces(sizes_, piece)
            ]

        def check(copies: list[tuple[int, int, int]]) -> None:
            for path, start, (_, size) in zip(files, starts, mapped):
                with open(path, "rb") as f:
                    for lo in range(0, size, _CHECK_WINDOW):
                        hi = min(size, lo + _CHECK_WINDOW)
                        if runtime.device_bytes(device, start + lo, start + hi) != f.read(hi - lo):
                            raise RuntimeError(
                                f"{H2D_REGISTERED}: the device bytes of {path} differ from the "
                                f"file at bytes {lo}-{hi}"
                            )

        return _sweep(
            H2D_REGISTERED, nbytes, pieces, repeats, plan, _HOST_TO_DEVICE, runtime, check
        )


def d2d_copy(
    nbytes: int, runtime: Any, pieces: Sequence[int] = (1 << 62,), repeats: int = 3
) -> dict:
    """A device-to-device copy of ``nbytes`` (default: one copy of the whole size)."""
    src, dst = runtime.device_buffer(nbytes), runtime.device_buffer(nbytes)
    runtime.fill_pattern(src)
    s, d = runtime.device_address(src), runtime.device_address(dst)

    def plan(piece: int) -> list[tuple[int, int, int]]:
        return [(d + off, s + off, n) for _, off, n in plan_pieces([nbytes], piece)]

    def check(copies: list[tuple[int, int, int]]) -> None:
        if not runtime.equal(dst, src):
            raise RuntimeError(f"{D2D_COPY}: the copy differs from its source")

    shown = [min(p, max(1, nbytes)) for p in pieces]
    return _sweep(D2D_COPY, nbytes, shown, repeats, plan, _DEVICE_TO_DEVICE, runtime, check)
