"""One timed load and the evidence about its cache state.

A trial is: make the cache state (evict for cold; make resident for cached), probe
residency, read the process IO counters, time the load (with a device barrier
before the clock stops), read the counters again. Outside the timing the caller
checks the product and releases the data. :func:`classify_trial` then decides
whether the trial *kept its label*:

* cold: residency before <= 1% **and** physical reads >= 90% of the file bytes;
* cached: residency before >= 99% **and** physical reads <= 10% of the file bytes.

A trial that fails its test is labelled ``not-cold`` / ``not-cached`` and left out
of that cell's statistics (it stays in the raw records).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.run import cache, proc_io
from harness.run.timers import WallTimer

#: Labels of a timed stage's rounds: the first (compilation, plans) and the warm ones.
FIRST, WARM = "first", "warm"


def stage_trial(
    acquisition: str,
    fmt: str,
    stage: str,
    index: int,
    seconds: float,
    *,
    label: str | None = None,
    kept: bool | None = None,
) -> dict[str, Any]:
    """A timed stage as a trial row: no file read (bytes and residency 0); round 0 is the
    first, dropped from the summaries, unless ``label`` and ``kept`` say otherwise."""
    return {
        "acquisition": acquisition,
        "format": fmt,
        "cache_state": stage,
        "stage": stage,
        "trial_index": index,
        "label": label if label is not None else (FIRST if index == 0 else WARM),
        "kept": kept if kept is not None else index > 0,
        "seconds": seconds,
        "read_bytes": 0,
        "file_bytes": 0,
        "residency_before": 0.0,
    }


COLD_MAX_RESIDENCY = 0.01
COLD_MIN_READ_FRACTION = 0.90
CACHED_MIN_RESIDENCY = 0.99
CACHED_MAX_READ_FRACTION = 0.10
COLD = "cold"
CACHED = "cached"
_WARM_CHUNK = 8 << 20


def classify_trial(
    cache_state: str, residency_before: float, read_bytes: int, file_bytes: int
) -> tuple[str, bool]:
    """Return ``(label, kept)`` for a trial measured in ``cache_state``."""
    read_fraction = read_bytes / file_bytes if file_bytes > 0 else 0.0
    if cache_state == COLD:
        kept = residency_before <= COLD_MAX_RESIDENCY and read_fraction >= COLD_MIN_READ_FRACTION
    elif cache_state == CACHED:
        kept = (
            residency_before >= CACHED_MIN_RESIDENCY and read_fraction <= CACHED_MAX_READ_FRACTION
        )
    else:
        raise ValueError(f"unknown cache state {cache_state!r}")
    return (cache_state if kept else f"not-{cache_state}"), kept


def label_rules() -> dict[str, str]:
    """The rules of :func:`classify_trial` as the report states them."""
    return {
        COLD: f"residency_before <= {COLD_MAX_RESIDENCY} and "
        f"read_bytes >= {COLD_MIN_READ_FRACTION} * file_bytes",
        CACHED: f"residency_before >= {CACHED_MIN_RESIDENCY} and "
        f"read_bytes <= {CACHED_MAX_READ_FRACTION} * file_bytes",
    }


def make_resident(paths: Sequence[str | os.PathLike]) -> None:
    """Read files sequentially so their pages are cached (untimed preparation of cached trials)."""
    buffer = bytearray(_WARM_CHUNK)
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buffer):
                pass


@dataclass
class Measurement:
    """What a trial measured; ``result`` is whatever the load returned (caller releases it)."""

    cache_state: str
    seconds: float
    stages: dict[str, float]
    residency_before: float
    read_bytes: int
    file_bytes: int
    result: Any = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def label_and_kept(self) -> tuple[str, bool]:
        return classify_trial(
            self.cache_state, self.residency_before, self.read_bytes, self.file_bytes
        )


def prepare_cache_state(cache_state: str, files: Sequence[str | os.PathLike]) -> cache.Residency:
    """Evict (cold) or warm (cached) ``files``, then probe and return their residency."""
    if cache_state == COLD:
        cache.evict_files(files)
    elif cache.probe_residency(files).fraction < CACHED_MIN_RESIDENCY:
        make_resident(files)
    return cache.probe_residency(files)


def measure_load(
    load: Callable[[WallTimer], Any],
    *,
    cache_state: str,
    files: Sequence[str | os.PathLike],
    evict_also: Sequence[str | os.PathLike] = (),
    barrier: Callable[[], None] | None = None,
) -> Measurement:
    """Run one timed in-process load of ``files`` in ``cache_state``.

    ``load(timer)`` performs the load and may time named stages with
    ``timer.stage(name)``. ``evict_also`` are further files evicted for a cold trial
    but not counted in the file bytes (e.g. nothing, or a sidecar index).
    """
    if cache_state == COLD and evict_also:
        cache.evict_files(evict_also)
    residency = prepare_cache_state(cache_state, files)
    timer = WallTimer(barrier) if barrier is not None else WallTimer()
    before = proc_io.read_io_counters()
    # the process's CPU time over the load, all threads (ended ones too): with the wall
    # time it tells time spent waiting (for the CPU, held by other work, or for the disk)
    cpu_before = time.process_time()
    timer.start()
    result = load(timer)
    seconds = timer.stop()
    cpu_seconds = time.process_time() - cpu_before
    after = proc_io.read_io_counters()
    delta = after - before
    return Measurement(
        cache_state=cache_state,
        seconds=seconds,
        stages=dict(timer.stages),
        residency_before=residency.fraction,
        read_bytes=max(0, delta.read_bytes),
        file_bytes=residency.file_bytes,
        result=result,
        extra={
            "rchar": delta.rchar,
            "cpu_seconds": cpu_seconds,
            "residency_method": residency.method,
            "io_read_bytes_before": before.read_bytes,
            "io_read_bytes_after": after.read_bytes,
        },
    )


def sha256_array(array: Any) -> str:
    """SHA-256 of an array's raw bytes in C order, copied to the host, never cast."""
    import numpy as np

    if hasattr(array, "get") and not isinstance(array, np.ndarray):  # cupy
        array = array.get()
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def indexed_product(acquisition: Any) -> tuple[str, list[int], str]:
    """SHA-256 of ``detector.prepare(acq).masked_sum(mask)`` with ``mask[::2, ::2] = True``.

    Returns ``(sha256, shape, exposed dtype)`` of the acquisition. The product touches
    every frame, so two loads agree on it only when they agree on (nearly) all data,
    and it is cheap next to the load itself.
    """
    import numpy as np

    from quantem.stem4d import detector

    det_r, det_c = acquisition.shape[2], acquisition.shape[3]
    mask = np.zeros((det_r, det_c), dtype=bool)
    mask[::2, ::2] = True
    session = detector.prepare(acquisition)
    product = session.masked_sum(mask)
    return (
        sha256_array(product),
        [int(n) for n in acquisition.shape],
        str(np.dtype(acquisition.dtype)),
    )
