"""The child of a fresh-process first-load cell: run as a script, it imports only quantem.

``python harness/run/io_scale/fresh_child.py '{"path": ..., "backend": ...}'`` (a path, not
``-m``: importing the ``harness`` package would add time no user pays). It loads the
file as a user's script does (``quantem.stem4d.io.load(path, backend=...)``, defaults),
computes the bright-field image, and prints one JSON line with ``time.monotonic_ns``
marks (the same clock as the parent's spawn mark) after each part: interpreter start,
imports, CUDA context (cuda) or numba's import (cpu: the load imports it anyway), load,
product; the kernel compilations' own seconds (cuda: NVRTC or fatbin; cpu: inside
numba's dispatcher, its CPU target start, cache loads and any compile); the product's
SHA-256, hashed after the last mark.
"""

import time

T_START = time.monotonic_ns()

import hashlib  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402


def _timed_compilations(seconds: list) -> None:
    """Sum the time of quantem's kernel module compilations and loads (NVRTC or fatbin)."""
    from quantem.stem4d.cuda import module_loader

    compile_ = module_loader._compile

    def timed(*args):
        begin = time.perf_counter()
        try:
            return compile_(*args)
        finally:
            seconds.append(time.perf_counter() - begin)

    module_loader._compile = timed


def _timed_jit(intervals: list) -> None:
    """Record the spans spent in numba's dispatcher finding a kernel (its CPU target
    start, cache loads, compiles); decode threads may wait there together, so the parent
    takes the union of the spans."""
    from numba.core import dispatcher

    compile_ = dispatcher.Dispatcher._compile_for_args

    def timed(self, *args, **kws):
        begin = time.perf_counter()
        try:
            return compile_(self, *args, **kws)
        finally:
            intervals.append((begin, time.perf_counter()))

    dispatcher.Dispatcher._compile_for_args = timed


def _union_seconds(intervals: list) -> float:
    total, reach = 0.0, float("-inf")
    for begin, end in sorted(intervals):
        if end > reach:
            total += end - max(begin, reach)
            reach = end
    return total


def main() -> None:
    args = json.loads(sys.argv[1])
    marks = {"start": T_START}
    import numpy as np

    import quantem.stem4d.io
    from quantem.stem4d.detector import prepare

    marks["imports"] = time.monotonic_ns()
    compiled: list = []
    jit_spans: list = []
    sync = None
    if args["backend"] == "cuda":
        import cupy

        cupy.cuda.runtime.free(0)  # creates the context
        sync = cupy.cuda.runtime.deviceSynchronize
        marks["context"] = time.monotonic_ns()
        _timed_compilations(compiled)
    elif args["backend"] == "cpu":
        import numba  # noqa: F401

        marks["jit_import"] = time.monotonic_ns()
        _timed_jit(jit_spans)
    acq = quantem.stem4d.io.load(args["path"], backend=args["backend"])
    if sync:
        sync()
    marks["load"] = time.monotonic_ns()
    bf = prepare(acq).bf()
    if sync:
        sync()
    marks["product"] = time.monotonic_ns()
    host = bf.get() if hasattr(bf, "get") and not isinstance(bf, np.ndarray) else bf
    digest = hashlib.sha256(np.ascontiguousarray(host).tobytes()).hexdigest()
    provenance = []
    if sync:
        from quantem.stem4d.cuda import kernel_provenance

        provenance = [r.get("path") for r in kernel_provenance()]
    acq.close()
    print(
        json.dumps(
            {
                "marks": marks,
                "kernel_compile_seconds": sum(compiled) + _union_seconds(jit_spans),
                "kernel_paths": provenance,
                "product_sha256": digest,
            }
        )
    )


if __name__ == "__main__":
    main()
