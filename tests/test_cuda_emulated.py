"""The CUDA kernels' own sources, run on the host by the SIMT emulator (``cuda_simt``).

No GPU needed: ``rans_decode.cu`` against the CPU codec (dense frames, fused moments and
the exact status code of every corruption), ``xxh3.cu`` against the xxhash library and
``lz4_bitshuffle.cu`` with full 32-lane warps against the bitshuffle library. The same
kernels run on the GPU in ``tests/hardware``.
"""

from __future__ import annotations

import ctypes
import struct

import numpy as np
import pytest
from _lz4_edges import edge_chunks
from cuda_simt import build, pointer

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.cuda import lz4_bitshuffle
from quantem.stem4d.cuda.module_loader import read_source
from quantem.stem4d.cuda.rans_decode import GROUP_PIXELS, KERNEL_FUNCTIONS, pack_mask_bits
from quantem.stem4d.io import cpu_decode
from quantem.stem4d.io.qem.reader import QemFile
from quantem.stem4d.io.qem.writer import save_qem


@pytest.fixture(scope="module")
def simt_dir(tmp_path_factory):
    """One build folder per module, so each kernel configuration compiles once."""
    return tmp_path_factory.mktemp("simt")


RANS_DRIVER = r"""
extern "C" void run(const u8* payload, const i64* off, const u32* mode, const u32* nf,
                    const u32* nw, const u32* nnz, const u32* nesc, const i64* outf, int n_blocks,
                    const u8* gc, const u8* sym, const u32* fc, u8* scratch, i64 per_warp,
                    void* out, const u8* rmask, u64* t, u64* r, u64* c, int* status, int grid) {
    simt_launch(grid, 32 * WARPS_PER_CTA, [&] {
        KERNEL(payload, off, mode, nf, nw, nnz, nesc, outf, n_blocks, gc, sym, fc,
               scratch, per_warp, (elem_t*)out, rmask, t, r, c, status);
    });
}
"""


def write_qem(tmp_path, data, name, block_frames):
    meta = {"pixel_mask": np.zeros(data.shape[2:], np.uint32)}
    path = tmp_path / name
    save_qem(
        Acquisition(data, meta, np.ones(data.shape[2:], bool), "cpu"),
        path,
        block_frames=block_frames,
    )
    return path


def counts(rng, scan, det, dtype):
    data = rng.poisson(0.7, (*scan, *det)).astype(np.int64)
    rr, cc = np.mgrid[: det[0], : det[1]]
    disk = (rr - det[0] / 2) ** 2 + (cc - det[1] / 2) ** 2 < (min(det) / 4) ** 2
    big = 40 if np.dtype(dtype).itemsize == 1 else 400
    data[..., disk] += rng.poisson(big, data[..., disk].shape)
    return np.minimum(data, np.iinfo(dtype).max).astype(dtype)


#: Both kernels of rans_decode.cu: v1 (decode_qem_blocks) and v2 (decode_qem_blocks_v2).
#: v2 is the default; v1 (format 1.0's first kernel) in the full tier only
RANS_KERNELS = [pytest.param("v1", marks=pytest.mark.slow), "v2"]


class EmulatedRans:
    def __init__(
        self, tmp_path, qem: QemFile, reduce: int, shared_classes: int = 1, kernel: str = "v1"
    ):
        header = qem.header
        self.qem = qem
        self.itemsize = int(header.stored_itemsize)
        self.det = tuple(int(v) for v in qem.detector_shape)
        self.P = self.det[0] * self.det[1]
        self.G = -(-self.P // GROUP_PIXELS)
        model = qem.model
        defines = {
            "ELEM_SIZE": self.itemsize, "FRAME_PIXELS": self.P, "N_GROUPS": self.G,
            "DET_C": self.det[1], "N_CONTEXTS": int(model.n_contexts), "WARPS_PER_CTA": 1,
            "REDUCE": reduce, "VECTOR_STORES": int(self.P % GROUP_PIXELS == 0),
            "SHARED_CLASSES": shared_classes,
        }  # fmt: skip
        driver = f"#define KERNEL {KERNEL_FUNCTIONS[kernel]}\n" + RANS_DRIVER
        self.lib = build(tmp_path, "rans", defines, read_source("rans_decode.cu"), driver)
        self.sym = np.ascontiguousarray(model.slot_symbol, dtype=np.uint8)
        cum = np.asarray(model.cum, dtype=np.uint32)[:, :256]
        self.fc = np.ascontiguousarray(np.asarray(model.freq, dtype=np.uint32) | (cum << 16))
        self.gc = np.ascontiguousarray(model.group_class, dtype=np.uint8)

    def run(self, buffer, ids, out=None, mask_bits=None, sums=None, grid=2):
        index = self.qem.block_index[ids]
        fields = {k: np.ascontiguousarray(index[k], dtype=np.uint32)
                  for k in ("mode", "n_frames", "n_words", "n_nonzero", "n_escapes")}  # fmt: skip
        offsets = np.ascontiguousarray(index["offset"], dtype=np.int64)
        out_frames = np.ascontiguousarray(index["frame_start"], dtype=np.int64)
        per_warp = int(self.qem.block_frames) * self.G
        scratch = np.zeros(grid * per_warp, np.uint8)
        status = np.zeros(len(ids), np.int32)
        dummy = np.zeros(8, np.uint64)
        if out is None:
            out = np.zeros(8, np.uint8)
        if mask_bits is None:
            mask_bits = np.zeros(8, np.uint8)
        t, r, c = sums if sums is not None else (dummy, dummy, dummy)
        self.lib.run(
            pointer(buffer), pointer(offsets), pointer(fields["mode"]), pointer(fields["n_frames"]),
            pointer(fields["n_words"]), pointer(fields["n_nonzero"]), pointer(fields["n_escapes"]),
            pointer(out_frames), ctypes.c_int(len(ids)), pointer(self.gc), pointer(self.sym),
            pointer(self.fc), pointer(scratch), ctypes.c_longlong(per_warp), pointer(out),
            pointer(mask_bits), pointer(t), pointer(r), pointer(c), pointer(status),
            ctypes.c_int(grid),
        )  # fmt: skip
        return status


CASES = [
    ((3, 4), (16, 24), np.uint16),
    ((2, 5), (9, 13), np.uint16),  # P % 8 != 0: partial last group, scalar stores
    pytest.param((3, 3), (16, 16), np.uint8, marks=pytest.mark.slow),
    pytest.param((2, 3), (12, 8), np.uint32, marks=pytest.mark.slow),
    pytest.param((2, 2), (3, 5), np.uint16, marks=pytest.mark.slow),  # fewer groups than lanes
]


@pytest.mark.parametrize("kernel", RANS_KERNELS)
@pytest.mark.parametrize("scan,det,dtype", CASES)
def test_rans_kernel_matches_cpu_codec(tmp_path, simt_dir, scan, det, dtype, kernel):
    rng = np.random.default_rng([2, *scan, *det])
    data = counts(rng, scan, det, dtype)
    path = write_qem(tmp_path, data, "a.qem", block_frames=3)
    with QemFile(path) as qem:
        buffer = np.array(qem.buffer)
        ids = np.arange(qem.n_blocks)
        dense = EmulatedRans(simt_dir, qem, 0, kernel=kernel)
        out = np.full((qem.n_frames, *det), 0xAB, dtype=qem.dtype)
        status = dense.run(buffer, ids, out=out)
        assert not status.any()
        np.testing.assert_array_equal(out, qem.decode_blocks(ids))
        np.testing.assert_array_equal(out.reshape(data.shape), data.astype(out.dtype))

        # The fused variant reads the class map from global memory (large detectors' path).
        fused = EmulatedRans(simt_dir, qem, 1, shared_classes=0, kernel=kernel)
        mask = rng.random(det) < 0.4
        sums = tuple(np.zeros(qem.n_frames, np.uint64) for _ in range(3))
        status = fused.run(buffer, ids, mask_bits=pack_mask_bits(mask, fused.G), sums=sums)
        assert not status.any()
        frames = data.reshape(-1, *det).astype(np.uint64)
        rows, cols = np.nonzero(mask)
        values = frames[:, rows, cols]
        np.testing.assert_array_equal(sums[0], values.sum(axis=1))
        np.testing.assert_array_equal(sums[1], (values * rows.astype(np.uint64)).sum(axis=1))
        np.testing.assert_array_equal(sums[2], (values * cols.astype(np.uint64)).sum(axis=1))


REFERENCE_CODES = {
    "state range": {1}, "words exhausted": {2}, "mask padding": {3}, "nonzero count": {4},
    "escapes exhausted": {5}, "escape value": {6}, "final checks": {7, 8, 9}, "inner padding": {10},
}  # fmt: skip


def reference_error(qem, buffer, block):
    """The spec's sequential decoder (tests/_qem_reference.py) on one block: codes or None."""
    import _qem_reference as ref

    index = qem.block_index[block]
    model = qem.model
    freqs = [[int(v) for v in row] for row in model.freq]
    cums = [[int(v) for v in row] for row in model.cum]
    syms = [[int(v) for v in row] for row in model.slot_symbol]
    P = qem.header.frame_pixels
    out = np.zeros(int(index["n_frames"]) * P, dtype=np.int64)
    try:
        ref._decode_rans(
            buffer.tobytes(), block, int(index["offset"]), int(index["n_frames"]),
            int(index["n_words"]), int(index["n_nonzero"]), int(index["n_escapes"]),
            qem.header.stored_itemsize, P, -(-P // 8), [int(v) for v in model.group_class],
            freqs, cums, syms, out,
        )  # fmt: skip
    except ref.ReferenceError as exc:
        rule = str(exc).split(f"block {block} ")[1]
        return REFERENCE_CODES[rule]
    return None


@pytest.mark.parametrize("kernel", RANS_KERNELS)
def test_rans_kernel_reports_the_spec_error_of_every_corruption(tmp_path, simt_dir, kernel):
    rng = np.random.default_rng(3)
    data = counts(rng, (3, 4), (16, 24), np.uint16)
    path = write_qem(tmp_path, data, "b.qem", block_frames=4)
    with QemFile(path, verify=False) as qem:
        clean = np.array(qem.buffer)
        index = qem.block_index
        rans_blocks = np.flatnonzero(index["mode"] == 2)
        emulated = EmulatedRans(simt_dir, qem, 0, kernel=kernel)
        decoded = qem.decode_blocks(np.arange(qem.n_blocks))
        seen = set()
        for trial in range(24):
            buffer = clean.copy()
            block = int(rans_blocks[trial % rans_blocks.size])
            start = int(index["offset"][block])
            length = int(index["length"][block])
            position = start + int(rng.integers(0, length))
            buffer[position] ^= np.uint8(1 << int(rng.integers(0, 8)))
            ids = np.arange(qem.n_blocks)
            expected = reference_error(qem, buffer, block)
            out = np.zeros((qem.n_frames, 16, 24), np.uint16)
            got = emulated.run(buffer, ids, out=out)
            if expected is None:  # a flip the format cannot see without the checksum
                assert not got.any()
                continue
            assert np.flatnonzero(got).tolist() == [block]
            assert int(got[block]) in expected, (trial, int(got[block]), expected)
            seen.add(int(got[block]))
            # The other blocks still decode exactly, including a block that the same warp
            # decodes after the failed one (grid 2: warp 0 takes blocks 0 and 2).
            bf = int(qem.block_frames)
            for other in range(qem.n_blocks):
                if other != block:
                    rows = slice(other * bf, (other + 1) * bf)
                    np.testing.assert_array_equal(out[rows], decoded[rows])
        assert len(seen) >= 3  # several different checks were exercised


XXH3_DRIVER = r"""
extern "C" void run(const u8* data, const i64* starts, const i64* ext, const i64* len,
                    const u64* expected, int n, int* flags) {
    simt_launch(n, 32, [&] { xxh3_verify(data, starts, ext, len, expected, n, flags); });
}
"""


def test_xxh3_kernel_matches_xxhash(simt_dir):
    xxhash = pytest.importorskip("xxhash")
    lib = build(simt_dir, "xxh3", {}, read_source("xxh3.cu"), XXH3_DRIVER)
    rng = np.random.default_rng(4)
    lengths = [0, 100, 240, 241, 256, 1024, 1025, 1088, 2112, 5000, 20000]
    blobs = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in lengths]
    starts, data = [], bytearray()
    for b in blobs:
        starts.append(len(data))
        data += b + bytes(-len(b) % 16)
    buf = np.frombuffer(bytes(data), np.uint8).copy()
    starts = np.array(starts, np.int64)
    ext = np.array(lengths, np.int64)
    expected = np.array([xxhash.xxh3_64_intdigest(b) for b in blobs], np.uint64)
    expected[-1] ^= np.uint64(4)  # one wrong checksum
    flags = np.zeros(len(blobs), np.int32)
    lib.run(pointer(buf), pointer(starts), pointer(ext), pointer(ext), pointer(expected),
            ctypes.c_int(len(blobs)), pointer(flags))  # fmt: skip
    want = [3 if n <= 240 else 0 for n in lengths]
    want[-1] = 1
    assert flags.tolist() == want


@pytest.mark.parametrize("shift", [1, 3, 7])
def test_xxh3_kernel_hashes_unaligned_ranges(simt_dir, shift):
    """ARINA chunks sit at any byte of a staged span (verify_source): the funnel-shifted
    loads hash them as the library does, and a flipped byte is caught."""
    xxhash = pytest.importorskip("xxhash")
    lib = build(simt_dir, "xxh3", {}, read_source("xxh3.cu"), XXH3_DRIVER)
    rng = np.random.default_rng(shift)
    lengths = [241, 1023, 1024, 1025, 3001, 9000]
    buf = rng.integers(0, 256, shift + sum(lengths) + 64, dtype=np.uint8)
    starts = np.array(shift + np.concatenate(([0], np.cumsum(lengths)[:-1])), np.int64)
    ext = np.array(lengths, np.int64)
    blob = buf.tobytes()
    expected = np.array(
        [xxhash.xxh3_64_intdigest(blob[s : s + n]) for s, n in zip(starts, lengths)], np.uint64
    )
    buf[starts[3] + 1000] ^= 0x10  # one flipped bit in range 3
    flags = np.zeros(len(lengths), np.int32)
    lib.run(pointer(buf), pointer(starts), pointer(ext), pointer(ext), pointer(expected),
            ctypes.c_int(len(lengths)), pointer(flags))  # fmt: skip
    assert flags.tolist() == [0, 0, 0, 1, 0, 0]


def slow_variant(variant, extra):
    """A kernel variant other than the shipped one and the plain order: the full tier only."""
    return pytest.param(variant, extra, marks=pytest.mark.slow)


LZ4_DRIVER = r"""
extern "C" void run(const u8* buf, const i64* offs, i64 n, i64* src, u32* len, u8* out, int* err,
                    int shared_bytes, i64 buf_bytes) {
    simt_launch((unsigned)((n + 127) / 128), 128, [&] { walk_chunks(buf, offs, offs + 1, buf_bytes, n, src, len, out, err); });
    const i64 items = n * BLOCKS_PER_FRAME;
    if (items) simt_launch((unsigned)((items + WARPS_PER_CTA - 1) / WARPS_PER_CTA), 32 * WARPS_PER_CTA,
                           [&] { decode_blocks(buf, n, src, len, out, err); });
}
"""


def run_lz4(lib, chunks, bpf, frame_bytes, buf_bytes=None):
    """The emulated walk and decode of `chunks` (`bpf` blocks a frame of `frame_bytes`), with
    `buf_bytes` of them staged (all by default): (out, err), out prefilled with 0xAB."""
    n = len(chunks)
    buf = np.frombuffer(b"".join(chunks), np.uint8).copy()
    offs = np.zeros(n + 1, np.int64)
    offs[1:] = np.cumsum([len(c) for c in chunks])
    src, ln = np.zeros(n * bpf, np.int64), np.zeros(n * bpf, np.uint32)
    out = np.full(n * frame_bytes, 0xAB, np.uint8)
    err = np.zeros(n, np.int32)
    staged = offs[-1] if buf_bytes is None else buf_bytes
    lib.run(pointer(buf), pointer(offs), ctypes.c_longlong(n), pointer(src), pointer(ln),
            pointer(out), pointer(err), ctypes.c_int(0), ctypes.c_longlong(staged))  # fmt: skip
    return out, err


@pytest.mark.parametrize(
    "elem,stage",
    [(2, False), pytest.param(2, True, marks=pytest.mark.slow), (1, False),
     pytest.param(4, True, marks=pytest.mark.slow)],
)  # fmt: skip
@pytest.mark.parametrize(
    "variant,extra",
    [
        (0, {"LZ4_TRANSPOSE": 1}),
        slow_variant(1, {"LZ4_TRANSPOSE": 1}),
        slow_variant(2, {"LZ4_WIDE_MIN": 8, "LZ4_TRANSPOSE": 1}),
        slow_variant(2, {"LZ4_WIDE_MIN": 8}),
        (2, {}),
        slow_variant(2, {"LZ4_SHORT": 0}),
        slow_variant(1, {"LZ4_SHORT": 0, "LZ4_TRANSPOSE": 1}),
        slow_variant(2, {"LZ4_FAST": 0}),
    ],
)
def test_lz4_kernel_with_full_warps(simt_dir, elem, stage, variant, extra):
    bitshuffle = pytest.importorskip("bitshuffle")
    det = (24, 20) if elem != 1 else (33, 17)
    dtype = np.dtype(f"u{elem}")
    block_bytes = 8 * elem * 16
    cbound = -(-lz4_bitshuffle.lz4_bound(block_bytes) // 16) * 16
    frame_elems = det[0] * det[1]
    defines = {"ELEM_SIZE": elem, "FRAME_ELEMS": frame_elems, "BLOCK_BYTES": block_bytes,
               "CBOUND": cbound, "WARPS_PER_CTA": 2, "STAGE_COMPRESSED": int(stage),
               "VECTOR_STORES": int((frame_elems * elem) % (8 * elem) == 0),
               "LZ4_SCHEDULE": variant, **extra}  # fmt: skip
    lib = build(simt_dir, "lz4", defines, read_source("lz4_bitshuffle.cu"), LZ4_DRIVER)
    rng = np.random.default_rng([5, elem])
    frames = [rng.poisson(lam, det).astype(dtype) for lam in (0.1, 2.0, 60.0)]
    frames.append(rng.integers(0, np.iinfo(dtype).max, det, dtype=dtype, endpoint=True))
    chunks = [struct.pack(">QI", f.nbytes, block_bytes) + bitshuffle.compress_lz4(f.ravel(), block_bytes // elem).tobytes()
              for f in frames]  # fmt: skip
    chunks[2] = chunks[2][:-2]  # truncated: flagged, the others intact
    block_elems = block_bytes // elem
    bpf = frame_elems // block_elems + (1 if frame_elems % block_elems >= 8 else 0)
    out, err = run_lz4(lib, chunks, bpf, frame_elems * elem)
    assert err[2] != 0 and not np.delete(err, 2).any()
    got = out.view(dtype).reshape(len(chunks), *det)
    for k in (0, 1, 3):
        np.testing.assert_array_equal(got[k], frames[k])
    # A chunk reaching past the staged bytes is refused before any of it is read.
    _, err = run_lz4(lib, chunks, bpf, frame_elems * elem, sum(len(c) for c in chunks[:3]) + 5)
    assert err[3] == 11 and err[2] != 0 and not err[:2].any()


#: The kernel's one-pass reads counted, from every lane's thread, where they would race
LATE_READS = r"""
static std::atomic<long> g_late_reads{0};
#define LZ4_EARLIER(index, start) do { if ((index) >= (start)) ++g_late_reads; } while (0)
extern "C" long late_reads() { return g_late_reads.load(); }
"""


@pytest.mark.parametrize("extra", [{}, {"LZ4_FAST": 0}, {"LZ4_SHORT": 0}], ids=str)
def test_lz4_one_pass_copies_with_full_warps(simt_dir, extra):
    """The crafted blocks of tests/_lz4_edges.py at 32 lanes a warp, where a sequence
    of at most 32 bytes is copied in one pass (LZ4_FAST, LZ4_SHORT): each valid block decodes
    to the byte-by-byte reference, each invalid one is refused with the CPU decoder's kind of
    damage, and no one-pass copy reads a byte of its own sequence."""
    bitshuffle = pytest.importorskip("bitshuffle")
    elem, block_bytes = 2, 1024
    frame_elems = block_bytes // elem
    defines = {**lz4_bitshuffle.decoder_defines(elem, frame_elems, block_bytes),
               "WARPS_PER_CTA": 2, "LZ4_SCHEDULE": 2, **extra}  # fmt: skip
    lib = build(
        simt_dir, "lz4edges", defines, LATE_READS + read_source("lz4_bitshuffle.cu"), LZ4_DRIVER
    )
    lib.late_reads.restype = ctypes.c_long
    chunks, decoded = edge_chunks(np.random.default_rng(3), block_bytes, 192)
    n = len(chunks)
    out, err = run_lz4(lib, chunks, 1, block_bytes)
    assert lib.late_reads() == 0
    valid = 0
    for k, block in enumerate(decoded):
        raw = np.frombuffer(chunks[k], np.uint8)
        cpu = cpu_decode.scan_chunk(raw, 0, raw.size, block_bytes, elem)
        kind = cpu_decode.KERNEL_ERROR_CLASS[int(err[k])] if err[k] else None
        if block is None:
            assert err[k] != 0 and kind == cpu_decode.CPU_ERROR_CLASS[int(cpu)], k
            continue
        valid += 1
        assert err[k] == 0 and cpu == 0, k
        frame = bitshuffle.bitunshuffle(np.frombuffer(block, np.uint16), frame_elems)
        np.testing.assert_array_equal(
            out[k * block_bytes : (k + 1) * block_bytes], frame.view(np.uint8)
        )
    assert valid > 80 and n - valid > 30  # both kinds were held to the reference


def test_rans_kernel_selection_and_shared_bytes(monkeypatch):
    from quantem.stem4d.cuda import rans_decode as rd

    monkeypatch.delenv("QUANTEM_RANS_KERNEL", raising=False)
    assert rd.selected_kernel() == rd.DEFAULT_KERNEL == "v2"
    assert rd.selected_kernel("v1") == "v1"
    monkeypatch.setenv("QUANTEM_RANS_KERNEL", "v1")
    assert rd.selected_kernel() == "v1"
    assert rd.selected_kernel("v2") == "v2"  # an explicit choice wins over the variable
    monkeypatch.setenv("QUANTEM_RANS_KERNEL", "v3")
    with pytest.raises(ValueError, match="unknown rANS kernel"):
        rd.selected_kernel()
    # The formulas of rans_decode.cu's headers (4608 groups: the class map in shared memory).
    assert rd.shared_bytes("v1", 2, 4608, 8) == 8 * 5120 + 16 * 1536 + 4608
    assert rd.shared_bytes("v2", 2, 4608, 8) == 8 * 5120 + 16 * (512 + 512) + 4608
    assert rd.shared_bytes("v2", 4, 4608, 8) == 8 * 5120 + 16 * (1024 + 512) + 4608
    assert rd.shared_bytes("v2", 1, 20000, 2) == 2 * 5120 + 16 * (512 + 512)
