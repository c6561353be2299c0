"""A default load in a fresh process runs only this package's kernels: CuPy compiles
nothing (its built-in kernels would compile with NVRTC at their first use on a machine,
0.1-0.3 s each, on the load's critical path; ours come from the ahead-of-time fatbins)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy (not installed here)")

from quantem.stem4d import io
from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.io.qem.writer import save_qem
from quantem.stem4d.io.synthetic import write_synthetic_arina

REPO = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import json, sys
    import cupy
    from cupy.cuda import compiler

    compiled = []
    original = compiler.compile_using_nvrtc

    def logged(source, *args, **kwargs):
        compiled.append(source[:160])
        return original(source, *args, **kwargs)

    compiler.compile_using_nvrtc = logged
    from quantem.stem4d import io

    out = {}
    for name, path, kwargs in json.loads(sys.argv[1]):
        with io.load(path, backend="cuda", **kwargs) as acq:
            data = acq.data if acq.data is not None else None
            out[name] = int(data.get().astype("uint64").sum()) if data is not None else -1
    out["compiled"] = compiled
    print(json.dumps(out))
    """
)


@pytest.mark.parametrize("dtype", ["uint16", "uint8", "uint32"])
def test_a_fresh_process_compiles_no_cupy_kernel_for_a_default_load(tmp_path, dtype):
    master = write_synthetic_arina(
        tmp_path / "acq", scan_shape=(6, 5), detector_shape=(192, 192), dtype=dtype,
        frames_per_shard=16, processes=1, progress=False,
    )  # fmt: skip
    cpu = io.load(master)
    assert not np.asarray(cpu.validity).all()  # the mask has work to do
    qem = tmp_path / "a.qem"
    meta = {"pixel_mask": (~np.asarray(cpu.validity)).astype(np.uint32)}
    save_qem(Acquisition(np.asarray(cpu.data), meta, cpu.validity, "cpu"), qem, block_frames=4)
    qem2 = tmp_path / "b.qem"
    save_qem(Acquisition(np.asarray(cpu.data), meta, cpu.validity, "cpu"), qem2, version=2)
    loads = [
        ["hdf5", str(master), {}],
        ["hdf5_pread", str(master), {"staging": "pread"}],
        ["qem", str(qem), {}],
        ["qem2", str(qem2), {}],
    ]
    cache = tmp_path / "cupy-cache"
    cache.mkdir()
    env = dict(os.environ, CUPY_CACHE_DIR=str(cache))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(loads)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    expected = int(np.asarray(cpu.data).astype(np.uint64).sum())
    for name, _, _ in loads:
        assert out[name] == expected, (name, out[name], expected)
    assert out["compiled"] == [], out["compiled"]
    assert sorted(p.name for p in cache.rglob("*") if p.is_file()) == []
