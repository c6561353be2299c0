"""Profiling instrumentation of quantem's loaders: off in every timed run, and recorded.

``quantem.stem4d.cuda.staging.PROFILE`` records a per-batch timeline with timing CUDA
events; it costs a little on every batch, so a run whose loads are timed refuses to
start while it is on (a benchmark script that switched it on and then imported the
harness would otherwise time instrumented loads). The state is written into the
report's ``conditions.instrumentation``.
"""

from __future__ import annotations

from harness.errors import UsageError
from quantem.stem4d.cuda import staging


def instrumentation_state() -> dict[str, bool]:
    """Each profiling switch of the loaders and whether it is on."""
    return {"quantem.stem4d.cuda.staging.PROFILE": bool(staging.PROFILE)}


def refuse_instrumentation() -> None:
    """UsageError naming the switch when any profiling instrumentation is on."""
    on = [name for name, value in instrumentation_state().items() if value]
    if on:
        raise UsageError(
            f"{', '.join(on)} is on: timed runs measure uninstrumented loads; switch it off"
        )
