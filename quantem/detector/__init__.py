"""Exact detector products (masked sums, frames, BF/ADF, mean pattern, centre of mass)."""

from __future__ import annotations

from typing import Any


def prepare(acquisitions: Any, **options: Any):
    """Prepare a :class:`~quantem.detector.session.DetectorSession` over one or more acquisitions."""
    from quantem.detector.session import DetectorSession

    return DetectorSession.from_acquisitions(acquisitions, **options)


__all__ = ["prepare"]
