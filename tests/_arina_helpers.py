"""Independent references for ARINA tests (h5py + hdf5plugin, not our reader)."""

from __future__ import annotations

import h5py
import hdf5plugin  # noqa: F401  (registers the bitshuffle filter for h5py)
import numpy as np


def h5py_frames(master) -> np.ndarray:
    """Every frame of an ARINA acquisition, in shard order, read by h5py through the links."""
    with h5py.File(master, "r") as f:
        group = f["/entry/data"]
        names = sorted(k for k in group if k.startswith("data_"))
        return np.concatenate([group[k][()] for k in names])
