"""The child of a fresh-process first-load cell: run as a script, it imports only quantem.

``python harness/run/fresh_child.py '{"path": ..., "backend": ...}'`` (a path, not
``-m``: importing the ``harness`` package would add time no user pays). It loads the
file as a user's script does (``quantem.stem4d.io.load(path, backend=...)``, defaults),
computes the bright-field image, and prints one JSON line with ``time.monotonic_ns``
marks (the same clock as the parent's spawn mark) after each part: interpreter start,
imports, CUDA context (cuda), load, product; the kernel compilations' own seconds
(cuda); the product's SHA-256, hashed after the last mark.
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


def main() -> None:
    args = json.loads(sys.argv[1])
    marks = {"start": T_START}
    import numpy as np

    import quantem.stem4d.io
    from quantem.stem4d.detector import prepare

    marks["imports"] = time.monotonic_ns()
    compiled: list = []
    sync = None
    if args["backend"] == "cuda":
        import cupy

        cupy.cuda.runtime.free(0)  # creates the context
        sync = cupy.cuda.runtime.deviceSynchronize
        marks["context"] = time.monotonic_ns()
        _timed_compilations(compiled)
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
                "kernel_compile_seconds": sum(compiled),
                "kernel_paths": provenance,
                "product_sha256": digest,
            }
        )
    )


if __name__ == "__main__":
    main()
