"""GPU ``.qem`` loading (dense and encoded) against the CPU reader and numpy references."""

from __future__ import annotations

import gc

import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy (not installed here)")

from quantem.stem4d import io  # noqa: E402
from quantem.stem4d.acquisition import Acquisition  # noqa: E402
from quantem.stem4d.errors import QemFormatError  # noqa: E402
from quantem.stem4d.io.qem.writer import save_qem  # noqa: E402


def synthetic_counts(rng, scan, det, dtype, lam=0.8, hot=()):
    data = rng.poisson(lam, (*scan, *det)).astype(np.int64)
    # a bright disk (values above 255 force escapes in uint16 data)
    rr, cc = np.mgrid[: det[0], : det[1]]
    disk = (rr - det[0] / 2) ** 2 + (cc - det[1] / 2) ** 2 < (min(det) / 5) ** 2
    data[..., disk] += rng.poisson(
        30 if np.dtype(dtype).itemsize == 1 else 300, data[..., disk].shape
    )
    info = np.iinfo(dtype)
    data = np.minimum(data, info.max)
    for r, c in hot:
        data[..., r, c] = info.max
    return data.astype(dtype)


def write_qem(tmp_path, data, name="a.qem", mask=None, **kwargs):
    meta = {"pixel_mask": mask if mask is not None else np.zeros(data.shape[2:], np.uint32)}
    validity = meta["pixel_mask"] == 0
    path = tmp_path / name
    save_qem(Acquisition(data, meta, validity, "cpu"), path, **kwargs)
    return path


CASES = [
    ((6, 7), (32, 48), np.uint8),
    ((5, 5), (64, 64), np.uint16),
    ((3, 11), (17, 19), np.uint16),  # P not a multiple of 8: partial last group
    ((4, 4), (24, 24), np.uint32),
    ((2, 3), (5, 3), np.uint16),  # tiny frames (fewer than 32 groups)
]


@pytest.mark.parametrize("scan,det,dtype", CASES)
def test_dense_load_matches_cpu(tmp_path, scan, det, dtype):
    rng = np.random.default_rng([9, *scan, *det])
    mask = np.zeros(det, np.uint32)
    mask[1, 2] = 1
    data = synthetic_counts(rng, scan, det, dtype, hot=[(1, 2)])
    path = write_qem(tmp_path, data, mask=mask, block_frames=4)
    cpu = io.load(path)
    with io.load(path, backend="cuda") as gpu:
        assert gpu.backend == "cuda" and isinstance(gpu.data, cupy.ndarray)
        np.testing.assert_array_equal(gpu.data.get(), cpu.data)
        np.testing.assert_array_equal(gpu.validity, cpu.validity)
        assert gpu.data.dtype == cpu.data.dtype
    data[..., 1, 2] = 0  # masked by default
    np.testing.assert_array_equal(cpu.data, data.astype(cpu.data.dtype))
    with io.load(path, backend="cuda", apply_mask=False) as raw:
        assert raw.data.get()[..., 1, 2].any()  # the hot pixel's stored counts


def test_scan_region_and_options_match_cpu(tmp_path):
    rng = np.random.default_rng(4)
    mask = np.zeros((40, 36), np.uint32)
    mask[3, 4] = 2
    data = synthetic_counts(rng, (9, 10), (40, 36), np.uint16, hot=[(3, 4)])
    path = write_qem(tmp_path, data, mask=mask, block_frames=7)
    for opts in (
        {"scan_region": (2, 7, 3, 9)},
        {"scan_region": (0, 1, 9, 10)},
        {"apply_mask": True},
        {"dtype": "u8"},
        {"det_bin": 3},
        {"apply_mask": True, "dtype": "u8", "det_bin": 2, "scan_region": (1, 8, 0, 10)},
    ):
        cpu = io.load(path, **opts)
        with io.load(path, backend="cuda", **opts) as gpu:
            np.testing.assert_array_equal(gpu.data.get(), cpu.data, err_msg=str(opts))
            np.testing.assert_array_equal(gpu.validity, cpu.validity)
            for key in ("clipped_pixels", "scan_region", "detector_shape"):
                if key in cpu.metadata:
                    assert list(np.ravel(gpu.metadata[key])) == list(np.ravel(cpu.metadata[key])), (
                        key
                    )


@pytest.mark.parametrize("scan,det,dtype", CASES)
def test_encoded_products_match_exact_reference(tmp_path, scan, det, dtype):
    rng = np.random.default_rng([10, *scan, *det])
    data = synthetic_counts(rng, scan, det, dtype)
    path = write_qem(tmp_path, data, block_frames=3)
    frames = data.reshape(-1, *det).astype(np.uint64)
    with io.load(path, backend="cuda", representation="encoded") as acq:
        assert acq.data is None and acq.representation == "encoded"
        enc = acq.encoded
        assert enc.nbytes < data.nbytes * 2
        for density in (0.1, 1.0):
            mask = rng.random(det) < density
            rows, cols = np.nonzero(mask)
            values = frames[:, rows, cols]
            total = values.sum(axis=1, dtype=np.uint64).reshape(scan)
            got = enc.masked_sum(mask)
            assert got.dtype == np.uint64
            np.testing.assert_array_equal(got.get(), total)
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


def test_detector_session_on_encoded_equals_dense(tmp_path):
    from quantem.stem4d import detector

    rng = np.random.default_rng(12)
    data = synthetic_counts(rng, (8, 9), (48, 48), np.uint16)
    path = write_qem(tmp_path, data)
    cpu = io.load(path)
    with (
        io.load(path, backend="cuda", representation="encoded") as enc,
        io.load(path, backend="cuda") as dense,
    ):
        sessions = [detector.prepare(a) for a in (cpu, enc, dense)]
        mask = np.zeros((48, 48), bool)
        mask[10:30, 5:40] = True
        ref = sessions[0].masked_sum_exact(mask)
        for s in sessions[1:]:
            np.testing.assert_array_equal(s.masked_sum_exact(mask), ref)
            np.testing.assert_array_equal(s.mean_dp_exact(), sessions[0].mean_dp_exact())
            np.testing.assert_array_equal(
                np.asarray(s.frame(5).get()), cpu.data.reshape(-1, 48, 48)[5]
            )


def payload_block(path):
    from quantem.stem4d.io.qem.reader import QemFile

    with QemFile(path) as q:
        index = q.block_index.copy()
    k = int(np.flatnonzero(index["mode"] == 2)[0])
    return int(index["offset"][k]), int(index["length"][k]), int(index["n_words"][k]), k


@pytest.mark.parametrize("representation", ["dense", "encoded"])
def test_corrupt_payload_raises_naming_block(tmp_path, representation):
    rng = np.random.default_rng(13)
    data = synthetic_counts(rng, (6, 6), (32, 32), np.uint16)
    path = write_qem(tmp_path, data, block_frames=4)
    offset, _length, n_words, block = payload_block(path)
    raw = bytearray(path.read_bytes())
    raw[offset + 128 + n_words] ^= 0x5A  # a word in the middle of the stream
    path.write_bytes(bytes(raw))
    with pytest.raises(QemFormatError, match="checksum") as info:
        io.load(path, backend="cuda", representation=representation)
    assert info.value.fields.get("block") == block
    # Without checksums the decoder's own checks must still refuse the block.
    with pytest.raises(QemFormatError, match="block decode failed") as info:
        acq = io.load(path, backend="cuda", representation=representation, verify=False)
        if representation == "encoded":
            acq.encoded.masked_sum(np.ones((32, 32), bool))
    assert info.value.fields.get("block") == block


def test_lane_state_corruption_is_caught_without_checksums(tmp_path):
    rng = np.random.default_rng(14)
    data = synthetic_counts(rng, (4, 4), (32, 32), np.uint8)
    path = write_qem(tmp_path, data, block_frames=4)
    offset, _, _, _block = payload_block(path)
    raw = bytearray(path.read_bytes())
    raw[offset + 2] ^= 0x01  # initial state of lane 0
    path.write_bytes(bytes(raw))
    with pytest.raises(QemFormatError, match="block decode failed"):
        io.load(path, backend="cuda", verify=False)


def test_memory_returns_after_close_over_20_cycles(tmp_path):
    rng = np.random.default_rng(15)
    data = synthetic_counts(rng, (10, 10), (64, 64), np.uint16)
    path = write_qem(tmp_path, data)
    # Earlier tests' garbage (pytest keeps their exceptions) must not blur the baseline.
    gc.collect()
    pool = cupy.get_default_memory_pool()
    for representation in ("dense", "encoded"):
        io.load(path, backend="cuda", representation=representation).close()  # warm-up
        baseline_used = pool.used_bytes()
        baseline_total = pool.total_bytes()
        for _ in range(20):
            acq = io.load(path, backend="cuda", representation=representation)
            assert pool.used_bytes() > baseline_used
            acq.close()
            assert pool.used_bytes() == baseline_used
        assert pool.total_bytes() <= baseline_total + (64 << 20)


def test_to_torch_shares_memory(tmp_path):
    torch = pytest.importorskip("torch")
    from quantem.stem4d.cuda import to_torch

    rng = np.random.default_rng(16)
    data = synthetic_counts(rng, (3, 3), (16, 16), np.uint16)
    path = write_qem(tmp_path, data)
    with io.load(path, backend="cuda") as acq:
        tensor = to_torch(acq)
        assert tensor.is_cuda and tuple(tensor.shape) == data.shape
        assert tensor.data_ptr() == acq.data.data.ptr
        assert torch.equal(tensor.to(torch.int64).cpu(), torch.from_numpy(data.astype(np.int64)))


def test_release_cached_memory_returns_pool_blocks(tmp_path):
    from quantem.stem4d.cuda import pinned, registered_files, release_cached_memory

    rng = np.random.default_rng(17)
    # 8 MiB decoded: more than the slack below, so the load must cache blocks of its own.
    path = write_qem(tmp_path, synthetic_counts(rng, (32, 32), (64, 64), np.uint16))
    pool = cupy.get_default_memory_pool()
    # Arrays that earlier tests of this process keep alive may sit in pool chunks with free
    # space beside them, which no release can return; that slack is the baseline.
    release_cached_memory()
    slack = pool.total_bytes() - pool.used_bytes()
    # Registered staging (the default, from a file's first load) needs no pinned buffer:
    # with the registration cache off the load stages by pread through pinned ones.
    cache = registered_files.registered_files()
    budget = cache.budget
    cache.set_budget(0)
    try:
        with io.load(path, backend="cuda") as acq:
            assert acq.metadata["load_stats"]["staging"] == "pread"
    finally:
        cache.set_budget(budget)
    assert pinned.cached_bytes() > 0
    assert pool.total_bytes() - pool.used_bytes() > slack  # the load left blocks cached
    release_cached_memory()
    assert pinned.cached_bytes() == 0
    assert pool.total_bytes() - pool.used_bytes() <= slack


def test_failed_load_releases_its_device_memory(tmp_path):
    rng = np.random.default_rng(18)
    data = synthetic_counts(rng, (8, 8), (64, 64), np.uint16)
    path = write_qem(tmp_path, data, block_frames=4)
    offset, _length, n_words, _block = payload_block(path)
    raw = bytearray(path.read_bytes())
    raw[offset + 128 + n_words] ^= 0x5A
    path.write_bytes(bytes(raw))
    gc.collect()
    gc.disable()  # the memory must come back without the cyclic collector
    try:
        pool = cupy.get_default_memory_pool()
        before = pool.used_bytes()
        for representation in ("dense", "encoded"):
            with pytest.raises(QemFormatError) as info:
                io.load(path, backend="cuda", representation=representation)
            assert pool.used_bytes() == before, representation
            del info
    finally:
        gc.enable()
