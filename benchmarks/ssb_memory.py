"""SSB preparation's peak memory: the 4D array loaded whole vs streamed in scan-row blocks.

    python benchmarks/ssb_memory.py --scan 64 --detector 192 --detector-bin 2 --dir /tmp/ssbm

Writes ``ssb_bench.make_data``'s synthetic uint16 counts once to an HDF5 file in ``--dir``
(chunked by scan row, uncompressed), then prepares it in a fresh process per mode:

* ``memory``: ``np.asarray(dataset[...])`` (the whole 4D array) then ``prepare(array)``;
* ``stream``: ``prepare(dataset, memory_budget_bytes=--budget)`` (scan-row blocks).

Each process reports its peak traced allocation (``tracemalloc``: numpy's buffers are
traced) and peak RSS growth over the state before the file was opened, the time, and the
SHA-256 of the prepared G; the two hashes must agree (the modes are bit-identical for
integer counts). Prints one JSON document (``--output FILE`` writes it too).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import git_revision
from ssb_bench import make_data

CHILD = textwrap.dedent(
    """
    import hashlib, json, resource, sys, time, tracemalloc
    import h5py, numpy as np
    from quantem.stem4d.ssb import BrightFieldDisk, Calibration, prepare
    path, mode, det, radius, binning, budget = sys.argv[1:7]
    cal = Calibration(energy_ev=200e3, semiangle_mrad=25.0, scan_step_a=0.25, rotation_deg=0.0)
    disk = BrightFieldDisk(center=((int(det) - 1) / 2,) * 2, radius=float(radius))
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    t0 = time.perf_counter()
    with h5py.File(path, "r") as f:
        if mode == "stream":
            p = prepare(f["data"], cal, disk=disk, detector_bin=int(binning),
                        memory_budget_bytes=int(budget))
        else:
            p = prepare(np.asarray(f["data"][...]), cal, disk=disk, detector_bin=int(binning))
    seconds = time.perf_counter() - t0
    traced = tracemalloc.get_traced_memory()[1]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({
        "mode": mode, "seconds": seconds, "peak_traced_bytes": traced,
        "peak_rss_growth_bytes": (rss - rss0) * 1024, "G_bytes": p.nbytes,
        "pixels": int(p.G.shape[1]), "positions": int(p.scan_shape[0] * p.scan_shape[1]),
        "G_sha256": hashlib.sha256(p.G.tobytes()).hexdigest(), "memory": p.memory,
    }))
    """
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scan", type=int, default=64)
    parser.add_argument("--detector", type=int, default=192)
    parser.add_argument("--bf-radius", type=float, default=48.0)
    parser.add_argument("--detector-bin", type=int, default=2)
    parser.add_argument("--budget", type=int, help="bytes (default: 2x the prepared G + pixels)")
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()

    import h5py

    args.dir.mkdir(parents=True, exist_ok=True)
    path = args.dir / f"ssb_{args.scan}_{args.detector}.h5"
    shape = (args.scan, args.scan, args.detector, args.detector)
    if not path.exists():
        data = make_data(np, args.scan, args.detector, args.bf_radius, 20000.0, seed=0)
        with h5py.File(path, "w") as f:
            f.create_dataset("data", data=data, chunks=(1, *shape[1:]))
        del data

    def child(mode: str, budget: int) -> dict:
        command = [
            sys.executable,
            "-c",
            CHILD,
            str(path),
            mode,
            str(args.detector),
            str(args.bf_radius),
            str(args.detector_bin),
            str(budget),
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        return json.loads(done.stdout)

    t0 = time.perf_counter()
    memory = child("memory", 0)
    # Default: twice what streaming must hold (G and the float32 disk pixels).
    budget = args.budget or 2 * (memory["G_bytes"] + 4 * memory["positions"] * memory["pixels"])
    stream = child("stream", budget)
    report = {
        "benchmark": "ssb-memory",
        "revision": git_revision(),
        "data": {
            "shape": list(shape),
            "dtype": "uint16",
            "bytes": int(np.prod(shape)) * 2,
            "file": "HDF5, uncompressed, chunks of one scan row",
            "detector_bin": args.detector_bin,
        },
        "budget_bytes": budget,
        "memory": memory,
        "stream": stream,
        "identical_G": memory["G_sha256"] == stream["G_sha256"],
        "traced_ratio": stream["peak_traced_bytes"] / memory["peak_traced_bytes"],
        "wall_s": time.perf_counter() - t0,
        "command": " ".join(sys.argv),
    }
    text = json.dumps(report, indent=1, sort_keys=True)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")
    if not report["identical_G"]:
        sys.exit("the streamed G differs from the in-memory G")


if __name__ == "__main__":
    main()
