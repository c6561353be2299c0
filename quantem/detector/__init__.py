"""Exact detector products (masked sums, frames, BF/ADF, mean pattern, centre of mass).

``prepare(acq)`` or ``prepare([acq, ...])`` returns a
:class:`~quantem.detector.session.DetectorSession`; see ``docs/detector.md``. The session
and mask helpers are imported lazily so ``import quantem.detector`` stays cheap (no numba).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "DetectorSession": "quantem.detector.session",
    "CenterOfMass": "quantem.detector.session",
    "DiskEstimate": "quantem.detector.masks",
    "disk_mask": "quantem.detector.masks",
    "annulus_mask": "quantem.detector.masks",
    "estimate_disk": "quantem.detector.masks",
}


def prepare(acquisitions: Any, **options: Any):
    """Prepare a :class:`~quantem.detector.session.DetectorSession` over one or more acquisitions.

    A single :class:`~quantem.acquisition.Acquisition` gives a session whose products are
    single arrays; a list or tuple gives products as lists in the same order. Option:
    ``output`` (``"array"`` or ``"torch"``; default: each acquisition's own ``output``),
    see :class:`~quantem.detector.session.DetectorSession`.
    """
    from quantem.detector.session import DetectorSession

    return DetectorSession.from_acquisitions(acquisitions, **options)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'quantem.detector' has no attribute {name!r}")


__all__ = ["prepare", *_LAZY]
