"""Exact round trips through .qem, random access, determinism, stored dtype, atomic writes.

Expected arrays are the inputs themselves; the independent pure-Python reference
decoder (tests/_qem_reference.py, written from the spec) cross-checks the numba decoder
on small files.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from _qem_reference import read_reference

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.errors import VerificationError
from quantem.stem4d.io.qem import format as fmt
from quantem.stem4d.io.qem.reader import QemFile, load_qem
from quantem.stem4d.io.qem.writer import save_qem


def make_acquisition(data: np.ndarray, mask: np.ndarray | None = None, **meta) -> Acquisition:
    det = data.shape[2:]
    if mask is None:
        mask = np.zeros(det, dtype=np.uint32)
    metadata = {"pixel_mask": mask, **meta}
    return Acquisition(data, metadata, mask == 0, "cpu")


def counts(rng, shape, dose, dtype="uint16", sentinel=True):
    data = rng.poisson(dose, size=shape).astype(dtype)
    if sentinel:
        data[..., 1, 2] = np.iinfo(dtype).max
    return data


def roundtrip(tmp_path, data, name="a.qem", reference=True, **options):
    path = save_qem(make_acquisition(data), tmp_path / name, verify=True, **options)
    acq = load_qem(path)
    np.testing.assert_array_equal(acq.data, data)
    if reference:
        ref = read_reference(path.read_bytes())
        np.testing.assert_array_equal(ref["frames"].reshape(data.shape), data)
    return path, acq


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32"])
@pytest.mark.parametrize("dose", [0.02, 0.7, 30.0])
def test_roundtrip_dtypes_and_doses(tmp_path, dtype, dose):
    rng = np.random.default_rng([np.dtype(dtype).itemsize, int(dose * 100)])
    data = counts(rng, (3, 5, 13, 17), dose, dtype)
    _, acq = roundtrip(tmp_path, data, block_frames=4)
    assert acq.data.dtype == np.dtype(dtype)  # sentinel = dtype max keeps the dtype


def test_stored_dtype_is_the_narrowest(tmp_path):
    rng = np.random.default_rng(1)
    data = rng.poisson(2.0, size=(2, 3, 16, 16)).astype(np.uint32)
    data[0, 0, 0, 0] = 255
    path, acq = roundtrip(tmp_path, data)
    assert acq.data.dtype == np.uint8
    assert acq.metadata["source_dtype"] == "uint32"
    data[0, 0, 0, 1] = 256
    path, acq = roundtrip(tmp_path, data, name="b.qem")
    assert acq.data.dtype == np.uint16
    kept = save_qem(make_acquisition(data), tmp_path / "c.qem", keep_source_dtype=True)
    assert load_qem(kept).data.dtype == np.uint32
    np.testing.assert_array_equal(load_qem(kept).data, data)
    wide = load_qem(path, dtype="source").data
    assert wide.dtype == np.uint32
    np.testing.assert_array_equal(wide, data)


@pytest.mark.parametrize(
    "shape",
    [(1, 1, 1, 1), (1, 1, 1, 7), (2, 3, 3, 3), (1, 5, 1, 9), (4, 4, 8, 8), (3, 2, 31, 33)],
)
def test_roundtrip_shapes(tmp_path, shape):
    rng = np.random.default_rng(sum(shape))
    data = counts(rng, shape, 0.5, sentinel=False)
    data.reshape(-1)[::7] = 300  # escapes in every shape
    roundtrip(tmp_path, data, block_frames=3)


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32"])
def test_all_zero_and_all_max(tmp_path, dtype):
    zero = np.zeros((3, 4, 9, 10), dtype=dtype)
    path, acq = roundtrip(tmp_path, zero, name="z.qem", block_frames=5)
    with QemFile(path) as qem:
        assert set(qem.block_index["mode"].tolist()) == {fmt.MODE_ZERO}
        assert qem.header.sections[fmt.SECTION_PAYLOAD].length == 0
    assert acq.data.dtype == np.uint8  # narrowest
    full = np.full((2, 3, 9, 10), np.iinfo(dtype).max, dtype=dtype)
    roundtrip(tmp_path, full, name="m.qem", block_frames=2)


def test_random_bytes_fall_back_to_raw_blocks(tmp_path):
    rng = np.random.default_rng(7)
    data = rng.integers(0, 2**32, size=(2, 2, 16, 16), dtype=np.uint64).astype(np.uint32)
    path, _ = roundtrip(tmp_path, data, block_frames=1)
    with QemFile(path) as qem:
        assert set(qem.block_index["mode"].tolist()) == {fmt.MODE_RAW}
    data8 = rng.integers(0, 256, size=(2, 2, 16, 16), dtype=np.uint8)
    roundtrip(tmp_path, data8, name="b.qem", block_frames=1)


def test_mixed_modes_and_realistic_pattern(tmp_path):
    rng = np.random.default_rng(3)
    yy, xx = np.mgrid[:24, :24]
    disk = ((yy - 12) ** 2 + (xx - 11) ** 2 < 30).astype(float)
    expected = 0.02 + 6.0 * disk
    data = rng.poisson(expected, size=(6, 6, 24, 24)).astype(np.uint16)
    data[..., 0, 5] = 65535
    data[1] = 0  # ZERO blocks
    data[2, 3] = rng.integers(0, 65535, size=(24, 24))  # a RAW block
    path, _ = roundtrip(tmp_path, data, block_frames=1)
    with QemFile(path) as qem:
        modes = set(qem.block_index["mode"].tolist())
        assert modes == {fmt.MODE_ZERO, fmt.MODE_RAW, fmt.MODE_RANS}
        assert qem.model.n_classes > 1  # the disk and the dark field differ


def test_random_access_equals_full_decode(tmp_path):
    rng = np.random.default_rng(11)
    data = counts(rng, (7, 9, 12, 10), 0.8)
    path = save_qem(make_acquisition(data), tmp_path / "r.qem", block_frames=5)
    flat = data.reshape(-1, 12, 10)
    with QemFile(path) as qem:
        for i in (0, 4, 5, 31, 62):
            np.testing.assert_array_equal(qem.frame(i), flat[i])
        np.testing.assert_array_equal(qem.read_frames(3, 41), flat[3:41])
        np.testing.assert_array_equal(qem.read_region((2, 5), (1, 8)), data[2:5, 1:8])
        assert qem.blocks_for_frames([0, 4, 5, 62]).tolist() == [0, 1, 12]
        with pytest.raises(IndexError):
            qem.frame(63)
    region = load_qem(path, scan_region=(1, 3, 4, 9))
    np.testing.assert_array_equal(region.data, data[1:3, 4:9])
    assert region.metadata["scan_shape"] == (2, 5)
    assert region.metadata["scan_region"] == [1, 3, 4, 9]
    sliced = load_qem(path, scan_region=(slice(0, 2), slice(None)))
    np.testing.assert_array_equal(sliced.data, data[0:2])
    with pytest.raises(ValueError):
        load_qem(path, scan_region=(0, 0, 0, 1))


def test_random_access_decodes_only_needed_blocks(tmp_path, monkeypatch):
    rng = np.random.default_rng(2)
    data = counts(rng, (4, 8, 8, 8), 0.5)
    path = save_qem(make_acquisition(data), tmp_path / "r.qem", block_frames=4)
    decoded: list[list[int]] = []
    with QemFile(path) as qem:
        original = qem.decode_blocks

        def spy(ids, out=None):
            decoded.append([int(i) for i in ids])
            return original(ids, out)

        monkeypatch.setattr(qem, "decode_blocks", spy)
        qem.frame(13)
        qem.read_region((1, 2), (0, 4))
    assert decoded == [[3], [2]]


def test_deterministic_bytes(tmp_path):
    rng = np.random.default_rng(5)
    data = counts(rng, (4, 4, 16, 16), 1.0)
    import numba

    a = save_qem(make_acquisition(data), tmp_path / "a.qem", block_frames=2)
    previous = numba.get_num_threads()
    numba.set_num_threads(1)  # the parallel encoder's output must not depend on threads
    try:
        b = save_qem(make_acquisition(data.copy()), tmp_path / "b.qem", block_frames=2)
    finally:
        numba.set_num_threads(previous)
    assert a.read_bytes() == b.read_bytes()
    with QemFile(a) as qa, QemFile(b) as qb:
        assert qa.header_document() == qb.header_document()


def test_metadata_and_mask(tmp_path):
    rng = np.random.default_rng(6)
    data = counts(rng, (2, 2, 8, 8), 1.0)
    mask = np.zeros((8, 8), dtype=np.uint32)
    mask[1, 2] = 2
    mask[7, 7] = 1
    acq = make_acquisition(data, mask, count_time=0.001, x_pixel_size=5.5e-5, description="arina")
    path = save_qem(acq, tmp_path / "m.qem")
    loaded = load_qem(path)
    np.testing.assert_array_equal(loaded.metadata["pixel_mask"], mask)
    np.testing.assert_array_equal(loaded.validity, mask == 0)
    assert loaded.metadata["count_time"] == 0.001
    assert loaded.metadata["x_pixel_size"] == 5.5e-5
    assert loaded.metadata["description"] == "arina"
    assert loaded.metadata["scan_shape"] == (2, 2)
    assert loaded.metadata["detector_shape"] == (8, 8)
    assert loaded.metadata["n_frames"] == 4
    with QemFile(path) as qem:
        assert qem.metadata["calibration"] == {"count_time": 0.001, "x_pixel_size": 5.5e-5}
        assert qem.metadata["pixel_mask"] == {
            "dtype": "uint32",
            "encoding": "section",
            "n_masked": 2,
        }


def test_source_hashes_and_requote(tmp_path):
    import hashlib

    rng = np.random.default_rng(8)
    data = counts(rng, (2, 3, 8, 8), 1.0)
    first = save_qem(make_acquisition(data), tmp_path / "first.qem")
    second = save_qem(first, tmp_path / "second.qem", source_hashes=True, verify=True)
    with QemFile(second) as qem:
        assert qem.metadata["source"]["kind"] == "qem"
        assert qem.metadata["source"]["sha256"] == {
            "first.qem": hashlib.sha256(first.read_bytes()).hexdigest()
        }
    np.testing.assert_array_equal(load_qem(second).data, data)
    with pytest.raises(ValueError, match="source_hashes"):
        save_qem(make_acquisition(data), tmp_path / "x.qem", source_hashes=True)


def test_existing_output_is_never_overwritten_silently(tmp_path):
    data = np.ones((1, 2, 4, 4), dtype=np.uint8)
    path = tmp_path / "o.qem"
    path.write_bytes(b"precious")
    with pytest.raises(FileExistsError):
        save_qem(make_acquisition(data), path)
    assert path.read_bytes() == b"precious"
    save_qem(make_acquisition(data), path, overwrite=True)
    np.testing.assert_array_equal(load_qem(path).data, data)


def test_failed_verification_leaves_no_file(tmp_path, monkeypatch):
    from quantem.stem4d.io.qem import rans

    data = np.arange(2 * 2 * 8 * 8, dtype=np.uint16).reshape(2, 2, 8, 8) % 7
    original = rans.decode_blocks

    def corrupting(*args):
        original(*args)
        args[-4][0, 0] += 1  # out[0, 0]

    monkeypatch.setattr(rans, "decode_blocks", corrupting)
    with pytest.raises(VerificationError):
        save_qem(make_acquisition(data), tmp_path / "v.qem", verify=True)
    assert os.listdir(tmp_path) == []


def test_load_options(tmp_path):
    rng = np.random.default_rng(9)
    data = counts(rng, (2, 2, 8, 8), 40.0)
    mask = np.zeros((8, 8), dtype=np.uint32)
    mask[0, 0] = 1
    path = save_qem(make_acquisition(data, mask), tmp_path / "o.qem")
    from quantem.stem4d.io.transforms import finish_frames

    frames = data.reshape(-1, 8, 8)
    for options in ({"apply_mask": True}, {"det_bin": 2}, {"dtype": "u8"}):
        expected, _ = finish_frames(frames, mask == 0, **options)
        got = load_qem(path, **options).data
        np.testing.assert_array_equal(got.reshape(expected.shape), expected)


def test_encoded_representation_is_refused_on_cpu(tmp_path):
    path = save_qem(make_acquisition(np.ones((1, 1, 4, 4), np.uint8)), tmp_path / "e.qem")
    with pytest.raises(ValueError, match="encoded"):
        load_qem(path, representation="encoded")


def test_io_routing(tmp_path):
    from quantem.stem4d import io

    data = np.ones((1, 2, 4, 4), dtype=np.uint8)
    path = io.save(make_acquisition(data), tmp_path / "x.qem")
    np.testing.assert_array_equal(io.load(path).data, data)


@pytest.mark.slow
def test_large_roundtrip_many_blocks(tmp_path):
    rng = np.random.default_rng(12)
    yy, xx = np.mgrid[:96, :96]
    disk = ((yy - 48) ** 2 + (xx - 48) ** 2 < 200).astype(float)
    data = rng.poisson(0.05 + 8 * disk, size=(24, 24, 96, 96)).astype(np.uint16)
    data[..., 5, 5] = 65535
    path = save_qem(make_acquisition(data), tmp_path / "big.qem", verify=True)
    np.testing.assert_array_equal(load_qem(path).data, data)
    np.testing.assert_array_equal(load_qem(path, threads=1).data, data)


def test_progress_bars_do_not_change_results(tmp_path, monkeypatch):
    from quantem.stem4d.io.qem import reader

    monkeypatch.setattr(reader, "PROGRESS_BATCH_BYTES", 1)  # one block per batch
    rng = np.random.default_rng(13)
    data = counts(rng, (3, 4, 8, 8), 1.0)
    path = save_qem(make_acquisition(data), tmp_path / "p.qem", block_frames=5, progress=True)
    np.testing.assert_array_equal(load_qem(path, progress=True).data, data)


@pytest.mark.parametrize("extra", [-1, 1])
def test_source_with_wrong_frame_count_writes_nothing(tmp_path, extra):
    """A source whose batches disagree with its shape (a shard changed under us)."""
    from quantem.stem4d.io.qem import writer

    data = np.ones((2, 3, 4, 4), dtype=np.uint8)
    source = writer.open_frame_source(make_acquisition(data))
    frames = np.ones((6 + extra, 16), dtype=np.uint8)
    source.iter_batches = lambda batch: iter([(0, frames)])
    with pytest.raises(ValueError, match=r"blocks|beyond"):
        writer._save(source, tmp_path / "w.qem", False, False, 2, False, False, 8, 2)
    assert list(tmp_path.iterdir()) == []
