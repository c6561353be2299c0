"""Time ``quantem.stem4d.io.save`` of a 32x32x192x192 uint16 synthetic acquisition (in memory).

Prints the median of 5 saves and the first 16 hex digits of the file's SHA-256 (so two
encoder versions can be checked byte-identical as well as timed)::

    python benchmarks/qem_encode_time.py
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time

import numpy as np


def main() -> None:
    import quantem.stem4d.io as qio
    from quantem.stem4d.acquisition import Acquisition
    from quantem.stem4d.io.synthetic import make_frames

    frames = make_frames(0, 1024, scan_shape=(32, 32), detector_shape=(192, 192))
    mask = np.zeros((192, 192), np.uint32)
    metadata = {
        "scan_shape": (32, 32),
        "detector_shape": (192, 192),
        "dtype": "uint16",
        "n_frames": 1024,
        "pixel_mask": mask,
    }
    acquisition = Acquisition(frames.reshape(32, 32, 192, 192), metadata, mask == 0, "cpu")
    folder = tempfile.mkdtemp(prefix="qem-encode-time-")
    times = []
    for i in range(5):
        path = os.path.join(folder, f"x{i}.qem")
        start = time.perf_counter()
        qio.save(acquisition, path)
        times.append(time.perf_counter() - start)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    print(f"median save s {sorted(times)[2]:.3f} sha256 {digest}")


if __name__ == "__main__":
    main()
