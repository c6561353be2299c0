"""Every loader passes the loader contract (``quantem.stem4d.testing.loader_contract``).

The CPU readers run as they are. The CUDA loaders (``quantem.stem4d.cuda.loaders``) run with
CuPy replaced by numpy and their device decode replaced by the CPU decoder, as
``test_staging_host.py`` does for the staging engines: what runs for real is everything
the loaders do around the kernels (option parsing, finishing per batch or in place,
validity, metadata), the part this contract is about. The real kernels pass the same
suite in ``tests/hardware/test_loader_contract_cuda.py``.
"""

from __future__ import annotations

import sys
import types
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _cuda_host import host_zero_invalid_pixels

from quantem.stem4d.cuda import loaders as cuda_loaders
from quantem.stem4d.cuda.hdf5_pipeline import PipelineStats
from quantem.stem4d.cuda.staging import StageStats
from quantem.stem4d.io.arina import iter_frame_batches, load_arina
from quantem.stem4d.io.qem.reader import QemFile, load_qem, parse_scan_region
from quantem.stem4d.testing.loader_contract import (
    Loaded,
    LoaderContract,
    RegisteredLoaderContract,
)


class TestCpuHdf5(LoaderContract):
    fmt = "hdf5"

    def load(self, path: Path, **options: Any) -> Loaded:
        with load_arina(path, batch_frames=5, **options) as acq:
            return Loaded(acq.data, acq.metadata, acq.validity)


class TestCpuQem(RegisteredLoaderContract):
    """The registry's cpu/qem entry (``load_qem``), as ``io.load`` finds it."""

    backend, fmt = "cpu", "qem"


def host_cupy() -> types.ModuleType:
    """numpy under CuPy's name, with the few CuPy-only calls the loaders make."""
    fake = types.ModuleType("cupy")
    fake.__getattr__ = lambda name: getattr(np, name)  # type: ignore[method-assign]
    fake.asnumpy = np.asarray
    fake.cuda = types.SimpleNamespace(Device=lambda device=0: nullcontext())
    return fake


def host_decode_source(source, *, consume=None, staging="pread", finish=None, **_: Any):
    """``decode_source_to_device`` with the CPU decoder: frames in batches of 5 (and
    ``finish(out)`` after the last one, as the pipeline calls it)."""
    stats = PipelineStats(compressed_bytes=source.index.compressed_bytes, staging=staging)
    out = (
        None
        if consume is not None
        else np.empty((source.n_frames, *source.detector_shape), dtype=source.dtype)
    )
    for first, frames in iter_frame_batches(source, 5):
        stats.batches += 1
        if consume is not None:
            consume(first, first + len(frames), frames)
        else:
            out[first : first + len(frames)] = frames
    if finish is not None:
        finish(out)
    return out, stats


def host_decode_qem_dense(qem, scan_region, verify, threads, batch_bytes):
    """``_decode_qem_dense`` with the CPU codec (same return values)."""
    checked = QemFile(qem.path, verify=verify)
    try:
        if scan_region is None:
            blocks = np.arange(qem.n_blocks, dtype=np.int64)
            frames = checked.read_frames()
            region = None
        else:
            rows, cols = parse_scan_region(scan_region, qem.scan_shape)
            frames = checked.read_region(rows, cols).reshape(-1, *qem.detector_shape)
            ids = np.arange(rows[0], rows[1])[:, None] * qem.scan_shape[1]
            blocks = qem.blocks_for_frames(ids + np.arange(cols[0], cols[1]))
            region = (rows, cols, (rows[1] - rows[0], cols[1] - cols[0]))
    finally:
        checked.close()
    return frames, blocks, region, StageStats(batches=1)


@pytest.fixture
def on_host(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", host_cupy())
    monkeypatch.setattr(cuda_loaders, "require_backend", lambda backend: None)
    monkeypatch.setattr(cuda_loaders, "decode_source_to_device", host_decode_source)
    monkeypatch.setattr(cuda_loaders, "_decode_qem_dense", host_decode_qem_dense)
    monkeypatch.setattr(cuda_loaders, "zero_invalid_pixels", host_zero_invalid_pixels)


@pytest.mark.usefixtures("on_host")
class TestCudaHdf5OnHost(LoaderContract):
    fmt = "hdf5"

    def load(self, path: Path, **options: Any) -> Loaded:
        with cuda_loaders.load_hdf5(path, **options) as acq:
            assert acq.backend == "cuda"
            assert acq.metadata["load_stats"]["batches"] >= 1
            return Loaded(acq.data, acq.metadata, acq.validity)


@pytest.mark.usefixtures("on_host")
class TestCudaQemOnHost(LoaderContract):
    fmt = "qem"

    def load(self, path: Path, **options: Any) -> Loaded:
        with cuda_loaders.load_qem(path, **options) as acq:
            assert acq.backend == "cuda"
            return Loaded(acq.data, acq.metadata, acq.validity)


@pytest.mark.usefixtures("on_host")
def test_cuda_qem_scan_region_metadata_equals_cpu(tmp_path):
    from quantem.stem4d.testing.loader_contract import assert_same_metadata, make_sources

    path = make_sources(tmp_path)["qem"]
    for options in ({}, {"det_bin": 2, "dtype": "u8"}):
        region = (1, 3, 0, 2)
        with (
            cuda_loaders.load_qem(path, scan_region=region, **options) as gpu,
            load_qem(path, scan_region=region, **options) as cpu,
        ):
            np.testing.assert_array_equal(gpu.data, cpu.data)
            np.testing.assert_array_equal(gpu.validity, cpu.validity)
            assert_same_metadata(gpu.metadata, cpu.metadata)
            assert cpu.metadata["scan_region"] == [1, 3, 0, 2]
