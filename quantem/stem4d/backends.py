"""Backend availability, detected once: a backend is available only when its device exists."""

from __future__ import annotations

import functools

from quantem.stem4d.errors import BackendUnavailableError

BACKENDS = ("cpu", "cuda")


@functools.cache
def cuda_unavailable_reason() -> str | None:
    """Why the CUDA backend cannot run here, or None when it can."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install raising on import
        return f"CuPy cannot be imported ({type(exc).__name__}: {exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"CuPy imports but finds no CUDA device ({type(exc).__name__}: {exc})"
    if count < 1:
        return "CuPy imports but finds no CUDA device"
    return None


def cuda_available() -> bool:
    return cuda_unavailable_reason() is None


def require_backend(backend: str) -> str:
    """Validate a backend name; raise if it is unknown or cannot run here."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    if backend == "cuda":
        reason = cuda_unavailable_reason()
        if reason is not None:
            raise BackendUnavailableError(f"the cuda backend is unavailable: {reason}")
    return backend


def best_backend() -> str:
    return "cuda" if cuda_available() else "cpu"


def format_gpu_uuid(raw: bytes) -> str | None:
    """A device's 16-byte UUID (CUDA device properties) as nvidia-smi prints it:
    ``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx``; None unless ``raw`` is 16 bytes (CuPy
    returns the field as a C string, cut at the UUID's first zero byte)."""
    if len(raw) != 16:
        return None
    h = bytes(raw).hex()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
