"""The array module (numpy or CuPy) behind an array, so one implementation serves both.

Compute code written against ``xp = array_module(x)`` runs on the CPU with numpy and on
the GPU with CuPy without a second copy of each rule. CuPy is imported only when the
array is not a numpy array, so CPU-only installs never import it.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def array_module(array: Any) -> Any:
    """``numpy`` for host arrays (and scalars, lists), ``cupy`` for CuPy arrays."""
    if isinstance(array, np.ndarray) or not hasattr(array, "__cuda_array_interface__"):
        return np
    import cupy

    return cupy


def module_for_backend(backend: str) -> Any:
    """``numpy`` for ``"cpu"``, ``cupy`` for ``"cuda"``."""
    if backend == "cpu":
        return np
    if backend == "cuda":
        import cupy

        return cupy
    raise ValueError(f"unknown backend {backend!r}; expected 'cpu' or 'cuda'")


def to_numpy(array: Any) -> np.ndarray:
    """A host numpy copy/view of a numpy or CuPy array."""
    if isinstance(array, np.ndarray):
        return array
    get = getattr(array, "get", None)
    if callable(get):
        return np.asarray(get())
    return np.asarray(array)


def array_digest(array: Any) -> dict:
    """SHA-256 of an array's raw bytes (C order), with its dtype and shape.

    Equal digests mean bit-identical outputs: the regression check for deterministic
    compute (``docs/compute.md``). Device arrays are copied to the host first.
    """
    import hashlib

    host = np.ascontiguousarray(to_numpy(array))
    return {
        "sha256": hashlib.sha256(host.tobytes()).hexdigest(),
        "dtype": host.dtype.str,
        "shape": list(host.shape),
    }


def synchronize(xp: Any) -> None:
    """Wait for the GPU to finish queued work (no-op for numpy): timings need it."""
    if xp is not np:
        xp.cuda.get_current_stream().synchronize()


__all__ = ["array_digest", "array_module", "module_for_backend", "synchronize", "to_numpy"]
