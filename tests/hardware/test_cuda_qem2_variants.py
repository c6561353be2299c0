"""Tuning variants of the 2.0 decoder (``rans_decode.cu``, "Tuning": words by shuffle,
other unroll and prefetch settings) on the GPU: dense frames equal the CPU decoder's, fused
moments numpy's, and damaged entries get the shipped kernel's status
(``tests/test_qem2_emulated.py`` holds both kernels' statuses to the CPU decoder's)."""

from __future__ import annotations

import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy (not installed here)")

from test_cuda_qem2 import CASES, synthetic_counts, write_qem2  # noqa: E402

from quantem.stem4d.io.qem.reader import QemFile  # noqa: E402

#: the kernel's unshipped variants (issue 37 retires them with this test)
VARIANTS = {
    "shfl": {"QEM2_SHFL": 1, "QEM2_ONLY": 1},
    "pe1": {"QEM2_PREFETCH_EVERY": 1, "QEM2_ONLY": 1},
    "shfl_u4": {"QEM2_SHFL": 1, "QEM2_UNROLL": 4, "QEM2_ONLY": 1},
}


def table_of(qem):
    from quantem.stem4d.cuda.rans_decode import DeviceBlockTable

    index = qem.block_index
    return DeviceBlockTable.from_index(
        index, index["offset"].astype(np.int64), index["frame_start"].astype(np.int64)
    )


def dense(decoder, qem, buffer, table):
    n_out = qem.n_frame_blocks * qem.block_frames
    stored = {1: cupy.uint8, 2: cupy.uint16, 4: cupy.uint32}[decoder.itemsize]
    out = cupy.zeros((n_out, *qem.detector_shape), dtype=stored)
    status = cupy.zeros(len(table), dtype=cupy.int32)
    decoder.decode_dense(buffer, table, out, status)
    return out[: qem.n_frames].get(), status.get()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("scan,det,dtype,band_rows,block_frames", CASES)
def test_variant_decodes_like_cpu(tmp_path, variant, scan, det, dtype, band_rows, block_frames):
    from quantem.stem4d.cuda.rans_decode import QemBlockDecoder

    rng = np.random.default_rng([31, *scan, *det])
    data = synthetic_counts(rng, scan, det, dtype)
    path = write_qem2(tmp_path, data, band_rows=band_rows, block_frames=block_frames)
    with QemFile(path) as qem:
        assert (qem.block_index["mode"] == 2).any()
        decoder = QemBlockDecoder(qem, extra_defines=VARIANTS[variant])
        buffer = cupy.asarray(qem.buffer)
        table = table_of(qem)
        out, status = dense(decoder, qem, buffer, table)
        assert not status.any()
        np.testing.assert_array_equal(out, data.reshape(-1, *det))
        rr, cc = np.mgrid[: det[0], : det[1]]
        mask = (rr - det[0] / 2) ** 2 + (cc - det[1] / 3) ** 2 <= (det[0] / 4) ** 2
        quad_map, _ = decoder.quad_mask_map(mask)
        n_out = qem.n_frame_blocks * qem.block_frames
        sums = tuple(cupy.zeros(n_out, dtype=cupy.uint64) for _ in range(3))
        status = cupy.zeros(len(table), dtype=cupy.int32)
        decoder.reduce_moments(buffer, table, cupy.asarray(quad_map), sums, status)
        assert not status.get().any()
        rows, cols = np.nonzero(mask)
        values = data.reshape(-1, *det)[:, rows, cols].astype(np.uint64)
        n = qem.n_frames
        np.testing.assert_array_equal(sums[0].get()[:n], values.sum(axis=1))
        np.testing.assert_array_equal(sums[1].get()[:n], (values * rows).sum(axis=1))
        np.testing.assert_array_equal(sums[2].get()[:n], (values * cols).sum(axis=1))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_reports_the_shipped_kernels_status(tmp_path, variant):
    from quantem.stem4d.cuda.rans_decode import QemBlockDecoder

    rng = np.random.default_rng(32)
    data = synthetic_counts(rng, (4, 6), (64, 64), np.uint16)
    path = write_qem2(tmp_path, data, band_rows=16, block_frames=8)
    with QemFile(path) as qem:
        shipped = QemBlockDecoder(qem)
        other = QemBlockDecoder(qem, extra_defines=VARIANTS[variant])
        index = qem.block_index
        rans = np.flatnonzero(index["mode"] == 2)
        pristine = np.asarray(qem.buffer)
        table = table_of(qem)
        refused = 0
        for trial in range(24):
            k = int(rans[trial % rans.size])
            buffer = pristine.copy()
            at = int(index["offset"][k]) + int(rng.integers(0, int(index["length"][k])))
            buffer[at] ^= np.uint8(1 << int(rng.integers(0, 8)))
            device = cupy.asarray(buffer)
            out_a, status_a = dense(shipped, qem, device, table)
            out_b, status_b = dense(other, qem, device, table)
            np.testing.assert_array_equal(status_b, status_a)
            ok = status_a == 0
            frames_ok = np.repeat(ok.reshape(-1, qem.n_bands).all(axis=1), qem.block_frames)
            frames_ok = frames_ok[: qem.n_frames]
            np.testing.assert_array_equal(out_b[frames_ok], out_a[frames_ok])
            refused += int(status_a[k] != 0)
        assert refused > 0
