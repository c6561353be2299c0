"""Format 2.0 ``.qem`` files (per-pixel symbols in row bands) on the GPU: dense loads,
encoded products and corruption, against the CPU decoder and numpy references."""

from __future__ import annotations

import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy (not installed here)")

from quantem.stem4d import io  # noqa: E402
from quantem.stem4d.acquisition import Acquisition  # noqa: E402
from quantem.stem4d.errors import QemFormatError  # noqa: E402
from quantem.stem4d.io.qem.reader import QemFile  # noqa: E402
from quantem.stem4d.io.qem.writer import save_qem  # noqa: E402


def synthetic_counts(rng, scan, det, dtype, lam=0.8):
    data = rng.poisson(lam, (*scan, *det)).astype(np.int64)
    rr, cc = np.mgrid[: det[0], : det[1]]
    disk = (rr - det[0] / 2) ** 2 + (cc - det[1] / 2) ** 2 < (min(det) / 5) ** 2
    data[..., disk] += rng.poisson(
        30 if np.dtype(dtype).itemsize == 1 else 300, data[..., disk].shape
    )
    data[0, 0, 0, 0] = np.iinfo(dtype).max
    return np.minimum(data, np.iinfo(dtype).max).astype(dtype)


def write_qem2(tmp_path, data, name="b.qem", mask=None, **kwargs):
    meta = {"pixel_mask": mask if mask is not None else np.zeros(data.shape[2:], np.uint32)}
    path = tmp_path / name
    save_qem(Acquisition(data, meta, meta["pixel_mask"] == 0, "cpu"), path, version=2, **kwargs)
    return path


# (scan, detector, dtype, band rows, frames a block). Entries of 4 frames of a 57-pixel band
# are smaller raw than the 512 bytes of states, so that case takes 16 frames a block (RANS
# entries) with a last block of one frame (RAW entries).
CASES = [
    ((6, 7), (32, 48), np.uint8, 5, 4),
    ((5, 5), (64, 64), np.uint16, 16, 4),
    ((3, 11), (17, 19), np.uint16, 3, 16),  # det_c % 4 != 0: scalar stores; partial last band
    ((4, 4), (24, 24), np.uint32, 24, 4),  # one band
    ((4, 6), (192, 192), np.uint16, None, 4),  # the ARINA frame, default bands (fatbin path)
]


@pytest.mark.parametrize("scan,det,dtype,band_rows,block_frames", CASES)
def test_dense_load_2_matches_cpu(tmp_path, scan, det, dtype, band_rows, block_frames):
    rng = np.random.default_rng([21, *scan, *det])
    data = synthetic_counts(rng, scan, det, dtype)
    path = write_qem2(tmp_path, data, band_rows=band_rows, block_frames=block_frames)
    with QemFile(path) as qem:
        modes = np.bincount(qem.block_index["mode"].astype(np.int64), minlength=3)
        assert qem.version_2 and modes[2] > 0, f"modes (zero, raw, rans) {modes.tolist()}"
    cpu = io.load(path, apply_mask=False)
    np.testing.assert_array_equal(cpu.data, data)
    with io.load(path, backend="cuda", apply_mask=False) as gpu:
        np.testing.assert_array_equal(gpu.data.get(), data)
    region = (1, scan[0], 1, scan[1])
    cpu = io.load(path, scan_region=region, apply_mask=False)
    with io.load(path, backend="cuda", scan_region=region, apply_mask=False) as gpu:
        np.testing.assert_array_equal(gpu.data.get(), cpu.data)


@pytest.mark.parametrize("scan,det,dtype,band_rows,block_frames", CASES)
def test_encoded_2_products_match_exact_reference(
    tmp_path, scan, det, dtype, band_rows, block_frames
):
    rng = np.random.default_rng([22, *scan, *det])
    data = synthetic_counts(rng, scan, det, dtype)
    # one frame fewer a block than the dense test: other partial last blocks
    path = write_qem2(tmp_path, data, band_rows=band_rows, block_frames=block_frames - 1)
    with QemFile(path) as qem:
        modes = np.bincount(qem.block_index["mode"].astype(np.int64), minlength=3)
        assert modes[2] > 0, f"modes (zero, raw, rans) {modes.tolist()}"
    frames = data.reshape(-1, *det).astype(np.uint64)
    rr, cc = np.mgrid[: det[0], : det[1]]
    disk = (rr - det[0] / 2) ** 2 + (cc - det[1] / 2) ** 2 <= (det[0] / 8) ** 2
    with io.load(path, backend="cuda", representation="encoded") as acq:
        enc = acq.encoded
        for mask in (rng.random(det) < 0.1, np.ones(det, bool), disk, np.zeros(det, bool)):
            rows, cols = np.nonzero(mask)
            values = frames[:, rows, cols]
            total = values.sum(axis=1, dtype=np.uint64).reshape(scan)
            np.testing.assert_array_equal(enc.masked_sum(mask).get(), total)
            t, r, c = enc.moments(mask)
            np.testing.assert_array_equal(t.get(), total)
            np.testing.assert_array_equal(
                r.get(), (values * rows.astype(np.uint64)).sum(axis=1).reshape(scan)
            )
            np.testing.assert_array_equal(
                c.get(), (values * cols.astype(np.uint64)).sum(axis=1).reshape(scan)
            )
        np.testing.assert_array_equal(enc.sum_frames().get(), frames.sum(axis=0))
        n = frames.shape[0]
        for i in (0, n // 2, n - 1, -1):
            np.testing.assert_array_equal(enc.frame(i).get(), data.reshape(-1, *det)[i])


def test_nvrtc_and_fatbin_decode_alike(tmp_path, monkeypatch):
    from quantem.stem4d.cuda import module_loader
    from quantem.stem4d.cuda.rans_decode import DeviceBlockTable, QemBlockDecoder

    rng = np.random.default_rng(23)
    data = synthetic_counts(rng, (3, 4), (192, 192), np.uint16)
    path = write_qem2(tmp_path, data, block_frames=4)
    outs = []
    with QemFile(path) as qem:
        buffer = cupy.asarray(qem.buffer)
        index = qem.block_index
        table = DeviceBlockTable.from_index(
            index, index["offset"].astype(np.int64), index["frame_start"].astype(np.int64)
        )
        for disable, taken in (("0", "fatbin"), ("1", "nvrtc")):
            monkeypatch.setenv(module_loader.DISABLE_AOT_ENV, disable)
            module_loader.forget_modules()
            decoder = QemBlockDecoder(qem)
            paths = {r["path"] for r in module_loader.kernel_provenance()
                     if r["file"] == "rans_decode.cu"}  # fmt: skip
            assert paths == {taken}
            out = cupy.zeros((qem.n_frames, 192, 192), dtype=cupy.uint16)
            status = cupy.zeros(qem.n_blocks, dtype=cupy.int32)
            decoder.decode_dense(buffer, table, out, status)
            assert int(status.max()) == 0
            outs.append(out.get())
    np.testing.assert_array_equal(outs[0], data.reshape(-1, 192, 192))
    np.testing.assert_array_equal(outs[1], outs[0])


def rans_entry(path):
    with QemFile(path) as q:
        index = q.block_index.copy()
    k = int(np.flatnonzero(index["mode"] == 2)[0])
    return int(index["offset"][k]), int(index["n_words"][k]), k


@pytest.mark.parametrize("representation", ["dense", "encoded"])
def test_corrupt_2_payload_raises_naming_block(tmp_path, representation):
    rng = np.random.default_rng(24)
    data = synthetic_counts(rng, (6, 6), (32, 32), np.uint16)
    path = write_qem2(tmp_path, data, band_rows=8, block_frames=4)
    offset, n_words, block = rans_entry(path)
    raw = bytearray(path.read_bytes())
    raw[offset + 512 + n_words] ^= 0x5A  # a word in the middle of the stream
    path.write_bytes(bytes(raw))
    with pytest.raises(QemFormatError, match="checksum") as info:
        io.load(path, backend="cuda", representation=representation)
    assert info.value.fields.get("block") == block and str(path) in str(info.value)
    with pytest.raises(QemFormatError, match="block decode failed") as info:
        acq = io.load(path, backend="cuda", representation=representation, verify=False)
        if representation == "encoded":
            acq.encoded.masked_sum(np.ones((32, 32), bool))
    assert info.value.fields.get("block") == block and str(path) in str(info.value)
