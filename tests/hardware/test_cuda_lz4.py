"""GPU bitshuffle-LZ4 chunk decoding against the bitshuffle library (the CPU reference).

Chunks are made here with ``bitshuffle.compress_lz4`` under the HDF5 filter's 12-byte
header, decoded by the kernels, and compared byte for byte with the frames they came from:
every element size, full and partial last blocks, the raw tail, small block sizes, data
from all-zero to incompressible. Corrupt chunks must be flagged on their own frame only.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy (not installed here)")
bitshuffle = pytest.importorskip("bitshuffle")

from _lz4_edges import edge_chunks  # noqa: E402  (tests/, on the path by its conftest)

from quantem.stem4d.cuda import lz4_bitshuffle as lz4  # noqa: E402


def make_chunk(frame: np.ndarray, block_bytes: int) -> bytes:
    body = bitshuffle.compress_lz4(frame.ravel(), block_bytes // frame.itemsize).tobytes()
    return struct.pack(">QI", frame.nbytes, block_bytes) + body


def make_frames(
    rng: np.random.Generator, shape: tuple[int, int], dtype: np.dtype
) -> list[np.ndarray]:
    info = np.iinfo(dtype)
    frames = [rng.poisson(lam, shape).astype(dtype) for lam in (0.02, 0.7, 5.0, 200.0)]
    frames.append(rng.integers(0, info.max, shape, dtype=dtype, endpoint=True))  # incompressible
    frames.append(np.zeros(shape, dtype))
    frames.append(np.full(shape, info.max, dtype))
    return frames


def decode_on_gpu(chunks: list[bytes], shape: tuple[int, int], dtype: np.dtype, block_bytes: int,
                  stage: bool = True, extra: dict | None = None):  # fmt: skip
    dtype = np.dtype(dtype)
    n = len(chunks)
    buffer = cupy.asarray(np.frombuffer(b"".join(chunks), dtype=np.uint8))
    offsets = np.zeros(n + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(c) for c in chunks])
    decoder = lz4.ChunkDecoder(
        dtype.itemsize, shape[0] * shape[1], block_bytes, stage_compressed=stage,
        extra_defines=extra,
    )  # fmt: skip
    per_frame = max(decoder.blocks_per_frame, 1)
    scratch = (cupy.empty(n * per_frame, cupy.int64), cupy.empty(n * per_frame, cupy.uint32))
    out = cupy.full((n, *shape), 0xA5, dtype=dtype)  # poisoned: every element must be written
    errors = cupy.zeros(n, dtype=cupy.int32)
    decoder.decode(buffer, cupy.asarray(offsets), n, out, errors, scratch)
    cupy.cuda.Device().synchronize()
    return out.get(), errors.get()


SHAPES = [(192, 192), (96, 100), (50, 50), (7, 13), (1, 5), (3, 3), (256, 255)]

#: the kernel's variants (lz4_bitshuffle.cu: LZ4_SCHEDULE, LZ4_WIDE_MIN, LZ4_TRANSPOSE,
#: LZ4_SHORT, LZ4_FAST; the shipped kernel is LZ4_SCHEDULE 2 with LZ4_TRANSPOSE 2, LZ4_SHORT 1
#: and LZ4_FAST 1)
KERNEL_VARIANTS = [
    {"LZ4_SCHEDULE": 0, "LZ4_TRANSPOSE": 1},
    {"LZ4_SCHEDULE": 1, "LZ4_TRANSPOSE": 1, "WARPS_PER_CTA": 4},  # the kernel until 2026-12-02
    {"LZ4_SCHEDULE": 2, "LZ4_TRANSPOSE": 1},
    {"LZ4_SCHEDULE": 1, "LZ4_TRANSPOSE": 2},
    {"LZ4_SCHEDULE": 2, "LZ4_WIDE_MIN": 8},
    {"LZ4_SCHEDULE": 2, "LZ4_TRANSPOSE": 2, "LZ4_WIDE_MIN": 8},
    {"LZ4_SCHEDULE": 2, "LZ4_TRANSPOSE": 2, "LZ4_SHORT": 0},
    {"LZ4_SCHEDULE": 1, "LZ4_TRANSPOSE": 1, "LZ4_SHORT": 0},
    {"LZ4_SCHEDULE": 2, "LZ4_TRANSPOSE": 2, "LZ4_FAST": 0},  # the kernel until 2026-12-03
]


@pytest.mark.parametrize(
    "extra", KERNEL_VARIANTS, ids=lambda e: "-".join(f"{k}{v}" for k, v in e.items())
)
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32])
def test_kernel_variants_decode_like_bitshuffle(dtype, extra):
    """Every variant of the parse and of the bit transpose decodes to the frames, ARINA-sized
    synthetic ones (long zero-plane matches, the wide copies' case) included, and names the
    same damage in a corrupt chunk as the shipped kernel."""
    from quantem.stem4d.io import synthetic

    dtype = np.dtype(dtype)
    for shape, block_bytes in (
        ((192, 192), 8192),
        ((50, 50), 8192),
        ((7, 13), 8 * dtype.itemsize * 4),
    ):
        rng = np.random.default_rng([2, shape[0], dtype.itemsize])
        frames = make_frames(rng, shape, dtype)
        if shape == (192, 192):
            for dose in (1000.0, 40000.0, 1e7):
                model = synthetic.SyntheticModel((1, 2), shape, dtype.name, dose, 0)
                frames += [f.astype(dtype) for f in model.make_frames(0, 2)]
        chunks = [make_chunk(f, block_bytes) for f in frames]
        out, errors = decode_on_gpu(chunks, shape, dtype, block_bytes, False, extra)
        assert not errors.any(), (shape, errors)
        np.testing.assert_array_equal(out, np.stack(frames))
        bad = list(chunks)
        for k in range(len(bad)):
            damaged = bytearray(bad[k])
            damaged[12 + 4 + (k * 37) % max(1, len(damaged) - 16)] ^= 0x5A
            bad[k] = bytes(damaged)
        _, got = decode_on_gpu(bad, shape, dtype, block_bytes, False, extra)
        _, shipped = decode_on_gpu(bad, shape, dtype, block_bytes, False)
        np.testing.assert_array_equal(got, shipped)


@pytest.mark.parametrize("extra", [None, {"LZ4_FAST": 0}, {"LZ4_SHORT": 0}], ids=str)
def test_one_pass_copies_at_their_bounds(extra):
    """Crafted LZ4 blocks at every bound of the one-pass copies (tests/_lz4_edges.py), on the
    GPU's real lanes: each valid block decodes to the byte-by-byte reference (a copy reading
    a byte of its own sequence would race here), each invalid one is refused, with the same
    code as the plain order (LZ4_SCHEDULE 0)."""
    block_bytes = 1024
    shape = (1, block_bytes // 2)
    chunks, decoded = edge_chunks(np.random.default_rng(7), block_bytes, 4096)
    out, errors = decode_on_gpu(chunks, shape, np.uint16, block_bytes, False, extra)
    _, plain = decode_on_gpu(chunks, shape, np.uint16, block_bytes, False,
                             {"LZ4_SCHEDULE": 0, "LZ4_TRANSPOSE": 1})  # fmt: skip
    np.testing.assert_array_equal(errors, plain)
    valid = [k for k, block in enumerate(decoded) if block is not None]
    assert len(valid) > 1000 and errors[valid].max() == 0
    assert all(errors[k] != 0 for k, block in enumerate(decoded) if block is None)
    for k in valid:
        frame = bitshuffle.bitunshuffle(np.frombuffer(decoded[k], np.uint16), block_bytes // 2)
        np.testing.assert_array_equal(out[k].ravel(), frame)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32])
@pytest.mark.parametrize("shape", SHAPES)
def test_decode_matches_bitshuffle(dtype, shape):
    check_roundtrip(dtype, shape, stage=True, block_sizes=(8192, 8 * np.dtype(dtype).itemsize * 40))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32])
def test_decode_without_shared_staging(dtype):
    check_roundtrip(
        dtype, (96, 100), stage=False, block_sizes=(8192, 8 * np.dtype(dtype).itemsize * 16)
    )


def check_roundtrip(dtype, shape, stage, block_sizes):
    rng = np.random.default_rng([1, shape[0], shape[1], np.dtype(dtype).itemsize])
    for block_bytes in block_sizes:
        frames = make_frames(rng, shape, np.dtype(dtype))
        chunks = [make_chunk(f, block_bytes) for f in frames]
        out, errors = decode_on_gpu(chunks, shape, dtype, block_bytes, stage)
        assert not errors.any(), (block_bytes, errors)
        np.testing.assert_array_equal(out, np.stack(frames))


def corrupt(chunk: bytes, kind: str, rng: np.random.Generator) -> bytes:
    c = bytearray(chunk)
    if kind == "truncated":
        return bytes(c[: len(c) - 5])
    if kind == "extra":
        return bytes(c) + b"\0\0"
    if kind == "header_size":
        c[7] ^= 0x01
    elif kind == "header_block":
        c[8:12] = struct.pack(">I", 4096)
    elif kind == "block_length":
        c[12:16] = struct.pack(">I", 0x00FFFFFF)
    elif kind == "short":
        return bytes(c[:8])
    return bytes(c)


@pytest.mark.parametrize(
    "kind", ["truncated", "extra", "header_size", "header_block", "block_length", "short"]
)
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32])
def test_corrupt_chunk_is_flagged_on_its_frame_only(kind, dtype):
    rng = np.random.default_rng(7)
    shape = (64, 64)
    frames = make_frames(rng, shape, np.dtype(dtype))
    chunks = [make_chunk(f, 8192) for f in frames]
    chunks[2] = corrupt(chunks[2], kind, rng)
    out, errors = decode_on_gpu(chunks, shape, dtype, 8192)
    assert errors[2] != 0 and errors[2] in lz4.CHUNK_ERRORS
    good = [i for i in range(len(frames)) if i != 2]
    assert not errors[good].any()
    np.testing.assert_array_equal(out[good], np.stack(frames)[good])


def test_flipped_lz4_bytes_never_crash_and_structural_ones_are_caught():
    rng = np.random.default_rng(11)
    shape = (128, 128)
    frame = rng.poisson(0.8, shape).astype(np.uint16)
    clean = make_chunk(frame, 8192)
    caught = 0
    trials = 200
    chunks = []
    for _ in range(trials):
        c = bytearray(clean)
        for _ in range(3):
            c[int(rng.integers(16, len(c)))] ^= int(rng.integers(1, 256))
        chunks.append(bytes(c))
    _out, errors = decode_on_gpu(chunks, shape, np.uint16, 8192)
    caught = int(np.count_nonzero(errors))
    # LZ4 has no checksum: a flip inside a literal run changes values silently (about two
    # thirds of random flips on this data, measured on an H200). Flips that break the
    # structure are caught, and nothing crashes or writes out of bounds.
    assert caught >= trials // 10
    assert set(np.unique(errors)) <= {0, *lz4.CHUNK_ERRORS}
