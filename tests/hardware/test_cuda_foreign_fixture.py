"""The CUDA backend on ARINA files written by another project (tests/data/arina-small).

Expected values come from the fixture's README (read with h5py + hdf5plugin by its
authors), not from our code: sum 522360, masked sum 522164, uint8 frame sum 294876 with
a partial bitshuffle block.
"""

from __future__ import annotations

import struct

import h5py
import hdf5plugin  # noqa: F401  (registers the bitshuffle filter for the h5py reference)
import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy (not installed here)")

from quantem.stem4d import io  # noqa: E402
from quantem.stem4d.cuda import lz4_bitshuffle as lz4  # noqa: E402


def test_fixture_master_matches_documented_values_and_cpu(arina_small):
    master = arina_small / "fixture_master.h5"
    raw = {"apply_mask": False}
    with io.load(master, backend="cuda", **raw) as gpu, io.load(master, **raw) as cpu:
        data = cupy.asnumpy(gpu.data)
        assert data.shape == (1, 1, 64, 64)
        assert data.dtype == np.uint16
        assert int(data.sum(dtype=np.uint64)) == 522360
        np.testing.assert_array_equal(data, cpu.data)
    with io.load(master, backend="cuda") as gpu:  # masked by default
        assert int(cupy.asnumpy(gpu.data).sum(dtype=np.uint64)) == 522164


def test_fixture_u8_chunk_with_partial_block_decodes_on_gpu(arina_small):
    path = arina_small / "fixture_u8_data_000001.h5"
    with h5py.File(path, "r") as f:
        dset = f["/entry/data/data"]
        reference = dset[0]
        _, chunk = dset.id.read_direct_chunk((0, 0, 0))
    total, block_bytes = struct.unpack(">QI", chunk[:12])
    assert total == 192 * 192 and block_bytes == 8192
    buffer = cupy.asarray(np.frombuffer(chunk, dtype=np.uint8))
    offsets = cupy.asarray(np.array([0, len(chunk)], dtype=np.int64))
    decoder = lz4.ChunkDecoder(1, 192 * 192, block_bytes, stage_compressed=True)
    per_frame = max(decoder.blocks_per_frame, 1)
    scratch = (cupy.empty(per_frame, cupy.int64), cupy.empty(per_frame, cupy.uint32))
    out = cupy.full((1, 192, 192), 0xA5, dtype=cupy.uint8)
    errors = cupy.zeros(1, dtype=cupy.int32)
    decoder.decode(buffer, offsets, 1, out, errors, scratch)
    cupy.cuda.Device().synchronize()
    assert int(errors.get()[0]) == 0
    frame = out.get()[0]
    np.testing.assert_array_equal(frame, reference)
    assert int(frame.sum(dtype=np.uint64)) == 294876
