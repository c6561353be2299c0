"""GPU XXH3-64 block verification against the xxhash library."""

from __future__ import annotations

import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy (not installed here)")
xxhash = pytest.importorskip("xxhash")

from quantem.stem4d.cuda import xxh3  # noqa: E402

LENGTHS = [0, 1, 16, 100, 240, 241, 248, 256, 1000, 1024, 1025, 1088, 2112, 4096, 68000, 100016]


def run(buffers, lengths=None, expected=None):
    starts = []
    blob = bytearray()
    for b in buffers:
        starts.append(len(blob))
        blob += b + bytes(-len(b) % 16)
    data = cupy.asarray(np.frombuffer(bytes(blob) or b"\0" * 16, dtype=np.uint8))
    extents = np.array([len(b) for b in buffers], dtype=np.int64)
    lengths = extents if lengths is None else np.asarray(lengths, dtype=np.int64)
    if expected is None:
        expected = np.array([xxhash.xxh3_64_intdigest(b) for b in buffers], dtype=np.uint64)
    flags = cupy.zeros(len(buffers), dtype=cupy.int32)
    xxh3.verify_on_device(data, np.array(starts, dtype=np.int64), extents, lengths, expected, flags)
    return flags.get()


def test_gpu_hash_equals_xxhash_for_every_length():
    rng = np.random.default_rng(0)
    buffers = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in LENGTHS]
    buffers += [bytes(n) for n in (4096, 3000)]  # zeros too
    flags = run(buffers)
    for n, flag in zip([len(b) for b in buffers], flags):
        assert flag == (xxh3.FLAG_HOST if n <= 240 else xxh3.FLAG_OK), n


def test_gpu_hash_flags_mismatch_and_padding():
    rng = np.random.default_rng(1)
    buffers = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in (4096, 5008, 70000)]
    expected = np.array([xxhash.xxh3_64_intdigest(b) for b in buffers], dtype=np.uint64)
    expected[1] ^= np.uint64(1)
    assert run(buffers, expected=expected).tolist() == [0, xxh3.FLAG_MISMATCH, 0]
    padded = [buffers[0][:4090] + b"\0\0\0\0\0\1", buffers[2][:69990] + bytes(10)]
    flags = run(padded, lengths=[4090, 69990])
    assert flags.tolist() == [xxh3.FLAG_PADDING, 0]
