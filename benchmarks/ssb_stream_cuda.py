"""SSB preparation on CUDA streamed in scan-row blocks from an ARINA file, against the
in-memory CUDA preparation of the loaded acquisition, in one process.

    python benchmarks/ssb_stream_cuda.py MASTER --rows 32 --detector-bin 1
    python benchmarks/ssb_stream_cuda.py MASTER --detector-bin 2 --budget-gib 6 --limit-gib 8

For each ``--detector-bin``: first the streamed preparation (``prepare(MASTER,
scan_block_rows=--rows, backend="cuda")``, or ``memory_budget_bytes=--budget-gib``: each
block decoded on the GPU by the CUDA HDF5 pipeline, only the BF-disk pixels kept) under a
CuPy pool limit of ``--limit-gib`` (0: no limit), so a pass proves the decoded acquisition
never had to fit in that much GPU memory; then, without a limit, ``load(MASTER, backend="cuda")`` + ``prepare(array)``. Each
``--reps`` times (first and the median of the rest), and the two prepared G compared bit
for bit on the device. The calibration is fixed (200 kV, 25 mrad, 0.25 A, rotation 0): the
timings and the identity are the point, not the object. Page cache warm (read once first).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("master", type=Path, help="an ARINA *_master.h5")
    parser.add_argument("--rows", type=int, default=32, help="scan rows per streamed block")
    parser.add_argument("--detector-bin", type=int, nargs="+", default=[1])
    parser.add_argument("--limit-gib", type=float, default=0.0, help="CuPy pool limit")
    parser.add_argument(
        "--budget-gib", type=float, default=0.0, help="prepare's memory_budget_bytes (0: none)"
    )
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)

    import cupy

    from quantem.stem4d.io import load
    from quantem.stem4d.ssb import Calibration, prepare

    cal = Calibration(energy_ev=200e3, semiangle_mrad=25.0, scan_step_a=0.25, rotation_deg=0.0)
    pool = cupy.get_default_memory_pool()
    for shard in sorted(args.master.parent.glob("*.h5")):
        shard.read_bytes()  # page cache warm

    def timed(function):
        times, result = [], None
        for _ in range(args.reps):
            result = None
            pool.free_all_blocks()
            t0 = time.perf_counter()
            result = function()
            cupy.cuda.Device().synchronize()
            times.append(time.perf_counter() - t0)
        warm = times[1:] or times
        return result, {"first_s": times[0], "warm_median_s": statistics.median(warm)}

    def in_memory(b):
        with load(args.master, backend="cuda") as acq:
            return prepare(acq.array, cal, detector_bin=b)

    stream_options = (
        {"memory_budget_bytes": int(args.budget_gib * 2**30)}
        if args.budget_gib > 0
        else {"scan_block_rows": args.rows}
    )
    rows = []
    for b in args.detector_bin:
        if args.limit_gib > 0:
            pool.set_limit(size=int(args.limit_gib * 2**30))
        streamed, stream_t = timed(
            lambda b=b: prepare(
                str(args.master), cal, detector_bin=b, backend="cuda", **stream_options
            )
        )
        pool.set_limit(size=0)
        reference, memory_t = timed(lambda b=b: in_memory(b))
        same = bool(
            streamed.G.shape == reference.G.shape
            and bool((streamed.G.view(cupy.uint32) == reference.G.view(cupy.uint32)).all())
            and bool((streamed.energy == reference.energy).all())
        )
        row = {
            "detector_bin": b,
            "G_shape": list(streamed.G.shape),
            "G_bytes": int(streamed.G.nbytes),
            "stream": stream_t,
            "in_memory": memory_t,
            "stream_memory": streamed.memory,
            "pool_limit_gib": args.limit_gib,
            "identical_G": same,
        }
        rows.append(row)
        print(
            f"bin {b}: G {tuple(streamed.G.shape)} {streamed.G.nbytes / 2**30:.2f} GiB; streamed "
            f"({streamed.memory['scan_block_rows']} rows, budget {args.budget_gib or 'none'} GiB,"
            f" pool limit {args.limit_gib or 'none'} GiB) first "
            f"{stream_t['first_s']:.2f} s, warm {stream_t['warm_median_s']:.2f} s; load + "
            f"prepare first {memory_t['first_s']:.2f} s, warm {memory_t['warm_median_s']:.2f} s;"
            f" identical G: {same}",
            flush=True,
        )
        del streamed, reference
    text = json.dumps({"benchmark": "ssb-stream-cuda", "rows": rows}, indent=1)
    if args.output:
        args.output.write_text(text + "\n")
    return 0 if all(r["identical_G"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
