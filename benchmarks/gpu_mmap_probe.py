"""Probe: can page-cache pages be DMA'd to the GPU without the pread copy?

The HDF5 load floor on the H200 VM is the parallel pread of the compressed chunks from the
page cache into pinned memory (11.5 GB/s), a CPU copy. This probe maps a warm file
read-only, page-locks the mapping with ``cudaHostRegister`` (read-only flag) and copies it
to the device straight from the page cache, timing registration, copy and unregistration
against the pread-into-pinned floor on the same bytes. A measurement for the notes, not a
code path of the loaders.

Usage::

    python benchmarks/gpu_mmap_probe.py --dir /tmp/probe --gib 3
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

PROT_READ, MAP_SHARED = 1, 1
HOST_REGISTER_READ_ONLY = 8
PIECE = 2 << 20


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", default="/tmp/probe")
    p.add_argument("--gib", type=float, default=3.0)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args(argv)

    import cupy

    from quantem.stem4d.io.page_cache import libc as page_cache_libc

    libc = page_cache_libc()

    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "blob.bin"
    size = int(args.gib * (1 << 30)) // PIECE * PIECE
    if not path.exists() or path.stat().st_size != size:
        rng = np.random.default_rng(0)
        with open(path, "wb") as f:
            for _ in range(size // (256 << 20)):
                f.write(rng.integers(0, 256, 256 << 20, dtype=np.uint8).tobytes())
            f.write(rng.integers(0, 256, size % (256 << 20), dtype=np.uint8).tobytes())
    path.read_bytes()  # warm
    print(f"bytes {size}", flush=True)

    dev = cupy.empty(size, dtype=cupy.uint8)
    fd = os.open(path, os.O_RDONLY)
    pinned = cupy.cuda.alloc_pinned_memory(size)
    host = np.frombuffer(pinned, dtype=np.uint8, count=size)
    view = memoryview(host)
    pieces = [(o, min(PIECE, size - o)) for o in range(0, size, PIECE)]

    def pread_all() -> float:
        with ThreadPoolExecutor(16) as pool:
            t0 = time.perf_counter()
            list(pool.map(lambda r: os.preadv(fd, [view[r[0] : r[0] + r[1]]], r[0]), pieces))
            return time.perf_counter() - t0

    def h2d(ptr: int) -> float:
        stream = cupy.cuda.Stream(non_blocking=True)
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        cupy.cuda.runtime.memcpyAsync(dev.data.ptr, ptr, size, 1, stream.ptr)
        stop.record(stream)
        stop.synchronize()
        return cupy.cuda.get_elapsed_time(start, stop) / 1e3

    floors = [pread_all() for _ in range(args.reps)]
    print(
        f"pread_into_pinned_s {statistics.median(floors):.4f} ({size / statistics.median(floors) / 1e9:.2f} GB/s)"
    )
    copies = [h2d(host.ctypes.data) for _ in range(args.reps)]
    print(
        f"h2d_from_pinned_s {statistics.median(copies):.4f} ({size / statistics.median(copies) / 1e9:.2f} GB/s)"
    )

    addr = libc.mmap(None, size, PROT_READ, MAP_SHARED, fd, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        print("mmap failed", ctypes.get_errno())
        return 1
    results = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        try:
            cupy.cuda.runtime.hostRegister(addr, size, HOST_REGISTER_READ_ONLY)
        except Exception as exc:  # report what the driver says and stop
            print(
                f"hostRegister(read-only) of the file mapping failed: {type(exc).__name__}: {exc}"
            )
            break
        t1 = time.perf_counter()
        copy = h2d(addr)
        t2 = time.perf_counter()
        cupy.cuda.runtime.hostUnregister(addr)
        t3 = time.perf_counter()
        results.append((t1 - t0, copy, t3 - t2, t3 - t0))
        ok = bool(cupy.array_equal(dev[: 1 << 20], cupy.asarray(host[: 1 << 20])))
        print(
            f"register {t1 - t0:.4f} s, h2d from page cache {copy:.4f} s ({size / copy / 1e9:.2f} GB/s), unregister {t3 - t2:.4f} s, total {t3 - t0:.4f} s, bytes equal {ok}",
            flush=True,
        )
    libc.munmap(addr, size)
    os.close(fd)
    if results:
        total = statistics.median(r[3] for r in results)
        print(
            f"mapped_total_s {total:.4f} vs pread floor {statistics.median(floors):.4f} + h2d {statistics.median(copies):.4f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
