"""The CUDA load path imports no numba: a fresh process's first load would pay 0.3-0.7 s
for it (the numba codecs are the CPU backend's)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.io.qem.writer import save_qem

REPO = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent(
    """
    import json, sys
    from quantem.stem4d import io
    import quantem.stem4d.cuda.loaders, quantem.stem4d.cuda.sharded, quantem.stem4d.cuda.rans_decode
    import quantem.stem4d.cuda.encoded, quantem.stem4d.cuda.qem_pipeline, quantem.stem4d.cuda.hdf5_pipeline
    from quantem.stem4d.io.qem.reader import QemFile
    with QemFile(sys.argv[1], verify=True) as qem:  # what the CUDA loader opens
        tables = qem.decode_table.shape, None if qem.coded is None else qem.coded.shape
    before = "numba" in sys.modules
    with QemFile(sys.argv[1]) as qem:
        frames = qem.read_frames()  # the CPU decode: numba now
    print(json.dumps({"before": before, "after": "numba" in sys.modules,
                      "sum": int(frames.astype("uint64").sum())}))
    """
)


def test_opening_a_qem_file_and_the_cuda_loaders_import_no_numba(tmp_path):
    rng = np.random.default_rng(5)
    data = rng.poisson(2.0, (3, 4, 16, 16)).astype(np.uint16)
    valid = np.ones((16, 16), dtype=bool)
    for version in (1, 2):
        path = tmp_path / f"v{version}.qem"
        save_qem(Acquisition(data, {}, valid, "cpu"), path, version=version)
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True,
            cwd=REPO, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert out == {"before": False, "after": True, "sum": int(data.sum())}, out
