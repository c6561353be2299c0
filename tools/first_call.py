"""Where a fresh process's first BF and CoM from an ARINA file go, ours and the peers'.

    python tools/first_call.py MASTER.h5 [MASTER.h5 ...] [--runs 5]
        [--peer-python /path/to/venv/bin/python]

Each run is a new interpreter (``python -c``) that marks, with wall (``perf_counter``)
and CPU (``process_time``) clocks, each phase of a one-shot script: numpy, h5py and
hdf5plugin, numba's import, its CPU target start (registries, and scipy.linalg for its
BLAS check), quantem's modules, the load, the BF and the CoM. The table gives the median
of each phase over the runs, and the child's whole CPU (user + system, to its exit).
``--peer-python`` names an interpreter with py4DSTEM and LiberTEM installed (a separate
venv: ``pip install py4DSTEM libertem hdf5plugin``); each peer then runs the same
one-shot BF (a disk of the centre and radius our session estimates), timed the same
way, its BF compared with a numpy BF of that disk (the peers' own pixel rules may
differ; reported, not enforced). LiberTEM 0.16 has no ARINA reader: it reads the
master's ``entry/data/data_000001`` link, so give it one-shard files. Page cache warm: each file is
read once before the runs. Products of ours are checked against a warm process's.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_PRELUDE = """
import json, sys, time
marks = []
def mark(name):
    marks.append((name, time.perf_counter(), time.process_time()))
mark("start")
"""

OURS = (
    _PRELUDE
    + """
import hashlib
import numpy as np
mark("numpy")
import h5py, hdf5plugin
mark("h5py+hdf5plugin")
import quantem.stem4d.io
from quantem.stem4d.detector import prepare
from quantem.stem4d.io import arina, library_decode
from quantem.stem4d.detector import session, numpy_kernels
mark("quantem modules")
acq = quantem.stem4d.io.load(sys.argv[1])
mark("load")
s = prepare(acq)
bf = s.bf()
mark("bf")
com = s.center_of_mass()
mark("com")
digest = hashlib.sha256(np.ascontiguousarray(bf).tobytes()).hexdigest()
print(json.dumps({"marks": marks, "bf_sha256": digest, "numba": "numba" in sys.modules}))
"""
)

PY4DSTEM = (
    _PRELUDE
    + """
import numpy as np
import py4DSTEM
mark("py4DSTEM import")
dc = py4DSTEM.import_file(sys.argv[1], filetype="arina")
mark("load")
cy, cx, r = json.loads(sys.argv[2])
image = dc.get_virtual_image(mode="circle", geometry=((cy, cx), r), verbose=False)
bf = image.data
mark("bf")
print(json.dumps({"marks": marks, "bf": np.asarray(bf, dtype=np.float64).ravel().tolist()}))
"""
)

LIBERTEM = (
    _PRELUDE
    + """
import numpy as np
from libertem.api import Context
mark("LiberTEM import")
ctx = Context.make_with("inline")
# LiberTEM 0.16 has no ARINA reader: its HDF5 dataset, on the master's one data link
ds = ctx.load("hdf5", path=sys.argv[1], ds_path="entry/data/data_000001")
mark("load")
cy, cx, r = json.loads(sys.argv[2])
bf = ctx.run(ctx.create_disk_analysis(ds, cx=cx, cy=cy, r=r))["intensity"].raw_data
mark("bf")
print(json.dumps({"marks": marks, "bf": np.asarray(bf, dtype=np.float64).ravel().tolist()}))
"""
)


def run_child(python: str, script: str, args: list[str], env: dict) -> dict:
    """One fresh interpreter: its phases (wall, CPU) and its whole CPU from getrusage."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    begin = time.perf_counter()
    done = subprocess.run(
        [python, "-c", script, *args], capture_output=True, text=True, env=env, check=False
    )
    wall = time.perf_counter() - begin
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{python} exited {done.returncode}: {done.stderr[-1500:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    marks = report.pop("marks")
    phases = {name: (t - t0, c - c0) for (_, t0, c0), (name, t, c) in itertools.pairwise(marks)}
    cpu = (reaped.ru_utime - used.ru_utime) + (reaped.ru_stime - used.ru_stime)
    # perf_counter is CLOCK_MONOTONIC on Linux, one clock for parent and child;
    # process_time at the BF mark is the child's CPU from its birth
    _, bf_wall, bf_cpu = next(m for m in marks if m[0] == "bf")
    return {
        "spawn_to_end": wall,
        "cpu": cpu,
        "spawn_to_bf": bf_wall - begin,
        "cpu_to_bf": bf_cpu,
        "phases": phases,
        **report,
    }


def reference(master: str) -> tuple[str, tuple[float, float, float], object]:
    """This process's BF hash, the session's BF disk (cy, cx, r), and the frames."""
    import hashlib

    import numpy as np

    import quantem.stem4d.io
    from quantem.stem4d.detector import prepare

    with quantem.stem4d.io.load(master) as acq:
        session = prepare(acq)
        bf = session.bf()
        disk = session.bright_field_disk()
        frames = np.asarray(acq.data)
        digest = hashlib.sha256(np.ascontiguousarray(bf).tobytes()).hexdigest()
        cy, cx, r = (float(v) for v in (disk.center[0], disk.center[1], disk.radius))
        return digest, (cy, cx, r), frames


def disk_bf(frames, cy: float, cx: float, r: float):
    """Integer BF of the pixels within ``r`` of (cy, cx) (numpy, exact)."""
    import numpy as np

    rows, cols = np.ogrid[: frames.shape[-2], : frames.shape[-1]]
    mask = (rows - cy) ** 2 + (cols - cx) ** 2 <= r**2
    return frames[..., mask].sum(axis=-1, dtype=np.int64)


def table(label: str, runs: list[dict]) -> list[str]:
    names = list(runs[0]["phases"])
    lines = [f"  {label}: median of {len(runs)} fresh processes (wall s / CPU s)"]
    for name in names:
        wall = statistics.median(r["phases"][name][0] for r in runs)
        cpu = statistics.median(r["phases"][name][1] for r in runs)
        lines.append(f"    {name:<18} {wall:8.3f} {cpu:8.3f}")
    wall = statistics.median(r["spawn_to_bf"] for r in runs)
    cpu = statistics.median(r["cpu_to_bf"] for r in runs)
    lines.append(f"    {'spawn to BF':<18} {wall:8.3f} {cpu:8.3f}")
    wall = statistics.median(r["spawn_to_end"] for r in runs)
    cpu = statistics.median(r["cpu"] for r in runs)
    lines.append(f"    {'spawn to exit':<18} {wall:8.3f} {cpu:8.3f}  (child user+system)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("masters", nargs="+", help="ARINA *_master.h5 files")
    parser.add_argument("--runs", type=int, default=5, help="fresh processes each (default 5)")
    parser.add_argument("--peer-python", help="an interpreter with py4DSTEM and LiberTEM")
    parser.add_argument("--json", help="also write every run to this JSON file")
    args = parser.parse_args(argv)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its bytecode
    record = {}
    for master in args.masters:
        if not Path(master).is_file():
            print(f"first_call: {master}: no such file", file=sys.stderr)
            return 2
        digest, disk, frames = reference(master)  # also makes the files resident
        print(f"{master} ({frames.shape}, BF disk cy={disk[0]:.2f} cx={disk[1]:.2f} "
              f"r={disk[2]:.2f})")  # fmt: skip
        # one uncounted run each first: it writes the bytecode an installed package has
        ours = [run_child(sys.executable, OURS, [master], env) for _ in range(args.runs + 1)][1:]
        bad = [r for r in ours if r["bf_sha256"] != digest]
        print("\n".join(table("quantem.stem4d", ours)))
        print(f"    BF exact in {len(ours) - len(bad)} of {len(ours)}; numba imported in "
              f"{sum(bool(r['numba']) for r in ours)}")  # fmt: skip
        record[master] = {"quantem.stem4d": ours}
        if args.peer_python:
            expected = disk_bf(frames, *disk)
            peer_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
            for label, script in (("py4DSTEM", PY4DSTEM), ("LiberTEM", LIBERTEM)):
                try:
                    runs = [
                        run_child(args.peer_python, script, [master, json.dumps(disk)], peer_env)
                        for _ in range(args.runs + 1)
                    ][1:]
                except RuntimeError as error:
                    print(f"  {label}: failed: {error}")
                    continue
                import numpy as np

                same = all(np.array_equal(np.asarray(r.pop("bf")), expected.ravel()) for r in runs)
                print("\n".join(table(label, runs)))
                print(f"    BF equals the numpy disk BF: {same}")
                record[master][label] = runs
        del frames
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
