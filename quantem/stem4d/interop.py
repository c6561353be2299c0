"""Handing arrays to other frameworks without copying them (PyTorch through DLPack).

``io.load(..., output="torch")`` (through ``Acquisition.set_output``) and
``detector.prepare(..., output="torch")`` use this module; :func:`to_torch` is also
public, for arrays and acquisitions loaded with the default ``output="array"``. PyTorch is imported only when a tensor is
asked for, and never by ``import quantem``.

A tensor made here shares memory with the array it came from (a CuPy array on the
GPU, a numpy array on the host): no byte is copied, and the tensor stays valid as
long as either object is alive. Closing an acquisition drops the acquisition's
references; a tensor the caller still holds keeps its memory alive.
"""

from __future__ import annotations

from typing import Any

from quantem.stem4d.errors import BackendUnavailableError

#: What loads and detector products return: ``"array"`` (numpy on cpu, CuPy on
#: cuda) or ``"torch"`` (a ``torch.Tensor`` sharing the same memory).
OUTPUTS = ("array", "torch")


def check_output(output: str) -> str:
    """Return ``output`` if it is one of :data:`OUTPUTS`, else raise ``ValueError``."""
    if output not in OUTPUTS:
        raise ValueError(f"output must be one of {', '.join(map(repr, OUTPUTS))}, not {output!r}")
    return output


def require_torch() -> Any:
    """Import and return ``torch``, or raise :class:`BackendUnavailableError`."""
    try:
        import torch
    except ImportError as exc:
        raise BackendUnavailableError(
            f"output='torch' needs PyTorch, which cannot be imported ({exc}); "
            "install the 'torch' extra"
        ) from exc
    return torch


def is_torch_tensor(obj: Any) -> bool:
    """True for a ``torch.Tensor`` (checked without importing torch)."""
    cls = type(obj)
    return cls.__module__.split(".")[0] == "torch" and cls.__name__ in ("Tensor", "Parameter")


def array_to_torch(array: Any) -> Any:
    """A tensor sharing ``array``'s memory (numpy or CuPy, any dtype DLPack carries)."""
    torch = require_torch()
    if is_torch_tensor(array):
        return array
    if not hasattr(array, "__dlpack__"):
        raise TypeError(f"cannot hand a {type(array).__name__} to torch: it has no __dlpack__")
    return torch.from_dlpack(array)


def to_torch(obj: Any) -> Any:
    """Zero-copy ``torch`` view of an array, an acquisition's data or a detector product.

    Accepts a numpy or CuPy array, an object with a ``dense_array()`` method (a dense
    :class:`~quantem.stem4d.acquisition.Acquisition`: its 4D data), a
    :class:`~quantem.stem4d.detector.session.CenterOfMass` (converted field by field),
    or a list of these (converted element by element). Duck-typed, so this module
    needs no acquisition type (``acquisition`` imports it).

    Raises
    ------
    BackendUnavailableError
        PyTorch is not installed.
    TypeError
        ``obj`` holds no array (an encoded or closed acquisition, an unknown object).
    """
    dense_array = getattr(obj, "dense_array", None)
    if callable(dense_array):  # an Acquisition, or any object that holds one dense array
        return array_to_torch(dense_array())
    if isinstance(obj, list):
        return [to_torch(item) for item in obj]
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # CenterOfMass and friends
        return type(obj)(*(to_torch(item) for item in obj))
    return array_to_torch(obj)


__all__ = [
    "OUTPUTS",
    "array_to_torch",
    "check_output",
    "is_torch_tensor",
    "require_torch",
    "to_torch",
]
