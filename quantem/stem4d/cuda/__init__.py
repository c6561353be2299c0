"""The CUDA backend: GPU decoding of ARINA HDF5 and ``.qem`` data, exact GPU products.

Importing ``quantem`` never imports CuPy; this package imports it only inside the
functions that need a device. Public entry points are reached through
``quantem.stem4d.io.load(path, backend="cuda", ...)``, ``quantem.stem4d.detector.prepare`` on cuda
acquisitions, and :func:`to_torch` for a zero-copy hand-over to PyTorch.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "kernel_provenance",
    "release_cached_memory",
    "release_registered_files",
    "to_torch",
]


def to_torch(obj: Any) -> Any:
    """Hand a CuPy array (or a cuda Acquisition's dense data) to PyTorch without a copy.

    The same function as :func:`quantem.stem4d.interop.to_torch` (kept here for discoverability).
    """
    from quantem.stem4d.interop import to_torch as _to_torch

    return _to_torch(obj)


def kernel_provenance() -> list[dict[str, Any]]:
    """Which compiled code this process ran: one record per loaded kernel module with
    ``file``, ``key`` (SHA-256 of the rendered source and options), ``path``
    (``"fatbin"``: an ahead-of-time binary, with ``binary`` and ``binary_sha256``;
    ``"nvrtc"``: compiled at run time, with ``reason``) and ``device_capability``.
    For run reports' provenance; empty before the first GPU load."""
    from quantem.stem4d.cuda.module_loader import kernel_provenance as _provenance

    return _provenance()


def release_registered_files(paths: Any = None) -> int:
    """Release the page-cache registrations kept by ``staging="registered"`` loads.

    ``paths``: the files to release (all when ``None``). Returns the bytes released. A
    registered page cannot be evicted, so call this before dropping files from the page
    cache (the harness does before a cold load) or to give the memory back. Imports
    nothing and does nothing when no load registered a file. See
    :mod:`quantem.stem4d.cuda.registered_files`.
    """
    from quantem.stem4d.cuda.registered_files import release_registered_files as _release

    return _release(paths)


def release_cached_memory() -> None:
    """Give cached device and pinned memory back to the driver.

    ``Acquisition.close()`` drops every reference (CuPy's memory pool and the pinned
    staging cache keep the blocks, so the next load allocates nothing); call this to hand
    the memory back, e.g. before another library needs the GPU. Pool chunks that still
    hold a live array keep their free part too (CuPy returns whole chunks only). The
    page-cache registrations of ``staging="registered"`` are released too. The iDPC
    frequency grids are a cache of their own (``quantem.stem4d.dpc.integrate.clear_cache``).
    """
    import cupy

    from quantem.stem4d.cuda import pinned
    from quantem.stem4d.cuda.registered_files import release_registered_files as _release

    _release()
    pinned.free_cached()
    cupy.get_default_memory_pool().free_all_blocks()
