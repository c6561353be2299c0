"""Zero-copy hand-over of device arrays to PyTorch through DLPack."""

from __future__ import annotations

from typing import Any

from quantem.errors import BackendUnavailableError


def to_torch(obj: Any) -> Any:
    """A ``torch.Tensor`` sharing the memory of a CuPy array or a cuda Acquisition's data.

    Raises
    ------
    BackendUnavailableError
        PyTorch is not installed.
    TypeError
        ``obj`` is not a device array (or a dense cuda acquisition).
    """
    from quantem.acquisition import Acquisition

    if isinstance(obj, Acquisition):
        if obj.backend != "cuda" or obj.data is None:
            raise TypeError(
                "to_torch needs a dense cuda acquisition "
                f"(got backend {obj.backend!r}, representation {obj.representation!r})"
            )
        obj = obj.data
    if not hasattr(obj, "__dlpack__") or not hasattr(obj, "device"):
        raise TypeError(f"to_torch needs a CuPy array, got {type(obj).__name__}")
    try:
        import torch
    except ImportError as exc:
        raise BackendUnavailableError(f"PyTorch is not installed ({exc})") from exc
    return torch.from_dlpack(obj)
