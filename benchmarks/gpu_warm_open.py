"""Benchmark: a warm ``backend="cuda"`` HDF5 load and the ``open_arina`` inside it.

For one ARINA master (``MASTER``), in this process: a first load (kernels compiled, pinned
staging and the CuPy pool populated), a pause of ``--pause`` seconds (so a frame-index
sidecar just written is older than the racy window of ``quantem.stem4d.io.frame_index`` and can
be remembered), then ``--reps`` rounds of ``open_arina`` alone and of a whole
``quantem.stem4d.cuda.loaders.load_hdf5`` (wall clock with device synchronisation). Prints the
medians of the load, of its staged pipeline (``load_stats["pipeline_seconds"]``) and of
the open, and checks every load's uint64 sum against the first load's.

Run it once per tree to compare two revisions back to back (``PYTHONPATH`` naming each),
alternating, on the same warm files::

    python benchmarks/gpu_warm_open.py /var/tmp/bench/fps10000_dose40000_rows512/full_master.h5 --tag after
"""

from __future__ import annotations

import argparse
import statistics
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("master", help="an ARINA *_master.h5")
    parser.add_argument("--tag", default="", help="a label for the printed line")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--pause", type=float, default=2.5)
    args = parser.parse_args(argv)

    import cupy

    from quantem.stem4d.cuda import loaders
    from quantem.stem4d.io.arina import open_arina

    def sync() -> None:
        cupy.cuda.Device().synchronize()

    with loaders.load_hdf5(args.master) as first:
        sync()
        reference = int(first.data.sum(dtype=cupy.uint64).item())
    time.sleep(args.pause)
    loads, pipelines, opens = [], [], []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        open_arina(args.master)
        opens.append(time.perf_counter() - t0)
        sync()
        t0 = time.perf_counter()
        acq = loaders.load_hdf5(args.master)
        sync()
        loads.append(time.perf_counter() - t0)
        pipelines.append(acq.metadata["load_stats"]["pipeline_seconds"])
        total = int(acq.data.sum(dtype=cupy.uint64).item())
        acq.close()
        if total != reference:
            raise SystemExit(f"load sum {total} differs from the first load's {reference}")
    median = statistics.median
    print(
        f"{args.tag}: warm load median {median(loads):.4f} s (min {min(loads):.4f}, max "
        f"{max(loads):.4f}); pipeline {median(pipelines):.4f}; open_arina "
        f"{median(opens) * 1e3:.1f} ms; sum {reference}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
