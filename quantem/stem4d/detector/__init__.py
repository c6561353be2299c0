"""Exact detector products (masked sums, frames, BF/ADF, mean pattern, centre of mass).

``prepare(acq)`` or ``prepare([acq, ...])`` returns a
:class:`~quantem.stem4d.detector.session.DetectorSession`; see ``docs/detector.md``. The session
and mask helpers are imported lazily so ``import quantem.stem4d.detector`` stays cheap (no numba).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "DetectorSession": "quantem.stem4d.detector.session",
    "CenterOfMass": "quantem.stem4d.detector.session",
    "DiskEstimate": "quantem.stem4d.detector.masks",
    "disk_mask": "quantem.stem4d.detector.masks",
    "annulus_mask": "quantem.stem4d.detector.masks",
    "estimate_disk": "quantem.stem4d.detector.masks",
}


def prepare(acquisitions: Any, **options: Any):
    """Prepare a :class:`~quantem.stem4d.detector.session.DetectorSession` over one or more acquisitions.

    A single :class:`~quantem.stem4d.acquisition.Acquisition` gives a session whose products are
    single arrays; a list or tuple gives products as lists in the same order. Option:
    ``output`` (``"array"`` or ``"torch"``; default: each acquisition's own ``output``),
    see :class:`~quantem.stem4d.detector.session.DetectorSession`.
    """
    from quantem.stem4d.detector.session import DetectorSession

    return DetectorSession.from_acquisitions(acquisitions, **options)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'quantem.stem4d.detector' has no attribute {name!r}")


__all__ = ["prepare", *_LAZY]
