"""Floors on the host: the cold read and the warm read's sweep of a load's files, and the
write of its decoded size.

The bytes are the files a load of the format reads (master and shards for HDF5, the
``.qem`` file), read whole with ``os.preadv`` in pieces spread over a thread pool, each
thread into its own reused buffer (no page faults on fresh memory: the best the host
can do). A cold read makes and verifies its cache state exactly as a cold load does
(:func:`harness.run.trials.measure_load`: eviction, residency probe, physical read
counters, the same label rules). A warm read is measured over a stated sweep of thread
counts and piece sizes; the best setting's median is the floor and the whole sweep is
recorded. Every read is checked after its timer: the bytes read must equal the files'
sizes (a short read is an error, never a fast floor). A load that decodes writes every
decoded byte: :func:`host_copy` copies that many bytes into one kept, pre-faulted buffer
over the same thread sweep (the CPU's counterpart of the device-to-device copy).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from harness.report import quantile
from harness.run import trials
from harness.run.timers import WallTimer

#: Method names written into the floor cells (docs/io-scale.md, "Floors").
COLD_READ = "cold_pread_parallel"
WARM_READ = "warm_pread_parallel"
HOST_COPY = "host_copy_decoded"
#: The default sweep of the warm read (threads, piece bytes).
DEFAULT_PIECES = (1 << 20, 8 << 20, 64 << 20)


def default_threads() -> tuple[int, ...]:
    """Powers of two from an eighth of the CPU count (at least 1) up to the CPU count, which
    is included: fewer threads than that never read a page cache fastest on a large host,
    and every setting costs a whole read of the files."""
    cpus = os.cpu_count() or 1
    out, n = [], 1
    while n * 2 <= cpus // 8:
        n *= 2
    while n < cpus:
        out.append(n)
        n *= 2
    out.append(cpus)
    return tuple(out)


def plan_pieces(sizes: Sequence[int], piece_bytes: int) -> list[tuple[int, int, int]]:
    """``(file index, offset, length)`` pieces covering every byte of every file once."""
    if piece_bytes < 1:
        raise ValueError(f"piece_bytes must be >= 1, got {piece_bytes}")
    pieces = []
    for i, size in enumerate(sizes):
        for offset in range(0, int(size), piece_bytes):
            pieces.append((i, offset, min(piece_bytes, int(size) - offset)))
    return pieces


_pools: dict[int, ThreadPoolExecutor] = {}


def reader_pool(threads: int) -> ThreadPoolExecutor:
    """A kept pool of ``threads`` started threads (started outside every timer, as a
    loader's kept pools are: thread start-up is not part of reading)."""
    pool = _pools.get(threads)
    if pool is None:
        pool = _pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix="harness-floor")
        barrier = threading.Barrier(threads)
        list(pool.map(lambda _: barrier.wait(), range(threads)))  # every thread started
    return pool


def read_files(files: Sequence[Path], threads: int, piece_bytes: int) -> int:
    """Read every byte of ``files`` once, ``threads`` at a time; returns the bytes read.

    Raises OSError naming the file on a short read (the file shrank under the read).
    Call :func:`reader_pool` first when timing it.
    """
    fds = [os.open(path, os.O_RDONLY) for path in files]
    try:
        sizes = [os.fstat(fd).st_size for fd in fds]
        pieces = plan_pieces(sizes, piece_bytes)
        buffers: dict[int, bytearray] = {}

        def read(piece: tuple[int, int, int]) -> int:
            buffer = buffers.setdefault(threading.get_ident(), bytearray(piece_bytes))
            index, offset, length = piece
            view = memoryview(buffer)[:length]
            done = 0
            while done < length:
                got = os.preadv(fds[index], [view[done:]], offset + done)
                if got <= 0:
                    raise OSError(f"{files[index]}: short read at byte {offset + done}")
                done += got
            return done

        if threads <= 1:
            total = sum(read(p) for p in pieces)
        else:
            total = sum(reader_pool(threads).map(read, pieces))
        if total != sum(sizes):
            raise OSError(f"read {total} bytes of {sum(sizes)} from {[str(f) for f in files]}")
        return total
    finally:
        for fd in fds:
            os.close(fd)


def cold_read(
    files: Sequence[Path], threads: int, piece_bytes: int, evict_also: Sequence[Path] = ()
) -> dict:
    """One cold read of ``files`` with the cache state made and verified as for a cold load."""
    reader_pool(threads)
    m = trials.measure_load(
        lambda _timer: read_files(files, threads, piece_bytes),
        cache_state=trials.COLD,
        files=files,
        evict_also=evict_also,
    )
    label, kept = m.label_and_kept
    return {
        "method": COLD_READ,
        "seconds": m.seconds,
        "bytes": int(m.result),
        "label": label,
        "kept": kept,
        "residency_before": round(m.residency_before, 6),
        "read_bytes": int(m.read_bytes),
        "file_bytes": int(m.file_bytes),
        "settings": {"threads": int(threads), "piece_bytes": int(piece_bytes)},
    }


def warm_sweep(
    files: Sequence[Path],
    threads: Sequence[int],
    pieces: Sequence[int],
    repeats: int,
) -> dict:
    """The warm read at its best over ``threads`` x ``pieces``, each ``repeats`` times.

    Every repeat is a cached trial (residency and read counters checked); the floor is
    the lowest median of the settings whose every repeat kept the cached label.
    """
    sweep = []
    for n in threads:
        for piece in pieces:
            runs = []
            reader_pool(n)
            for _ in range(repeats):
                m = trials.measure_load(
                    lambda _timer, n=n, piece=piece: read_files(files, n, piece),
                    cache_state=trials.CACHED,
                    files=files,
                )
                runs.append((m.seconds, m.label_and_kept[1], int(m.result)))
            kept = sorted(s for s, ok, _ in runs if ok)
            sweep.append(
                {
                    "threads": int(n),
                    "piece_bytes": int(piece),
                    "n": len(runs),
                    "n_kept": len(kept),
                    "median": quantile(kept, 0.5) if len(kept) == len(runs) else None,
                    "min": kept[0] if kept else None,
                    "bytes": runs[0][2],
                }
            )
    usable = [s for s in sweep if s["median"] is not None]
    best = min(usable, key=lambda s: s["median"]) if usable else None
    return {
        "method": WARM_READ,
        "seconds": best["median"] if best else None,
        "bytes": best["bytes"] if best else sweep[0]["bytes"] if sweep else 0,
        "settings": (
            {"threads": best["threads"], "piece_bytes": best["piece_bytes"]} if best else None
        ),
        "sweep": sweep,
    }


def host_copy(
    nbytes: int, threads: Sequence[int], repeats: int, piece_bytes: int = 8 << 20
) -> dict:
    """``nbytes`` written into one pre-faulted buffer from a reused piece, at its best over
    ``threads``; the destination is checked after each timer."""
    piece = min(piece_bytes, max(1, nbytes))
    source = np.resize(np.arange(251, dtype=np.uint8), piece)
    target = np.zeros(max(1, nbytes), dtype=np.uint8)  # zeros, then written: pages faulted in
    target[:] = 1
    pieces = plan_pieces([nbytes], piece)

    def write(p: tuple[int, int, int]) -> None:
        _, offset, length = p
        np.copyto(target[offset : offset + length], source[:length])

    sweep = []
    for n in threads:
        runs = []
        for _ in range(repeats):
            target[-1] = 1
            pool = reader_pool(n) if n > 1 else None
            timer = WallTimer().start()
            if pool is None:
                for p in pieces:
                    write(p)
            else:
                list(pool.map(write, pieces))
            runs.append(timer.stop())
            if nbytes and target[nbytes - 1] != source[(nbytes - 1) % piece]:
                raise RuntimeError(f"{HOST_COPY}: the last byte was not written")
        runs.sort()
        sweep.append(
            {"threads": int(n), "n": len(runs), "median": quantile(runs, 0.5), "min": runs[0]}
        )
    best = min(sweep, key=lambda s: s["median"])
    return {
        "method": HOST_COPY,
        "seconds": best["median"],
        "bytes": int(nbytes),
        "settings": {"threads": best["threads"], "piece_bytes": int(piece)},
        "sweep": sweep,
    }
