"""Floors on the GPU: the CUDA copy floors through CuPy, an io-scale --floors run on the
cuda backend (the warm registered path bounded by the host-to-device copy from
registered page cache), the compute read_once pass, and a fresh process's parts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _run_helpers import real_disk_dir  # tests/ is on sys.path through its conftest

from harness.run import provenance
from harness.run.demo import write_demo_suite
from harness.run.floors import cuda as floor_cuda
from harness.run.floors import read_once as floor_compute
from harness.run.io_scale.config import IoScaleConfig
from harness.run.io_scale.kind import run_io_scale

SUITE = (("gpu-floor-u16", (8, 8), (48, 48), "uint16", 20000.0),)


@pytest.fixture(autouse=True)
def _no_tree_fingerprint(monkeypatch):
    monkeypatch.setattr(provenance, "collect_source_hashes", lambda checkout, modules=None: {})


def test_copy_floors_move_the_right_bytes(tmp_path):
    runtime = floor_cuda.CupyRuntime()
    files = []
    rng = np.random.default_rng(0)
    for i, size in enumerate((5000, 3 << 20)):
        path = tmp_path / f"f{i}"
        path.write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        files.append(path)
    registered = floor_cuda.h2d_registered(files, runtime, pieces=(1 << 20,), repeats=2)
    assert registered["seconds"] > 0 and registered["bytes"] == 5000 + (3 << 20)
    pinned = floor_cuda.h2d_pinned(8 << 20, runtime, pieces=(1 << 20, 4 << 20), repeats=2)
    assert pinned["seconds"] > 0 and len(pinned["sweep"]) == 2
    d2d = floor_cuda.d2d_copy(16 << 20, runtime, repeats=2)
    assert d2d["seconds"] > 0


def test_read_once_device_pass():
    import cupy

    array = cupy.asarray(np.random.default_rng(2).integers(0, 65535, (8, 8, 48, 48), np.uint16))
    out = floor_compute.read_once_device(array, cupy.cuda.runtime.deviceSynchronize, 3)
    assert out["seconds"] > 0 and out["bytes"] == array.nbytes


@pytest.mark.parametrize("representation", ["dense", "encoded"])
def test_cuda_floors_name_the_path_each_load_took(tmp_path, representation):
    folder = real_disk_dir(tmp_path)
    suite = write_demo_suite(folder / "suite", SUITE, frames_per_shard=32)
    config = IoScaleConfig(
        root=suite.root, manifest=suite.manifest, backend="cuda", storage_id="hw",
        output_dir=folder / "out", reps=2, load_only=True, progress=False, command=["t"],
        representation=representation, floors=True, fresh_processes=1,
    )  # fmt: skip
    outcome = run_io_scale(config)
    assert outcome.exit_code == 0, outcome.report["status"]["failures"]
    doc = outcome.report
    for cell in doc["floors"]["cells"]:
        methods = {c["method"] for c in cell["components"]}
        if cell["cache_state"] == "cold":
            assert {"cold_pread_parallel", "h2d_pinned"} <= methods
        elif cell["staging"] == "registered":
            assert "h2d_registered_page_cache" in methods
        decodes = not (cell["format"] == "qem" and representation == "encoded")
        assert ("d2d_copy" in methods) == decodes
        assert cell["ratio_to_floor"] is not None
    for c in doc["first_load"]["cells"]:
        run = c["runs"][0]
        assert {"cuda_context", "kernel_compile"} <= set(run["parts"])
        assert run["product_sha256"] == c["expected_product_sha256"]
    assert Path(outcome.report_path).is_file()
