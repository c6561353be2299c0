"""SSB preparation streamed in scan-row blocks on CUDA (``prepare(..., backend="cuda")``)
against the in-memory CUDA preparation of the same counts.

An ARINA file is decoded on the GPU block by block (the CUDA HDF5 pipeline), any other
source is read on the CPU and copied block by block; either way the mean pattern, the
centre of mass and the BF-disk pixels are exact integer products, so without a memory
budget (the in-memory path's transform blocks are kept) the prepared data must be equal
bit for bit. With a budget, the transform runs in other blocks; the result must still be
the same bits (checked, not assumed) -- if cuFFT or CuPy's reductions ever round by block
shape this test says so.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy (not installed here)")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _ssb_abtem import calibration as abtem_calibration  # noqa: E402
from _ssb_abtem import load as abtem_load  # noqa: E402
from _ssb_abtem import master as abtem_master  # noqa: E402
from test_ssb_stream import STREAMED_OPTIONS, assert_same_prepared, simulated_counts  # noqa: E402

from quantem.stem4d.ssb import fit_aberrations, prepare, reconstruct  # noqa: E402


@pytest.fixture(scope="module")
def counts():
    return simulated_counts()


@pytest.mark.parametrize("options", STREAMED_OPTIONS)
def test_streamed_array_on_cuda_is_bit_identical(counts, options):
    data, cal = counts
    in_memory = {k: v for k, v in options.items() if k in ("detector_bin", "scan_region", "dtype")}
    reference = prepare(cupy.asarray(data), cal, **in_memory)
    streamed = prepare(data, cal, backend="cuda", **options)
    assert streamed.xp is cupy and streamed.memory["mode"] == "stream"
    assert_same_prepared(streamed, reference)


def test_an_arina_file_decoded_on_the_gpu_streams_to_the_loaded_result():
    """The abTEM thin sample's ARINA file: decoded on the GPU 5 rows at a time, against the
    in-memory CUDA preparation of the loaded counts, and the same object."""
    cal = abtem_calibration("thin")
    reference = prepare(cupy.asarray(abtem_load("thin", "high")), cal)
    streamed = prepare(str(abtem_master("thin", "high")), cal, scan_block_rows=5, backend="cuda")
    assert streamed.memory["scan_block_rows"] == 5
    assert_same_prepared(streamed, reference)
    a, b = reconstruct(reference), reconstruct(streamed)
    assert cupy.asnumpy(a.object).tobytes() == cupy.asnumpy(b.object).tobytes()


def test_streamed_fit_on_cuda_repeats_the_in_memory_fit(counts):
    data, cal = counts
    fits = [
        fit_aberrations(
            prepare(source, cal, **options), n_trials=10, seed=2, refine_max_evaluations=20
        )
        for source, options in (
            (cupy.asarray(data), {}),
            (data, {"scan_block_rows": 4, "backend": "cuda"}),
        )
    ]
    assert fits[0].trajectory_sha256() == fits[1].trajectory_sha256()


def test_backend_must_match_resident_data(counts):
    data, cal = counts
    with pytest.raises(ValueError, match="not 'cpu'"):
        prepare(cupy.asarray(data), cal, backend="cpu")
    with pytest.raises(ValueError, match="already resident"):
        prepare(cupy.asarray(data), cal, scan_block_rows=2, backend="cuda")
    with pytest.raises(ValueError, match="backend"):
        prepare(np.asarray(data), cal, scan_block_rows=2, backend="gpu")


def test_streamed_ssb_run_on_cuda_gives_the_in_memory_hashes(tmp_path):
    """``harness run compute ssb --backend cuda --scan-block-rows 5`` (and with a memory
    budget) against the loaded run: the same output SHA-256s, and no dense load stage."""
    import dataclasses

    from test_run_compute_ssb import PARAMETERS, ROOT, _manifest

    from harness.report import parse_report
    from harness.run.compute.config import ComputeConfig
    from harness.run.compute.kind import run_compute

    def run(name, parameters):
        return run_compute(
            ComputeConfig(
                workload="ssb", root=ROOT, manifest=_manifest(tmp_path), backend="cuda",
                storage_id="test", output_dir=tmp_path / name, reps=1,
                parameters=parameters, progress=False,
            )
        )  # fmt: skip

    dense = run("dense", PARAMETERS)
    streamed = run("streamed", dataclasses.replace(PARAMETERS, scan_block_rows=5))
    budget = run("budget", dataclasses.replace(PARAMETERS, memory_budget_bytes=64 << 20))
    assert dense.exit_code == streamed.exit_code == budget.exit_code == 0
    docs = [parse_report(o.report_path) for o in (dense, streamed, budget)]
    assert docs[1]["conditions"]["stages"][0] == "open"
    outputs = [d["acquisitions"][0]["outputs"] for d in docs]
    assert outputs[0] == outputs[1] == outputs[2]
