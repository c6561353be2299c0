"""Wall-clock timers whose stop waits for the GPU.

CUDA work is asynchronous: a load "returns" when its kernels are queued. The timing
boundary of io-scale is *data usable on the device*, so a timer for the cuda backend
synchronises the device before it reads the clock. The CPU backend needs no barrier.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def _no_barrier() -> None:
    return None


def _cuda_barrier() -> None:
    import cupy

    cupy.cuda.runtime.deviceSynchronize()


def device_barrier(backend: str, devices: tuple[int, ...] | None = None) -> Callable[[], None]:
    """The call that waits for all queued device work of ``backend`` (a no-op off the GPU);
    with ``devices`` (a sharded run), the work of every one of those GPUs."""
    if backend != "cuda":
        return _no_barrier
    if devices is None:
        return _cuda_barrier

    def barrier() -> None:
        import cupy

        for device in devices:
            with cupy.cuda.Device(device):
                cupy.cuda.runtime.deviceSynchronize()

    return barrier


class WallTimer:
    """A ``perf_counter_ns`` timer with a device barrier before every reading.

    ``stages`` collects named intervals measured with :meth:`stage`; ``seconds`` is the
    whole interval from :meth:`start` to :meth:`stop`.
    """

    def __init__(self, barrier: Callable[[], None] = _no_barrier) -> None:
        self._barrier = barrier
        self._start_ns: int | None = None
        self._stop_ns: int | None = None
        self.stages: dict[str, float] = {}

    def start(self) -> WallTimer:
        self._barrier()  # earlier queued work must not be billed to this interval
        self._start_ns = time.perf_counter_ns()
        return self

    def stop(self) -> float:
        if self._start_ns is None:
            raise RuntimeError("timer stopped before it was started")
        self._barrier()
        self._stop_ns = time.perf_counter_ns()
        return self.seconds

    @property
    def seconds(self) -> float:
        if self._start_ns is None or self._stop_ns is None:
            raise RuntimeError("timer has not run")
        return (self._stop_ns - self._start_ns) / 1e9

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a named stage; repeated names accumulate."""
        self._barrier()
        begin = time.perf_counter_ns()
        try:
            yield
        finally:
            self._barrier()
            elapsed = (time.perf_counter_ns() - begin) / 1e9
            self.stages[name] = self.stages.get(name, 0.0) + elapsed

    def __enter__(self) -> WallTimer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.stop()
