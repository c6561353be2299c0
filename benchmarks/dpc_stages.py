"""Where iDPC's time goes on CUDA: host (CPU) and device time of each DPC stage.

Usage (on a GPU machine; the synthetic data of compute_products.py, made on the device)::

    PYTHONPATH=$PWD python benchmarks/dpc_stages.py [SCAN]

Each stage is timed by ``cupyx.profiler.benchmark`` (7 runs after 2 warm-ups); equal CPU
and GPU times mean the stage is bound by the host (launches, synchronisations), not by
the device. The figures in docs/performance/results.md ("Device session of 2026-12-01")
came from this script (then a scratch copy, ``.dev/dpcprof.py``) at SCAN 512.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from compute_products import make_cuda

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.detector import prepare
from quantem.stem4d.dpc.fields import divergence, rotate_field
from quantem.stem4d.dpc.integrate import integrate_gradient
from quantem.stem4d.dpc.reconstruct import beam_shifts, dpc, measure_com, reconstruct
from quantem.stem4d.dpc.rotation import find_rotation
from quantem.stem4d.virtual.frames import open_frames


def main() -> None:
    from cupyx.profiler import benchmark

    scan = int(sys.argv[1]) if len(sys.argv) > 1 else 512
    det = 192
    data = make_cuda(scan, det)
    meta = {"scan_shape": (scan, scan), "detector_shape": (det, det), "dtype": "uint16"}
    acq = Acquisition(data, meta, np.ones((det, det), dtype=bool), "cuda")
    com = measure_com(open_frames(acq))
    shifts = beam_shifts(com)
    rotation = find_rotation(shifts.row, shifts.col, step=shifts.step)
    field = rotate_field(shifts.row, shifts.col, rotation.angle_deg, rotation.transpose)
    session = prepare(acq)
    stages = {
        "open_frames": lambda: open_frames(acq),
        "session_com": lambda: session.center_of_mass(),
        "measure_com": lambda: measure_com(open_frames(acq)),
        "beam_shifts": lambda: beam_shifts(com),
        "find_rotation": lambda: find_rotation(shifts.row, shifts.col, step=shifts.step),
        "rotate_field": lambda: rotate_field(
            shifts.row, shifts.col, rotation.angle_deg, rotation.transpose
        ),
        "integrate": lambda: integrate_gradient(*field),
        "divergence": lambda: divergence(*field),
        "reconstruct": lambda: reconstruct(shifts, rotation),
        "dpc_total": lambda: dpc(acq),
    }
    for name, fn in stages.items():
        result = benchmark(fn, n_repeat=7, n_warmup=2)
        cpu = np.median(result.cpu_times) * 1e3
        gpu = np.median(result.gpu_times[0]) * 1e3
        print(f"{name:14s} cpu {cpu:8.3f} ms  gpu {gpu:8.3f} ms")


if __name__ == "__main__":
    main()
