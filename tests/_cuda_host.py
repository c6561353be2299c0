"""Host stand-ins for the CUDA loader's kernels, for tests that run the loaders' host
logic with numpy under CuPy's name."""

from __future__ import annotations

import numpy as np


def host_zero_invalid_pixels(frames, validity) -> None:
    """``quantem.stem4d.cuda.detector_kernels.zero_invalid_pixels`` on numpy frames, in place."""
    valid = np.asarray(validity, dtype=bool)
    frames.reshape(-1, valid.size)[:, ~valid.reshape(-1)] = 0
