"""The first call's numba-free path: numpy kernels and the library decode engine.

``quantem.stem4d.detector.numpy_kernels`` must give the very integers the numba kernels
give (the CPU backend's outputs are frozen), on data that stresses exactness: every
pixel at the type's top, masks whose spans run past a uint32 partial's limit, more
frames than a uint32 partial may add. A fresh process that loads an ARINA file and
computes BF and CoM must not import numba, and must get the same products.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from quantem.stem4d.detector import cpu_kernels, numpy_kernels, prepare
from quantem.stem4d.detector.masks import annulus_mask, disk_mask
from quantem.stem4d.io.synthetic import write_synthetic_arina

ROOT = Path(__file__).resolve().parent.parent


def _truth_masked_sum(data, mask):
    return data.astype(np.uint64)[..., mask].sum(axis=-1, dtype=np.uint64)


def _truth_moments(data, mask):
    rows, cols = np.indices(data.shape[2:])
    values = data.astype(np.uint64) * mask
    total = values.sum(axis=(2, 3), dtype=np.uint64)
    sum_r = (values * rows.astype(np.uint64)).sum(axis=(2, 3), dtype=np.uint64)
    sum_c = (values * cols.astype(np.uint64)).sum(axis=(2, 3), dtype=np.uint64)
    return total, sum_r, sum_c


def _masks(shape):
    rng = np.random.default_rng(7)
    center = ((shape[0] - 1) / 2, (shape[1] - 1) / 2)
    single = np.zeros(shape, bool)
    single[shape[0] // 2, -1] = True
    holes = np.ones(shape, bool)
    holes[rng.integers(0, shape[0], 5), rng.integers(0, shape[1], 5)] = False
    return {
        "full": np.ones(shape, bool),
        "empty": np.zeros(shape, bool),
        "disk": disk_mask(shape, center, min(shape) / 4),
        "annulus": annulus_mask(shape, center, min(shape) / 4, None),
        "single": single,
        "random": rng.random(shape) < 0.3,
        "holes": holes,
    }


def _crafted(dtype, scan, det, seed=0):
    rng = np.random.default_rng(seed)
    top = np.iinfo(dtype).max
    data = rng.integers(0, top, size=(*scan, *det), dtype=dtype, endpoint=True)
    data[0] = top  # a scan row of frames at the top everywhere
    data[..., -1, :] = top  # the last detector row at the top: the largest weights
    data[..., :, -1] = top
    return data


def _assert_same(got, expected):
    got = np.asarray(got)
    assert got.dtype == np.uint64 and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", ["uint8", "uint16"])
@pytest.mark.parametrize("det", [(1, 1), (3, 5), (17, 13), (64, 64)])
def test_numpy_kernels_give_the_numba_kernels_integers(dtype, det):
    data = _crafted(np.dtype(dtype), (5, 7), det)
    for mask in _masks(det).values():
        expected = cpu_kernels.masked_sum(data, mask)
        _assert_same(numpy_kernels.masked_sum(data, mask), expected)
        _assert_same(expected, _truth_masked_sum(data, mask))
        for got, want, truth in zip(
            numpy_kernels.moments(data, mask),
            cpu_kernels.moments(data, mask),
            _truth_moments(data, mask),
            strict=True,
        ):
            _assert_same(got, want)
            _assert_same(want, truth)
    _assert_same(numpy_kernels.sum_frames(data), cpu_kernels.sum_frames(data))
    _assert_same(numpy_kernels.sum_frames(data), data.astype(np.uint64).sum(axis=(0, 1)))


def test_spans_and_rows_longer_than_a_uint32_partial_stay_exact():
    # 70000 uint16 values at the top exceed what a uint32 partial holds (65537): the
    # kernels must widen, not wrap.
    data = np.full((2, 1, 1, 70000), 65535, dtype=np.uint16)
    mask = np.ones((1, 70000), bool)
    _assert_same(numpy_kernels.masked_sum(data, mask), _truth_masked_sum(data, mask))
    for got, truth in zip(numpy_kernels.moments(data, mask), _truth_moments(data, mask)):
        _assert_same(got, truth)
    tall = np.full((1, 2, 70000, 1), 65535, dtype=np.uint16)
    tall_mask = np.ones((70000, 1), bool)
    for got, truth in zip(numpy_kernels.moments(tall, tall_mask), _truth_moments(tall, tall_mask)):
        _assert_same(got, truth)


def test_more_frames_than_a_uint32_partial_adds():
    data = np.full((65540, 1, 2, 2), 65535, dtype=np.uint16)
    data[-1, 0, 1, 1] = 3
    expected = data.astype(np.uint64).sum(axis=(0, 1))
    _assert_same(numpy_kernels.sum_frames(data), expected)
    assert int(expected[0, 0]) == 65540 * 65535 > 2**32  # would wrap in uint32


def test_parallel_blocks_give_the_same_integers(monkeypatch):
    data = _crafted(np.dtype("uint16"), (9, 11), (24, 20), seed=3)
    mask = _masks((24, 20))["holes"]
    expected = [numpy_kernels.masked_sum(data, mask), *numpy_kernels.moments(data, mask)]
    serial_sum = numpy_kernels.sum_frames(data)
    monkeypatch.setattr(numpy_kernels, "PARALLEL_MIN_PIXELS", 0)
    monkeypatch.setattr(numpy_kernels, "BLOCK_PIXELS", 24 * 20 * 4)
    monkeypatch.setattr(numpy_kernels, "_threads", lambda: 3)
    got = [numpy_kernels.masked_sum(data, mask), *numpy_kernels.moments(data, mask)]
    for a, b in zip(got, expected, strict=True):
        _assert_same(a, b)
    _assert_same(numpy_kernels.sum_frames(data), serial_sum)


def test_the_first_calls_of_each_kernel_take_numpy_then_numba(monkeypatch):
    monkeypatch.setattr(numpy_kernels, "_calls", {})
    monkeypatch.setattr(numpy_kernels, "_NUMBA_KERNELS", "not.loaded")
    data = np.zeros((2, 2, 4, 4), np.uint16)
    assert [numpy_kernels.suited("masked_sum", data) for _ in range(4)] == [True] * 3 + [False]
    assert numpy_kernels.suited("moments", data)
    assert not numpy_kernels.suited("moments", data.astype(np.uint32))  # uint32: numba
    assert not numpy_kernels.suited("moments", data.astype(np.float32))
    assert not numpy_kernels.suited("moments", data[:, :, ::2])  # not contiguous
    monkeypatch.setattr(numpy_kernels, "_NUMBA_KERNELS", cpu_kernels.__name__)
    monkeypatch.setattr(numpy_kernels, "_calls", {})
    assert not numpy_kernels.suited("moments", data)  # numba's kernels are loaded


def _products(session):
    com = session.center_of_mass()
    return {
        "bf": session.bf(),
        "adf": session.adf(),
        "mean_dp": session.mean_dp_exact(),
        "com_row": com.row,
        "com_col": com.col,
    }


@pytest.mark.parametrize("dtype", ["uint8", "uint16"])
def test_session_products_are_the_same_bits_on_either_path(tmp_path, monkeypatch, dtype):
    master = write_synthetic_arina(
        tmp_path / "acq", scan_shape=(6, 5), detector_shape=(32, 30), dtype=dtype,
        dead_pixels=4, processes=1,
    )  # fmt: skip
    import quantem.stem4d.io

    with quantem.stem4d.io.load(master) as acq:
        monkeypatch.setattr(numpy_kernels, "suited", lambda name, data: False)
        numba_products = _products(prepare(acq))
        calls = []
        monkeypatch.setattr(numpy_kernels, "suited", lambda name, data: calls.append(name) or True)
        numpy_products = _products(prepare(acq))
    assert {"sum_frames", "masked_sum", "moments"} <= set(calls)
    for name, expected in numba_products.items():
        got = numpy_products[name]
        assert got.dtype == expected.dtype, name
        assert got.tobytes() == expected.tobytes(), name  # NaN included: the same bits


_CHILD = """
import hashlib, json, sys
import numpy as np
import quantem.stem4d.io
from quantem.stem4d.detector import prepare
acq = quantem.stem4d.io.load(sys.argv[1])
session = prepare(acq)
bf = session.bf()
com = session.center_of_mass()
digest = lambda a: hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()
print(json.dumps({"numba": "numba" in sys.modules, "bf": digest(bf),
                  "com_row": digest(com.row), "com_col": digest(com.col)}))
"""


def test_a_fresh_process_gets_bf_and_com_without_numba(tmp_path):
    master = write_synthetic_arina(
        tmp_path / "acq", scan_shape=(8, 8), detector_shape=(48, 48), dead_pixels=3, processes=1
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), QUANTEM_INDEX_DIR=str(tmp_path / "index"))
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(master)],
        capture_output=True, text=True, env=env, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    child = json.loads(done.stdout.strip().splitlines()[-1])
    assert child["numba"] is False
    import quantem.stem4d.io

    with quantem.stem4d.io.load(master, engine="numba") as acq:  # the numba decoder
        session = prepare(acq)
        bf = session.bf()
        com = session.center_of_mass()

    def digest(a):
        return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()

    # this process has numba's kernels loaded (cpu_kernels is imported above): the
    # numba path's products are the reference
    assert child["bf"] == digest(bf)
    assert child["com_row"] == digest(com.row) and child["com_col"] == digest(com.col)
