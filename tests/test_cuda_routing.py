"""Host-side tests of the CUDA backend that need no GPU.

Routing and import hygiene, option validation, the host-side planning and validation
logic, and the bitshuffle-LZ4 kernel source itself: ``lz4_bitshuffle.cu`` is compiled as
plain C++ (a shim maps the CUDA keywords; one thread per block, so every lane loop runs
sequentially) and checked against the bitshuffle library, so the decoder's parsing,
bounds checks and bit transpose are tested on every CI run, not only on a GPU machine.
"""

from __future__ import annotations

import ctypes
import itertools
import shutil
import struct
import subprocess
import sys
from importlib import resources

import numpy as np
import pytest
from _lz4_edges import edge_chunks

from quantem.stem4d.backends import cuda_available
from quantem.stem4d.cuda import hdf5_pipeline, lz4_bitshuffle, module_loader, qem_pipeline
from quantem.stem4d.cuda.rans_decode import pack_mask_bits
from quantem.stem4d.errors import ChunkDecodeError
from quantem.stem4d.io import cpu_decode


def test_importing_quantem_does_not_import_cupy():
    code = (
        "import sys, quantem, quantem.stem4d.io, quantem.stem4d.detector, quantem.stem4d.cuda, quantem.stem4d.cuda.loaders, "
        "quantem.stem4d.cuda.detector_kernels, quantem.stem4d.cuda.encoded, quantem.stem4d.cuda.sharded\n"
        "assert 'cupy' not in sys.modules, 'cupy imported'\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.skipif(cuda_available(), reason="checks the behaviour without a GPU")
def test_cuda_backend_without_gpu_raises_clearly(tmp_path):
    from quantem.stem4d import io
    from quantem.stem4d.errors import BackendUnavailableError

    for name in ("x_master.h5", "x.qem"):
        with pytest.raises(BackendUnavailableError, match="cuda backend is unavailable"):
            io.load(tmp_path / name, backend="cuda")


def test_kernel_sources_ship_as_package_data():
    for name in ("lz4_bitshuffle.cu", "rans_decode.cu", "detector_kernels.cu"):
        assert resources.files("quantem.stem4d.cuda").joinpath(name).is_file()
        assert 'extern "C" __global__' in module_loader.read_source(name)
    assert module_loader.render_defines({"B": 2, "A": "unsigned char"}) == (
        "#define A unsigned char\n#define B 2\n"
    )


def test_raise_first_error_names_file_and_frame():
    errors = np.array([0, 0, 7, 3], dtype=np.int32)
    with pytest.raises(ChunkDecodeError) as info:
        lz4_bitshuffle.raise_first_error(
            errors, 100, lambda f: ("/data/x_data_000001.h5", {"shard_frame": f - 100})
        )
    message = str(info.value)
    assert "x_data_000001.h5" in message and "frame 102" in message and "shard_frame 2" in message
    assert "1 more corrupt" in message


def test_every_kernel_and_cpu_error_code_has_a_class():
    assert set(cpu_decode.CPU_ERROR_CLASS) == set(cpu_decode.ERROR_MESSAGES)
    assert set(cpu_decode.KERNEL_ERROR_CLASS) == set(lz4_bitshuffle.CHUNK_ERRORS)
    classes = set(cpu_decode.CHUNK_ERROR_CLASSES)
    assert set(cpu_decode.CPU_ERROR_CLASS.values()) <= classes
    assert set(cpu_decode.KERNEL_ERROR_CLASS.values()) == classes


def test_parse_chunk_header():
    good = struct.pack(">QI", 2 * 100, 8192)
    assert lz4_bitshuffle.parse_chunk_header(good, 200, 2) == 8192
    for bad, match in [
        (good[:11], "shorter"),
        (struct.pack(">QI", 199, 8192), "uncompressed size"),
        (struct.pack(">QI", 200, 0), "block size"),
        (struct.pack(">QI", 200, 8190), "block size"),
        (struct.pack(">QI", 200, 1 << 20), "block size"),
    ]:
        with pytest.raises(ValueError, match=match):
            lz4_bitshuffle.parse_chunk_header(bad, 200, 2)


def test_max_chunk_bytes_bounds_real_chunks():
    bitshuffle = pytest.importorskip("bitshuffle")
    rng = np.random.default_rng(0)
    for dtype in (np.uint8, np.uint16, np.uint32):
        frame = rng.integers(0, np.iinfo(dtype).max, (61, 67), dtype=dtype, endpoint=True)
        for block in (0, 16):
            body = bitshuffle.compress_lz4(frame.ravel(), block)
            assert 12 + body.size <= lz4_bitshuffle.max_chunk_bytes(frame.nbytes, frame.itemsize)


def test_plan_batches_cover_every_frame_once():
    nbytes = np.array([5, 7, 100, 1, 1, 1, 50, 3], dtype=np.int64)
    for batch in (1, 8, 12, 60, 1000):
        batches = hdf5_pipeline.plan_batches(nbytes, batch)
        assert batches[0][0] == 0 and batches[-1][1] == nbytes.size
        assert all(a < b for a, b in batches)
        assert all(b1 == a2 for (_, b1), (a2, _) in itertools.pairwise(batches))
        for a, b in batches:
            assert b - a == 1 or nbytes[a:b].sum() <= batch
    assert hdf5_pipeline.plan_batches(np.array([], dtype=np.int64), 10) == []


def test_plan_batches_cap_the_frames_per_batch():
    nbytes = np.full(23, 4, dtype=np.int64)
    for cap in (1, 5, 7, 23, 50):
        batches = hdf5_pipeline.plan_batches(nbytes, 1000, cap)
        assert [b - a for a, b in batches] == [min(cap, 23 - a) for a in range(0, 23, cap)]
    # Bytes still bind where they are the tighter limit.
    assert hdf5_pipeline.plan_batches(nbytes, 8, 5) == [
        (a, min(a + 2, 23)) for a in range(0, 23, 2)
    ]
    with pytest.raises(ValueError, match="max_items"):
        hdf5_pipeline.plan_batches(nbytes, 8, 0)


def test_plan_reads_coalesce_adjacent_chunks():
    shard = np.array([0, 0, 0, 1, 1, 0], dtype=np.int32)
    offset = np.array([100, 110, 200, 0, 10, 210], dtype=np.int64)
    nbytes = np.array([10, 20, 10, 10, 5, 7], dtype=np.int64)
    reads = hdf5_pipeline.plan_reads(shard, offset, nbytes, piece_bytes=1 << 20)
    assert reads == [(0, 100, 0, 30), (0, 200, 30, 10), (1, 0, 40, 15), (0, 210, 55, 7)]
    pieces = hdf5_pipeline.plan_reads(shard[:2], offset[:2], nbytes[:2], piece_bytes=8)
    assert [r[3] for r in pieces] == [8, 8, 8, 6] and pieces[-1][2] == 24


def test_block_extents_and_batches():
    index = np.zeros(4, dtype=[("offset", "<u8"), ("length", "<u8")])
    index["offset"] = [4096, 4096 + 32, 4096 + 32, 4096 + 64]
    index["length"] = [20, 0, 17, 1]
    _offsets, extents = qem_pipeline.block_extents(index)
    assert extents.tolist() == [32, 0, 32, 16]
    assert qem_pipeline.plan_block_batches(np.arange(4), extents, 40) == [(0, 2), (2, 3), (3, 4)]


def test_pack_mask_bits_little_endian_groups():
    mask = np.zeros((3, 5), bool)
    mask[0, 1] = mask[1, 3] = mask[2, 4] = True  # flat pixels 1, 8, 14
    assert pack_mask_bits(mask, 2).tolist() == [0b10, 0b01000001]


SHIM = r"""
#pragma once
#include <cstdint>
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __align__(n)
struct Dim3 { unsigned x, y, z; };
static Dim3 threadIdx, blockIdx, blockDim;
static unsigned char g_smem[1 << 18];
#define DECLARE_DYNAMIC_SHARED(name) unsigned char* name = g_smem
#define SYNC_LANES()
static long g_late_reads = 0;  // one-pass reads of bytes not written by an earlier sequence
#define LZ4_EARLIER(index, start) do { if ((index) >= (start)) ++g_late_reads; } while (0)
static inline int atomicCAS(int* p, int c, int v) { int o = *p; if (o == c) *p = v; return o; }
struct uint4 { unsigned x, y, z, w; };
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
    return (unsigned)((((unsigned long long)hi << 32) | lo) >> (s & 31u));
}
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
    return r;
}
"""

DRIVER = r"""
extern "C" long late_reads() { return g_late_reads; }
extern "C" void run(const u8* buf, const i64* offs, i64 n, i64* src, u32* len, u8* out, int* err) {
  blockDim.x = 1; threadIdx.x = 0;
  for (i64 f = 0; f < n; ++f) { blockIdx.x = f; walk_chunks(buf, offs, offs + 1, offs[n], n, src, len, out, err); }
  for (i64 it = 0; it < n * BLOCKS_PER_FRAME; ++it) { blockIdx.x = it; decode_blocks(buf, n, src, len, out, err); }
}
"""


def build_emulated(tmp_path, elem, frame_elems, block_bytes, stage, variant=0, extra=None):
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler to emulate the kernel on the host")
    source = module_loader.read_source("lz4_bitshuffle.cu")
    cbound = -(-lz4_bitshuffle.lz4_bound(block_bytes) // 16) * 16
    vector = int((frame_elems * elem) % (8 * elem) == 0)
    defines = module_loader.render_defines(
        {"ELEM_SIZE": elem, "FRAME_ELEMS": frame_elems, "BLOCK_BYTES": block_bytes, "CBOUND": cbound,
         "WARPS_PER_CTA": 1, "VECTOR_STORES": vector, "STAGE_COMPRESSED": int(stage),
         "LZ4_SCHEDULE": variant, "LANES": 1, **(extra or {})}
    )  # fmt: skip
    tag = "_".join(f"{k}{v}" for k, v in sorted((extra or {}).items()))
    unit = tmp_path / f"k_{elem}_{frame_elems}_{block_bytes}_{int(stage)}_{variant}{tag}.cpp"
    unit.write_text(SHIM + defines + source + DRIVER)
    lib = unit.with_suffix(".so")
    subprocess.run(
        [compiler, "-O1", "-w", "-shared", "-fPIC", "-o", str(lib), str(unit)], check=True
    )
    return ctypes.CDLL(str(lib))


def emulate(lib, chunks, n, frame_bytes, bpf):
    buf = np.frombuffer(b"".join(chunks), np.uint8).copy()
    offs = np.zeros(n + 1, np.int64)
    offs[1:] = np.cumsum([len(c) for c in chunks])
    src = np.zeros(max(n * bpf, 1), np.int64)
    ln = np.zeros(max(n * bpf, 1), np.uint32)
    out = np.full(n * frame_bytes, 0xAB, np.uint8)
    err = np.zeros(n, np.int32)
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    lib.run(ptr(buf), ptr(offs), ctypes.c_longlong(n), ptr(src), ptr(ln), ptr(out), ptr(err))
    lib.late_reads.restype = ctypes.c_long
    # a one-pass copy reading a byte of its own sequence races between the GPU's lanes
    assert lib.late_reads() == 0
    return out, err


EMULATED_CASES = [(2, (50, 50), 8192, True), (1, (7, 13), 128, False), (4, (33, 17), 256, True)]
SLOW_CASES = [
    (e, s, b, st)
    for e in (1, 2, 4)
    for s in ((192, 192), (3, 3), (96, 100))
    for b in (8192, 8 * e * 24)
    for st in (True, False)
]


#: (LZ4_SCHEDULE, more defines): the kernel's variants (lz4_bitshuffle.cu; the shipped
#: kernel is LZ4_SCHEDULE 2 with LZ4_TRANSPOSE 2, LZ4_SHORT 1 and LZ4_FAST 1)
T1 = {"LZ4_TRANSPOSE": 1}
SLOW = pytest.mark.slow  # the variants other than the shipped one and the plain order
KERNEL_VARIANTS = [
    (0, T1),
    pytest.param(1, T1, marks=SLOW),
    pytest.param(2, T1, marks=SLOW),
    pytest.param(1, None, marks=SLOW),
    (2, None),
    pytest.param(2, {"LZ4_SHORT": 0}, marks=SLOW),
    pytest.param(1, {"LZ4_SHORT": 0, **T1}, marks=SLOW),
    pytest.param(2, {"LZ4_FAST": 0}, marks=SLOW),
]


@pytest.mark.parametrize("variant,extra", KERNEL_VARIANTS)
@pytest.mark.parametrize("elem,shape,block_bytes,stage", EMULATED_CASES)
def test_kernel_source_decodes_like_bitshuffle(
    tmp_path, elem, shape, block_bytes, stage, variant, extra
):
    check_emulated(tmp_path, elem, shape, block_bytes, stage, variant, extra)


@pytest.mark.slow
@pytest.mark.parametrize("elem,shape,block_bytes,stage", SLOW_CASES)
@pytest.mark.parametrize("variant,extra", [(0, T1), (1, T1), (2, None)])
def test_kernel_source_decodes_like_bitshuffle_all(
    tmp_path, elem, shape, block_bytes, stage, variant, extra
):
    check_emulated(tmp_path, elem, shape, block_bytes, stage, variant, extra)


def check_emulated(tmp_path, elem, shape, block_bytes, stage, variant=0, extra=None):
    bitshuffle = pytest.importorskip("bitshuffle")
    dtype = np.dtype(f"u{elem}")
    frame_elems = shape[0] * shape[1]
    lib = build_emulated(tmp_path, elem, frame_elems, block_bytes, stage, variant, extra)
    block_elems = block_bytes // elem
    bpf = frame_elems // block_elems + (1 if frame_elems % block_elems >= 8 else 0)
    rng = np.random.default_rng([elem, frame_elems, block_bytes])
    frames = [rng.poisson(lam, shape).astype(dtype) for lam in (0.05, 1.0, 40.0)]
    frames.append(rng.integers(0, np.iinfo(dtype).max, shape, dtype=dtype, endpoint=True))
    frames.append(np.zeros(shape, dtype))

    def chunk(f):
        body = bitshuffle.compress_lz4(f.ravel(), block_elems).tobytes()
        return struct.pack(">QI", f.nbytes, block_bytes) + body

    chunks = [chunk(f) for f in frames]
    out, err = emulate(lib, chunks, len(frames), frame_elems * elem, bpf)
    assert not err.any()
    np.testing.assert_array_equal(out, np.concatenate([f.ravel() for f in frames]).view(np.uint8))
    if bpf == 0:
        return  # raw-only frames carry no structure to corrupt
    for kind in ("truncate", "extend", "block_length", "header"):
        bad = bytearray(chunks[1])
        if kind == "truncate":
            bad = bad[:-3]
        elif kind == "extend":
            bad += b"\0"
        elif kind == "block_length":
            bad[12:16] = struct.pack(">I", 1 << 30)
        else:
            bad[7] ^= 1
        trial = list(chunks)
        trial[1] = bytes(bad)
        _out2, err2 = emulate(lib, trial, len(frames), frame_elems * elem, bpf)
        assert err2[1] != 0, kind
        assert not np.delete(err2, 1).any(), kind
        # the CPU reference decoder names the same kind of damage
        raw = np.frombuffer(bytes(bad), np.uint8)
        cpu = cpu_decode.scan_chunk(raw, 0, raw.size, frame_elems * elem, elem)
        assert (
            cpu_decode.CPU_ERROR_CLASS[int(cpu)] == cpu_decode.KERNEL_ERROR_CLASS[int(err2[1])]
        ), (
            kind,
            int(cpu),
            int(err2[1]),
        )


def test_scheduled_lz4_parse_reports_the_same_error_for_every_corruption(tmp_path):
    """The scheduled parse (LZ4_SCHEDULE 1, the default) loads a sequence's match header
    before copying its literals and fills runs of period 1, 2 or 4 by words (2: and copies
    long matches by words, with LZ4_WIDE_MIN lowered here so that short ones take that path
    too); its error order must stay the sequential one: random byte flips, cuts and growths
    of real chunks give the same code per chunk (and the same frames where none) as the
    plain order (0)."""
    bitshuffle = pytest.importorskip("bitshuffle")
    elem, shape, block_bytes = 2, (24, 20), 256
    frame_elems = shape[0] * shape[1]
    libs = [build_emulated(tmp_path, elem, frame_elems, block_bytes, False, v) for v in (0, 1)]
    libs.append(
        build_emulated(tmp_path, elem, frame_elems, block_bytes, False, 2, {"LZ4_WIDE_MIN": 5})
    )
    libs.append(
        build_emulated(tmp_path, elem, frame_elems, block_bytes, False, 2, {"LZ4_SHORT": 0})
    )
    libs.append(build_emulated(tmp_path, elem, frame_elems, block_bytes, False, 2, {"LZ4_FAST": 0}))
    block_elems = block_bytes // elem
    bpf = frame_elems // block_elems + (1 if frame_elems % block_elems >= 8 else 0)
    rng = np.random.default_rng(11)
    frames = [rng.poisson(lam, shape).astype(np.uint16) for lam in (0.05, 0.5, 3.0, 50.0)]
    good = [
        struct.pack(">QI", f.nbytes, block_bytes)
        + bitshuffle.compress_lz4(f.ravel(), block_elems).tobytes()
        for f in frames
    ]
    failures = 0
    for trial in range(300):
        chunks = []
        for c in good:
            bad = bytearray(c)
            kind = rng.integers(3)
            if kind == 0:
                for _ in range(int(rng.integers(1, 4))):
                    bad[int(rng.integers(12, len(bad)))] ^= 1 << int(rng.integers(8))
            elif kind == 1:
                bad = bad[: int(rng.integers(12, len(bad)))]
            else:
                bad += bytes(rng.integers(0, 256, int(rng.integers(1, 5)), dtype=np.uint8))
            chunks.append(bytes(bad))
        (out0, err0), *others = (
            emulate(lib, chunks, len(chunks), frame_elems * elem, bpf) for lib in libs
        )
        failures += int(np.count_nonzero(err0))
        frame_bytes = frame_elems * elem
        for out1, err1 in others:
            np.testing.assert_array_equal(err1, err0, err_msg=f"trial {trial}")
            for k in np.flatnonzero(err0 == 0):
                np.testing.assert_array_equal(
                    out1[k * frame_bytes : (k + 1) * frame_bytes],
                    out0[k * frame_bytes : (k + 1) * frame_bytes],
                )
    assert failures > 300  # most damaged chunks are refused: the codes were compared


def test_lz4_one_pass_copies_at_their_bounds(tmp_path):
    """Crafted LZ4 blocks at the bounds of the fast and short paths (LZ4_FAST, LZ4_SHORT):
    every variant decodes each valid block to the byte-by-byte reference decode, refuses
    each invalid one with the plain order's (LZ4_SCHEDULE 0) code, and no one-pass copy
    reads a byte of its own sequence (which would race between the GPU's lanes)."""
    bitshuffle = pytest.importorskip("bitshuffle")
    elem, block_bytes = 2, 1024
    frame_elems = block_bytes // elem
    variants = [(0, T1), (2, None), (2, {"LZ4_FAST": 0}), (1, None), (2, {"LZ4_SHORT": 0})]
    libs = [
        build_emulated(tmp_path, elem, frame_elems, block_bytes, False, v, e) for v, e in variants
    ]
    rng = np.random.default_rng(20261203)
    valid = refused = 0
    for _call in range(8):
        chunks, decoded = edge_chunks(rng, block_bytes, 64)
        (out0, err0), *others = (emulate(lib, chunks, len(chunks), block_bytes, 1) for lib in libs)
        for k, block in enumerate(decoded):
            if block is None:
                refused += 1
                assert err0[k] != 0, k
                continue
            valid += 1
            assert err0[k] == 0, k
            frame = bitshuffle.bitunshuffle(np.frombuffer(block, np.uint16), frame_elems)
            np.testing.assert_array_equal(
                out0[k * block_bytes : (k + 1) * block_bytes], frame.view(np.uint8)
            )
        for (out1, err1), variant in zip(others, variants[1:]):
            np.testing.assert_array_equal(err1, err0, err_msg=str(variant))
            np.testing.assert_array_equal(
                out1.reshape(len(chunks), -1)[err0 == 0],
                out0.reshape(len(chunks), -1)[err0 == 0],
                err_msg=str(variant),
            )
    assert valid > 200 and refused > 50  # both kinds were held to the reference


def test_a_gpu_uuid_cut_at_a_zero_byte_is_not_formatted():
    """CuPy hands the properties' UUID over as a C string: a UUID with a zero byte arrives
    short, and must not be spelled as a (wrong) UUID; nvidia-smi's spelling is taken."""
    from harness.run.environment import gpu_uuid
    from quantem.stem4d.backends import format_gpu_uuid

    raw = bytes.fromhex("207222a773d46031cc33b4baad0096f0")
    assert format_gpu_uuid(raw) == "GPU-207222a7-73d4-6031-cc33-b4baad0096f0"
    assert format_gpu_uuid(raw[:13]) is None
    smi = "GPU-207222a7-73d4-6031-cc33-b4baad0096f0"
    assert gpu_uuid(raw[:13], smi) == smi
    assert gpu_uuid(raw, None) == smi
    assert gpu_uuid(None, None) is None


def _extended(block: bytes, ip: int, value: int) -> tuple[int, int]:
    """An LZ4 length field of 15 continues in bytes of 255 and one last byte."""
    if value == 15:
        while True:
            value += block[ip]
            ip += 1
            if block[ip - 1] != 255:
                break
    return value, ip


def lz4_matches(chunk: bytes) -> list[tuple[int, int]]:
    """(offset, length) of every match of a bitshuffle-LZ4 chunk's blocks (host parse)."""
    matches = []
    pos = 12
    while len(chunk) - pos >= 4:
        clen = struct.unpack(">I", chunk[pos : pos + 4])[0]
        pos += 4
        block, pos = chunk[pos : pos + clen], pos + clen
        ip = 0
        while True:
            token = block[ip]
            ip += 1
            lit, ip = _extended(block, ip, token >> 4)
            ip += lit
            if ip >= len(block):
                break
            offset = block[ip] | block[ip + 1] << 8
            ip += 2
            mlen, ip = _extended(block, ip, token & 15)
            matches.append((offset, mlen + 4))
    return matches


@pytest.mark.parametrize("dose", [1000.0, 40000.0])
@pytest.mark.parametrize("wide_min", [8, 64])
def test_wide_match_copies_decode_arina_frames(tmp_path, dose, wide_min):
    """LZ4_SCHEDULE 2 copies long matches a word a lane: straight copies, and long-period
    overlapping ones (zero bit planes matched against an earlier plane) in doubling rounds.
    ARINA-sized synthetic frames hold both kinds; the emulated kernel decodes them to the
    frames, as variant 0 does (with either bit transpose)."""
    pytest.importorskip("bitshuffle")
    from quantem.stem4d.io import synthetic

    model = synthetic.SyntheticModel((1, 6), (192, 192), np.uint16, dose, 0)
    frames = list(model.make_frames(0, 6))
    chunks = [synthetic.encode_chunk(f) for f in frames]
    matches = [m for c in chunks for m in lz4_matches(c)]
    assert any(4 <= o < n and n >= wide_min for o, n in matches)  # long overlapping period
    assert any(o >= n >= wide_min for o, n in matches)  # long straight copy
    frame_elems = 192 * 192
    bpf = frame_elems * 2 // 8192
    expected = np.concatenate([f.ravel() for f in frames]).view(np.uint8)
    for transpose in (1, 2):
        extra = {"LZ4_WIDE_MIN": wide_min, "LZ4_TRANSPOSE": transpose}
        lib = build_emulated(tmp_path, 2, frame_elems, 8192, False, 2, extra)
        out, err = emulate(lib, chunks, len(chunks), frame_elems * 2, bpf)
        assert not err.any()
        np.testing.assert_array_equal(out, expected)
