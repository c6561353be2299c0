"""Both rANS kernels of ``rans_decode.cu`` (v1, v2) against the CPU codec, block by block.

The whole file is uploaded and decoded in place (block offsets are absolute), so every
test sees exactly the bytes the CPU reader decodes: dense frames equal the CPU decoder's
and the source counts, fused moments equal numpy's, and a corrupted block gives a nonzero
status on both kernels (the same code) exactly when the CPU decoder refuses it, while the
other blocks, including those a warp decodes after the failed one, stay exact.
"""

from __future__ import annotations

import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy (not installed here)")

from quantem.stem4d.acquisition import Acquisition  # noqa: E402
from quantem.stem4d.cuda.rans_decode import (  # noqa: E402
    KERNEL_FUNCTIONS,
    DeviceBlockTable,
    QemBlockDecoder,
    pack_mask_bits,
)
from quantem.stem4d.errors import QemFormatError  # noqa: E402
from quantem.stem4d.io.qem.reader import QemFile  # noqa: E402
from quantem.stem4d.io.qem.writer import save_qem  # noqa: E402

KERNELS = sorted(KERNEL_FUNCTIONS)


def counts(rng, scan, det, dtype, lam=0.8):
    data = rng.poisson(lam, (*scan, *det)).astype(np.int64)
    rr, cc = np.mgrid[: det[0], : det[1]]
    disk = (rr - det[0] / 2) ** 2 + (cc - det[1] / 2) ** 2 < (min(det) / 5) ** 2
    big = 30 if np.dtype(dtype).itemsize == 1 else 300  # escapes in 2- and 4-byte data
    data[..., disk] += rng.poisson(big, data[..., disk].shape)
    data[..., 0, 0] = np.iinfo(dtype).max
    return np.minimum(data, np.iinfo(dtype).max).astype(dtype)


def write(tmp_path, data, name="k.qem", **kwargs):
    meta = {"pixel_mask": np.zeros(data.shape[2:], np.uint32)}
    path = tmp_path / name
    save_qem(Acquisition(data, meta, np.ones(data.shape[2:], bool), "cpu"), path, **kwargs)
    return path


class Resident:
    """A whole ``.qem`` file on the GPU with a block table of absolute offsets."""

    def __init__(self, qem: QemFile, buffer: np.ndarray):
        index = qem.block_index
        self.payload = cupy.asarray(buffer)
        self.table = DeviceBlockTable.from_index(index, index["offset"], index["frame_start"])
        self.n_blocks = int(qem.n_blocks)
        self.n_frames = int(qem.n_frames)
        self.det = tuple(int(v) for v in qem.detector_shape)
        self.dtype = np.dtype(qem.dtype)

    def dense(self, decoder):
        out = cupy.full((self.n_frames, *self.det), 0xAB, dtype=self.dtype)
        status = cupy.zeros(self.n_blocks, dtype=cupy.int32)
        decoder.decode_dense(self.payload, self.table, out, status)
        return out.get(), status.get()

    def moments(self, decoder, mask):
        sums = tuple(cupy.zeros(self.n_frames, dtype=cupy.uint64) for _ in range(3))
        status = cupy.zeros(self.n_blocks, dtype=cupy.int32)
        bits = cupy.asarray(pack_mask_bits(mask, decoder.n_groups))
        decoder.reduce_moments(self.payload, self.table, bits, sums, status)
        return tuple(s.get() for s in sums), status.get()


def one_cta(decoder):
    """Force a grid of one thread block, so each warp decodes several blocks in turn."""
    decoder.ctas = {reduce: 1 for reduce in decoder.ctas}
    return decoder


CASES = [
    ((4, 40), (192, 192), np.uint16, {}),  # the ARINA frame (ahead-of-time fatbins)
    ((4, 10), (96, 96), np.uint16, {"n_classes": 1}),
    ((6, 7), (32, 48), np.uint8, {"n_classes": 3}),
    ((3, 11), (17, 19), np.uint16, {}),  # P % 8 != 0: partial last group, scalar stores
    ((4, 4), (24, 24), np.uint32, {}),
    # Fewer groups than lanes; 6 frames a block (3 would be stored raw: rANS does not pay
    # on 45 pixels, and the test needs rANS blocks).
    ((4, 3), (5, 3), np.uint16, {"block_frames": 6}),
    ((3, 5), (40, 36), np.uint16, {"n_classes": 2}),
]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("scan,det,dtype,options", CASES)
def test_kernel_matches_cpu_decoder(tmp_path, kernel, scan, det, dtype, options):
    rng = np.random.default_rng([21, *scan, *det])
    data = counts(rng, scan, det, dtype)
    path = write(tmp_path, data, **{"block_frames": 3, **options})
    with QemFile(path) as qem:
        assert (qem.block_index["mode"] == 2).any()
        cpu = qem.decode_blocks(np.arange(qem.n_blocks))
        resident = Resident(qem, np.array(qem.buffer))
        for decoder in (QemBlockDecoder(qem, kernel), one_cta(QemBlockDecoder(qem, kernel))):
            assert decoder.kernel == kernel
            out, status = resident.dense(decoder)
            assert not status.any()
            np.testing.assert_array_equal(out, cpu)
            np.testing.assert_array_equal(out.reshape(data.shape), data)
            frames = data.reshape(-1, *det).astype(np.uint64)
            for density in (0.05, 0.5, 1.0):
                mask = rng.random(det) < density
                rows, cols = np.nonzero(mask)
                values = frames[:, rows, cols]
                (t, r, c), status = resident.moments(decoder, mask)
                assert not status.any()
                np.testing.assert_array_equal(t, values.sum(axis=1))
                np.testing.assert_array_equal(r, (values * rows.astype(np.uint64)).sum(axis=1))
                np.testing.assert_array_equal(c, (values * cols.astype(np.uint64)).sum(axis=1))


@pytest.mark.parametrize("det,dtype", [((32, 32), np.uint16), ((17, 19), np.uint8)])
def test_corruption_gives_the_same_status_on_both_kernels(tmp_path, det, dtype):
    rng = np.random.default_rng([22, *det])
    data = counts(rng, (8, 10), det, dtype)
    path = write(tmp_path, data, block_frames=4)
    with QemFile(path) as qem:
        clean = np.array(qem.buffer)
        clean_frames = qem.decode_blocks(np.arange(qem.n_blocks))
        index = qem.block_index.copy()
        decoders = {k: one_cta(QemBlockDecoder(qem, k)) for k in KERNELS}
        n_blocks = int(qem.n_blocks)
    rans_blocks = np.flatnonzero(index["mode"] == 2)
    bf = int(index["n_frames"][0])
    refused = 0
    for trial in range(32):
        block = int(rans_blocks[trial % rans_blocks.size])
        start, length = int(index["offset"][block]), int(index["length"][block])
        buffer = clean.copy()
        buffer[start + int(rng.integers(0, length))] ^= np.uint8(1 << int(rng.integers(0, 8)))
        bad = tmp_path / f"bad{trial}.qem"
        bad.write_bytes(buffer.tobytes())
        with QemFile(bad, verify=False) as qem:
            try:
                expected = qem.decode_blocks(np.arange(n_blocks))
                cpu_refuses = False
            except QemFormatError as exc:
                assert exc.fields.get("block") == block
                cpu_refuses = True
                expected = clean_frames
            resident = Resident(qem, buffer)
        statuses = {}
        for kernel, decoder in decoders.items():
            out, status = resident.dense(decoder)
            statuses[kernel] = status
            assert np.flatnonzero(status).tolist() == ([block] if cpu_refuses else []), kernel
            for other in range(n_blocks):
                if other != block or not cpu_refuses:
                    rows = slice(other * bf, (other + 1) * bf)
                    np.testing.assert_array_equal(out[rows], expected[rows], err_msg=kernel)
            _, status = resident.moments(decoder, np.ones(det, bool))
            np.testing.assert_array_equal(status, statuses[kernel])
        np.testing.assert_array_equal(statuses["v1"], statuses["v2"])
        refused += cpu_refuses
    assert refused >= 8  # most flips are caught by the format's own checks
