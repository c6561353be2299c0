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


def reference_options(frames, pixel_mask, dtype, apply_mask, det_bin):
    """Independent, loop-based reference of the load options (mask, dtype, bin).

    ``dtype`` is ``"native"``, ``"u8"``, ``"u16"`` or ``"u32"``; returns int64 frames
    and the number of clipped values.
    """
    out = frames.astype(np.int64)
    if apply_mask:
        out[:, pixel_mask != 0] = 0
    clipped = 0
    limits = {"u8": 255, "u16": 65535, "u32": 2**32 - 1}
    if dtype != "native":
        clipped = int((out > limits[dtype]).sum())
        out = np.minimum(out, limits[dtype])
    if det_bin > 1:
        n, r, c = out.shape
        rows, cols = r // det_bin, c // det_bin
        binned = np.zeros((n, rows, cols), dtype=np.int64)
        for i in range(rows):
            for j in range(cols):
                binned[:, i, j] = out[
                    :, i * det_bin : (i + 1) * det_bin, j * det_bin : (j + 1) * det_bin
                ].sum(axis=(1, 2))
        out = np.minimum(binned, 2**32 - 1)  # uint32 block sums saturate
    return out, clipped
