"""Memory evidence of a run: peaks of host RSS, of the GPU pool and of the card."""

from __future__ import annotations

import resource
from typing import Any

from harness.run.backends import BackendProfile


class MemoryTracker:
    """Peaks of host RSS and of GPU pool/card use, sampled after every load."""

    def __init__(self, profile: BackendProfile) -> None:
        self.profile = profile
        self.gpu_allocated = self.gpu_reserved = self.gpu_card_used = None
        self.resident_bytes: int | None = None

    def sample(self, acquisition: Any = None) -> None:
        if acquisition is not None:
            nbytes = resident_nbytes(acquisition)
            if nbytes is not None:
                self.resident_bytes = max(self.resident_bytes or 0, nbytes)
        device = self.profile.sample_device_memory()
        if device is None:
            return
        used, reserved, card = device
        self.gpu_allocated = max(self.gpu_allocated or 0, used)
        self.gpu_reserved = max(self.gpu_reserved or 0, reserved)
        self.gpu_card_used = max(self.gpu_card_used or 0, card)

    def section(self) -> dict:
        peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        return {
            "peak_rss_bytes": int(peak_rss),
            "gpu_allocated_peak_bytes": self.gpu_allocated,
            "gpu_reserved_peak_bytes": self.gpu_reserved,
            "gpu_card_used_peak_bytes": self.gpu_card_used,
            "resident_bytes": self.resident_bytes,
        }


def resident_nbytes(acquisition: Any) -> int | None:
    """Bytes a loaded acquisition keeps resident (dense array or encoded payload)."""
    if getattr(acquisition, "data", None) is not None:
        return int(acquisition.data.nbytes)
    encoded = getattr(acquisition, "encoded", None)
    for name in ("nbytes", "resident_bytes"):
        value = getattr(encoded, name, None)
        if isinstance(value, int):
            return value
    return None
