"""The format-2.0 CUDA kernel (``decode_qem2_blocks`` of ``rans_decode.cu``) in the SIMT
emulator, against the CPU decoder (``quantem.stem4d.io.qem.band_rans``), no GPU needed.

Dense frames bit for bit, fused masked moments against numpy, and, for random damage to
RANS entries, the same status code as the CPU decoder on every entry.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from cuda_simt import build, pointer

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.cuda.module_loader import read_source
from quantem.stem4d.cuda.rans_decode import band_shared_bytes, decoder_defines
from quantem.stem4d.io.qem import band_rans
from quantem.stem4d.io.qem import format as fmt
from quantem.stem4d.io.qem.reader import QemFile
from quantem.stem4d.io.qem.writer import save_qem

DRIVER = r"""
extern "C" void run(const u8* payload, const i64* off, const u32* mode, const u32* nf,
                    const u32* nw, const u32* nesc, const i64* outf, const u32* band,
                    int n_blocks, int band_rows, int n_classes, int n_quads, const u8* qmap,
                    const u32* tables, const u32* coded, void* out, u64* t, u64* r, u64* c,
                    int* status, int grid) {
    simt_launch(grid, 32 * WARPS_PER_CTA, [&] {
        decode_qem2_blocks(payload, off, mode, nf, nw, nesc, outf, band, n_blocks, band_rows,
                           n_classes, n_quads, qmap, tables, coded, (elem_t*)out, t, r, c,
                           status);
    });
}
"""


@pytest.fixture(scope="module")
def simt_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("simt2")


def counts(rng, scan, det, dtype):
    data = rng.poisson(0.7, (*scan, *det)).astype(np.int64)
    rr, cc = np.mgrid[: det[0], : det[1]]
    disk = (rr - det[0] / 2) ** 2 + (cc - det[1] / 2) ** 2 < (min(det) / 4) ** 2
    big = 40 if np.dtype(dtype).itemsize == 1 else 400
    data[..., disk] += rng.poisson(big, data[..., disk].shape)
    data[0, 0, 0, 0] = np.iinfo(dtype).max
    return np.minimum(data, np.iinfo(dtype).max).astype(dtype)


def write(tmp_path, data, band_rows, block_frames):
    meta = {"pixel_mask": np.zeros(data.shape[2:], np.uint32)}
    path = tmp_path / "v2.qem"
    acq = Acquisition(data, meta, np.ones(data.shape[2:], bool), "cpu")
    save_qem(acq, path, version=2, band_rows=band_rows, block_frames=block_frames)
    return path


#: Variants of ``decode_qem2_blocks`` (``rans_decode.cu``, "Tuning"): the shipped kernel
#: (L1 prefetch, a hint the emulator ignores; unroll 2) and the candidate that takes the
#: round's words by shuffle (``QEM2_SHFL``; its fallback for rounds of more than 32 words:
#: test_kernel_2_rounds_of_more_than_32_words).
VARIANTS = {
    "default": {},
    "shfl": {"QEM2_SHFL": 1},
}


class Emulated2:
    def __init__(self, simt_dir, qem: QemFile, reduce: int, extra: dict | None = None):
        self.qem = qem
        det = tuple(int(v) for v in qem.detector_shape)
        defines = decoder_defines(qem.header.stored_itemsize, det, 2 * qem.model.n_classes, reduce)
        defines["WARPS_PER_CTA"] = 1
        defines.update(extra or {})
        self.lib = build(simt_dir, "band_rans", defines, read_source("rans_decode.cu"), DRIVER)
        self.tables = np.ascontiguousarray(qem.decode_table, dtype=np.uint32)
        coded = np.packbits(np.asarray(qem.coded, bool), axis=1, bitorder="little")
        self.coded = np.ascontiguousarray(coded.view("<u4"))
        self.classes = np.ascontiguousarray(qem.model.group_class, dtype=np.uint8)
        assert band_shared_bytes(qem.model.n_classes, self.classes.size) < (1 << 20)

    def run(self, buffer, out=None, sums=None, quad_map=None, ids=None, grid=2):
        qem = self.qem
        ids = np.arange(qem.n_blocks) if ids is None else ids
        index = qem.block_index[ids]
        u32 = {k: np.ascontiguousarray(index[k], dtype=np.uint32)
               for k in ("mode", "n_frames", "n_words", "n_escapes", "band")}  # fmt: skip
        offsets = np.ascontiguousarray(index["offset"], dtype=np.int64)
        out_frames = np.ascontiguousarray(index["frame_start"], dtype=np.int64)
        status = np.zeros(ids.size, np.int32)
        dummy = np.zeros(8, np.uint64)
        t, r, c = sums if sums is not None else (dummy, dummy, dummy)
        out = np.zeros(8, np.uint8) if out is None else out
        quad_map = self.classes if quad_map is None else quad_map
        self.lib.run(
            pointer(buffer), pointer(offsets), pointer(u32["mode"]), pointer(u32["n_frames"]),
            pointer(u32["n_words"]), pointer(u32["n_escapes"]), pointer(out_frames),
            pointer(u32["band"]), ctypes.c_int(ids.size), ctypes.c_int(qem.header.band_rows),
            ctypes.c_int(qem.model.n_classes), ctypes.c_int(self.classes.size),
            pointer(quad_map), pointer(self.tables), pointer(self.coded), pointer(out),
            pointer(t), pointer(r), pointer(c), pointer(status), ctypes.c_int(grid),
        )  # fmt: skip
        return status


def quad_map_for(qem: QemFile, mask: np.ndarray) -> np.ndarray:
    det_c = qem.detector_shape[1]
    nibbles = np.zeros(qem.model.group_class.size * 4, dtype=bool)
    flat = mask.reshape(-1)
    for k in range(qem.n_bands):
        a = int(qem.band_first_row[k]) * det_c
        n = int(qem.band_n_rows[k]) * det_c
        q0 = int(qem.band_quad0[k]) * 4
        nibbles[q0 : q0 + n] = flat[a : a + n]
    bits = np.packbits(nibbles.reshape(-1, 4), axis=1, bitorder="little").reshape(-1)
    return np.ascontiguousarray(qem.model.group_class | (bits << 4), dtype=np.uint8)


CASES = [
    ((3, 4), (16, 24), np.uint16, 4, 4),  # 96-pixel bands: partial rounds every frame
    ((2, 3), (20, 32), np.uint16, 8, 4),  # 256-pixel bands: whole rounds, vector stores
    ((4, 4), (9, 13), np.uint16, 4, 16),  # det_c % 4 != 0: scalar stores, last band 1 row
    pytest.param((2, 3), (16, 16), np.uint8, 16, 4, marks=pytest.mark.slow),
    pytest.param((2, 2), (12, 8), np.uint32, 5, 4, marks=pytest.mark.slow),
]


#: The candidate's cases: 576-pixel bands of 32 frames (4 whole rounds and a 64-pixel
#: partial round a frame) in the default tier; every case in the slow tier.
VARIANT_CASES = [
    pytest.param("shfl", (4, 8), (16, 72), np.uint16, 8, 32, id="shfl-long"),
    *[
        pytest.param("shfl", *c, marks=pytest.mark.slow, id=f"shfl-{i}")
        for i, c in enumerate(
            [((2, 3), (12, 40), np.uint16, 4, 4)] + [getattr(p, "values", p) for p in CASES]
        )
    ],
]


@pytest.mark.parametrize("scan,det,dtype,band_rows,block_frames", CASES)
def test_kernel_2_matches_cpu_decoder(
    tmp_path, simt_dir, scan, det, dtype, band_rows, block_frames
):
    check_variant(tmp_path, simt_dir, "default", scan, det, dtype, band_rows, block_frames)


@pytest.mark.parametrize("variant,scan,det,dtype,band_rows,block_frames", VARIANT_CASES)
def test_kernel_2_variants_match_cpu_decoder(
    tmp_path, simt_dir, variant, scan, det, dtype, band_rows, block_frames
):
    check_variant(tmp_path, simt_dir, variant, scan, det, dtype, band_rows, block_frames)


def check_variant(tmp_path, simt_dir, variant, scan, det, dtype, band_rows, block_frames):
    extra = VARIANTS[variant]
    rng = np.random.default_rng(sum(det) + band_rows)
    data = counts(rng, scan, det, dtype)
    path = write(tmp_path, data, band_rows, block_frames=block_frames)
    with QemFile(path) as qem:
        assert (qem.block_index["mode"] == fmt.MODE_RANS).any()
        expected = qem.read_frames()
        np.testing.assert_array_equal(expected.reshape(data.shape), data)
        buffer = qem.buffer
        n_out = qem.n_frame_blocks * qem.block_frames
        out = np.full((n_out, *det), 0xAB, dtype=dtype)
        status = Emulated2(simt_dir, qem, 0, extra).run(buffer, out=out)
        assert not status.any()
        np.testing.assert_array_equal(out[: qem.n_frames], expected)
        # fused moments over a disk touching some bands only
        rr, cc = np.mgrid[: det[0], : det[1]]
        mask = (rr - det[0] / 2) ** 2 + (cc - det[1] / 3) ** 2 <= (det[0] / 5) ** 2
        sums = [np.zeros(n_out, np.uint64) for _ in range(3)]
        status = Emulated2(simt_dir, qem, 1, extra).run(
            buffer, sums=sums, quad_map=quad_map_for(qem, mask)
        )
        assert not status.any()
        rows, cols = np.nonzero(mask)
        values = expected[:, rows, cols].astype(np.uint64)
        np.testing.assert_array_equal(sums[0][: qem.n_frames], values.sum(axis=1))
        np.testing.assert_array_equal(sums[1][: qem.n_frames], (values * rows).sum(axis=1))
        np.testing.assert_array_equal(sums[2][: qem.n_frames], (values * cols).sum(axis=1))


def cpu_status(qem: QemFile, buffer: np.ndarray, block: int) -> int:
    """The CPU decoder's status for one entry of ``buffer`` (checksums not involved)."""
    entry = qem.block_index[block]
    band = int(entry["band"])
    out = np.zeros((int(entry["n_frames"]), qem.header.frame_pixels), dtype=qem.dtype)
    status = np.zeros(1, np.int64)
    band_rans.decode_blocks(
        buffer, np.array([int(entry["offset"])]), np.array([int(entry["mode"])]),
        np.array([int(entry["n_frames"])]), np.array([int(entry["n_words"])]),
        np.array([int(entry["n_escapes"])]), np.zeros(1, np.int64), np.array([band]),
        qem.band_first_row, qem.band_n_rows, qem.band_quad0, int(qem.detector_shape[1]),
        qem.header.stored_itemsize, qem.model.group_class, qem.coded, qem.decode_table,
        out, status, 0, 1,
    )  # fmt: skip
    return int(status[0])


@pytest.mark.parametrize("variant", ["default", "shfl"])
def test_kernel_2_reports_the_cpu_status_of_every_corruption(tmp_path, simt_dir, variant):
    rng = np.random.default_rng(7)
    data = counts(rng, (3, 4), (16, 24), np.uint16)
    path = write(tmp_path, data, 8, block_frames=6)
    with QemFile(path) as qem:
        index = qem.block_index
        rans_blocks = np.flatnonzero(index["mode"] == fmt.MODE_RANS)
        assert rans_blocks.size
        emulated = Emulated2(simt_dir, qem, 0, VARIANTS[variant])
        pristine = qem.buffer
        n_out = qem.n_frame_blocks * qem.block_frames
        refused = 0
        for trial in range(16):
            block = int(rans_blocks[trial % rans_blocks.size])
            offset, length = int(index["offset"][block]), int(index["length"][block])
            buffer = pristine.copy()
            at = offset + int(rng.integers(0, length))
            buffer[at] ^= np.uint8(1 << int(rng.integers(0, 8)))
            out = np.zeros((n_out, *qem.detector_shape), np.uint16)
            status = emulated.run(buffer, out=out)
            expected = cpu_status(qem, buffer, block)
            assert int(status[block]) == expected, (trial, at)
            others = np.delete(np.arange(qem.n_blocks), block)
            assert not status[others].any()
            refused += expected != 0
        assert refused > 0


def test_default_2_layout_is_the_measured_one(tmp_path):
    """192 x 192 frames: 12 bands of 16 rows, 64 frames a block (the layout chosen from
    the H200 runs); the file decodes on the CPU to its counts."""
    rng = np.random.default_rng(5)
    data = rng.poisson(0.3, (1, 70, 192, 192)).astype(np.uint16)
    meta = {"pixel_mask": np.zeros((192, 192), np.uint32)}
    path = tmp_path / "default.qem"
    save_qem(Acquisition(data, meta, np.ones((192, 192), bool), "cpu"), path, version=2)
    with QemFile(path) as qem:
        assert (qem.header.band_rows, qem.n_bands, qem.block_frames) == (16, 12, 64)
        assert qem.n_blocks == 2 * 12
        np.testing.assert_array_equal(qem.read_frames(), data.reshape(-1, 192, 192))


@pytest.mark.parametrize("variant", ["default", "shfl"])
def test_kernel_2_rounds_of_more_than_32_words(tmp_path, simt_dir, variant):
    """Uniform u8 values below 64: ~6 bits a pixel, so a 128-pixel round takes ~48 words
    and ``QEM2_SHFL`` takes its fallback path (words read at the word) in most rounds."""
    rng = np.random.default_rng(11)
    data = rng.integers(0, 64, (2, 32, 16, 32)).astype(np.uint8)
    path = write(tmp_path, data, 8, block_frames=32)
    with QemFile(path) as qem:
        index = qem.block_index
        rans = index["mode"] == fmt.MODE_RANS
        assert rans.any()
        rounds = index["n_frames"][rans].astype(np.int64) * (8 * 32 // 128)
        assert index["n_words"][rans].sum() > 40 * rounds.sum()  # words a round
        expected = qem.read_frames()
        out = np.full((qem.n_frame_blocks * qem.block_frames, 16, 32), 0xAB, np.uint8)
        status = Emulated2(simt_dir, qem, 0, VARIANTS[variant]).run(qem.buffer, out=out)
        assert not status.any()
        np.testing.assert_array_equal(out[: qem.n_frames], expected)
