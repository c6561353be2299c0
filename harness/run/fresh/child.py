"""The child of a fresh-process cell: run as a script, it imports only quantem.

``python harness/run/fresh/child.py '{"path": ..., "backend": ..., "products": [...]}'`` (a
path, not ``-m``: importing the ``harness`` package would add time no user pays). It
loads the file as a user's script does (``quantem.stem4d.io.load(path, backend=...)``,
defaults), computes the products asked for (``"bf"``, the default, and ``"com"``: the
session's centre of mass) in that order, and prints one JSON line with
``time.monotonic_ns`` marks (the same clock as the parent's spawn mark) after each part:
interpreter start, imports, CUDA context (cuda), load, each product, and ``product``
after the last; the kernel compilations' own seconds (cuda: NVRTC or fatbin; cpu: inside
numba's dispatcher, its CPU target start, cache loads and any compile, where numba is
imported at all: the first calls run without it); whether numba was imported; each
product's SHA-256, hashed after the last mark.
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


def _timed_jit(dispatcher, intervals: list) -> None:
    """Record the spans spent in numba's dispatcher finding a kernel (its CPU target
    start, cache loads, compiles); decode threads may wait there together, so the parent
    takes the union of the spans."""
    compile_ = dispatcher.Dispatcher._compile_for_args

    def timed(self, *args, **kws):
        begin = time.perf_counter()
        try:
            return compile_(self, *args, **kws)
        finally:
            intervals.append((begin, time.perf_counter()))

    dispatcher.Dispatcher._compile_for_args = timed


class _TimeJitWhenImported:
    """A ``sys.meta_path`` finder that times numba's dispatcher if and when a product
    imports numba: importing it here would add the time the first calls avoid."""

    def __init__(self, intervals: list) -> None:
        self.intervals = intervals

    def find_spec(self, name, path, target=None):
        if name != "numba.core.dispatcher":
            return None
        import importlib.util

        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        exec_module = spec.loader.exec_module

        def exec_and_time(module):
            exec_module(module)
            _timed_jit(module, self.intervals)

        spec.loader.exec_module = exec_and_time
        return spec


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
        sys.meta_path.insert(0, _TimeJitWhenImported(jit_spans))
    acq = quantem.stem4d.io.load(args["path"], backend=args["backend"])
    if sync:
        sync()
    marks["load"] = time.monotonic_ns()
    session = prepare(acq)
    outputs = {}
    for name in args.get("products", ["bf"]):
        if name == "bf":
            outputs["bf"] = session.bf()
        elif name == "com":
            com = session.center_of_mass()
            outputs.update(com_row=com.row, com_col=com.col)
        else:
            raise SystemExit(f"fresh_child: unknown product {name!r}")
        if sync:
            sync()
        marks[name] = time.monotonic_ns()
    marks["product"] = time.monotonic_ns()
    digests = {}
    for name, array in outputs.items():
        host = array.get() if hasattr(array, "get") and not isinstance(array, np.ndarray) else array
        digests[name] = hashlib.sha256(np.ascontiguousarray(host).tobytes()).hexdigest()
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
                "numba_imported": "numba" in sys.modules,
                "product_sha256": digests.get("bf"),
                "products_sha256": digests,
            }
        )
    )


if __name__ == "__main__":
    main()
