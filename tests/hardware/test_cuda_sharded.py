"""Sharded GPU loads (``devices=...``) against the unsharded load and the CPU backend.

``devices=[0]`` runs the sharded code path on one GPU and must equal the one-GPU load;
the two-block cases on one GPU (``sharded._load_*(path, [0, 0])``, bypassing only the
check that refuses a GPU listed twice) run the real split, per-thread device contexts,
partial ``.qem`` blocks and the combination of products on any single GPU; the
``devices=[0, 1]`` cases need two GPUs and skip, saying so, with fewer.
"""

from __future__ import annotations

import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy (not installed here)")

from quantem.stem4d import io  # noqa: E402
from quantem.stem4d.cuda import sharded  # noqa: E402
from quantem.stem4d.detector import prepare  # noqa: E402
from quantem.stem4d.io import synthetic  # noqa: E402

SCAN = (9, 7)
DETECTOR = (48, 40)


def _gpu_count() -> int:
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except cupy.cuda.runtime.CUDARuntimeError:  # CuPy without a driver: conftest skips all
        return 0


needs_two = pytest.mark.skipif(
    _gpu_count() < 2, reason=f"needs 2 CUDA GPUs, this host has {_gpu_count()}"
)


@pytest.fixture(scope="module")
def arina(tmp_path_factory):
    return synthetic.write_synthetic_arina(
        tmp_path_factory.mktemp("arina"),
        scan_shape=SCAN,
        detector_shape=DETECTOR,
        dtype="uint16",
        seed=11,
        dose=4000.0,
        frames_per_shard=10,
        dead_pixels=[(3, 4)],
        processes=1,
        progress=False,
    )


@pytest.fixture(scope="module")
def qem_path(arina, tmp_path_factory):
    out = tmp_path_factory.mktemp("qem") / "a.qem"
    io.save(arina, out, block_frames=4)  # blocks straddle the row boundaries
    return out


def _products(session):
    com = session.center_of_mass()
    return {
        "bf": cupy.asnumpy(session.bf(radius=8.0, center=(24.0, 20.0))),
        "adf": cupy.asnumpy(session.adf(inner=8.0, outer=18.0, center=(24.0, 20.0))),
        "mean_dp_exact": session.mean_dp_exact(),
        "com_row": cupy.asnumpy(com.row),
        "com_col": cupy.asnumpy(com.col),
        "frame": cupy.asnumpy(session.frame((5, 3))),
    }


def _assert_same(products, reference):
    for name, value in reference.items():
        assert products[name].dtype == value.dtype, name
        assert products[name].tobytes() == value.tobytes(), name


def _loads(path, **options):
    with io.load(path, backend="cuda", **options) as one:
        dense = cupy.asnumpy(one.data) if one.representation == "dense" else None
        products = _products(prepare(one))
    return dense, products


@pytest.mark.parametrize("which", ["arina", "qem_path"])
@pytest.mark.parametrize("options", [{}, {"det_bin": 2}, {"dtype": "u8"}])
def test_devices_0_equals_the_unsharded_load(request, which, options):
    path = request.getfixturevalue(which)
    dense, products = _loads(path, **options)
    with io.load(path, backend="cuda", devices=[0], **options) as acq:
        assert acq.representation == "sharded" and acq.data.devices == (0,)
        block = acq.data[0]
        assert block.rows == (0, SCAN[0]) and isinstance(block.data, cupy.ndarray)
        assert cupy.asnumpy(block.data).tobytes() == dense.tobytes()
        assert acq.data.gather().tobytes() == dense.tobytes()
        _assert_same(_products(prepare(acq)), products)
        stats = acq.metadata["load_stats"]["devices"]
        assert stats[0]["device"] == 0 and stats[0]["bytes_share"] == 1.0


def test_devices_0_encoded_equals_the_unsharded_encoded_load(qem_path):
    _, products = _loads(qem_path, representation="encoded")
    with io.load(qem_path, backend="cuda", devices=[0], representation="encoded") as acq:
        _assert_same(_products(prepare(acq)), products)


CASES = [("arina", "dense"), ("qem_path", "dense"), ("qem_path", "encoded")]


@pytest.mark.parametrize("which,representation", CASES)
def test_two_blocks_on_one_gpu_equal_the_cpu_load(request, which, representation):
    path = request.getfixturevalue(which)
    # frame() gives the values as loaded: the encoded representation keeps stored counts
    cpu = io.load(path, apply_mask=representation == "dense")
    reference = _products(prepare(cpu))
    options = {"representation": representation} if which == "qem_path" else {}
    loader = sharded._load_qem if which == "qem_path" else sharded._load_hdf5
    acq = loader(path, [0, 0, 0], **options)
    try:
        assert [b.rows for b in acq.data] == [(0, 3), (3, 6), (6, 9)]
        if representation == "dense":
            for block in acq.data:
                part = cpu.data[block.rows[0] : block.rows[1]]
                assert cupy.asnumpy(block.data).tobytes() == part.tobytes()
            assert cupy.asnumpy(acq.data.gather(device=0)).tobytes() == cpu.data.tobytes()
        products = _products(prepare(acq))
        for name in ("bf", "adf", "mean_dp_exact", "frame"):
            assert products[name].tobytes() == reference[name].tobytes(), name
        np.testing.assert_allclose(products["com_row"], reference["com_row"], rtol=1e-14)
    finally:
        acq.close()


@needs_two
@pytest.mark.parametrize("which,representation", CASES)
def test_two_gpus_equal_one_gpu(request, which, representation):
    path = request.getfixturevalue(which)
    options = {"representation": representation} if which == "qem_path" else {}
    dense, products = _loads(path, **options)
    for devices in ([0, 1], [1, 0], "all"):
        with io.load(path, backend="cuda", devices=devices, **options) as acq:
            listed = [0, 1] if devices == "all" else devices
            assert acq.data.devices[:2] == tuple(listed[:2])
            for block in acq.data:
                if block.data is not None:
                    assert block.data.device.id == block.device
                    part = dense[block.rows[0] : block.rows[1]]
                    assert cupy.asnumpy(block.data).tobytes() == part.tobytes()
            if dense is not None:
                gathered = acq.data.gather(device=listed[-1])
                assert gathered.device.id == listed[-1]
                assert cupy.asnumpy(gathered).tobytes() == dense.tobytes()
            _assert_same(_products(prepare(acq)), products)


def test_a_missing_device_is_named():
    n = _gpu_count()
    with pytest.raises(ValueError, match=f"GPU {n + 3} does not exist; this host has {n}"):
        io.load("unused_master.h5", backend="cuda", devices=[n + 3])


def _compute_products(acq):
    from quantem.stem4d.dpc import dpc
    from quantem.stem4d.virtual import Annulus, Disk, open_frames, virtual_images

    images = virtual_images(acq, {"bf": Disk(8.0), "adf": Annulus(8.0, 18.0)})
    result = dpc(acq, rotation_deg=10.0)
    stack = open_frames(acq).pixel_stack(np.array([24, 20, 30]), np.array([20, 25, 14]))
    return {
        "virtual_bf": cupy.asnumpy(images["bf"]),
        "virtual_adf": cupy.asnumpy(images["adf"]),
        "dpc_com_row": cupy.asnumpy(result.com_row),
        "dpc_phase": cupy.asnumpy(result.phase),
        "pixel_stack": cupy.asnumpy(stack),
    }


@pytest.mark.parametrize("which", ["arina", "qem_path"])
def test_compute_products_of_blocks_equal_one_gpu(request, which):
    """Virtual detectors, DPC and the parallax pixel stack: three blocks on one GPU (and
    two GPUs when present) give the one-GPU products bit for bit."""
    path = request.getfixturevalue(which)
    with io.load(path, backend="cuda") as one:
        reference = _compute_products(one)
    loader = sharded._load_qem if which == "qem_path" else sharded._load_hdf5
    acq = loader(path, [0, 0, 0])
    try:
        _assert_same(_compute_products(acq), reference)
    finally:
        acq.close()
    if _gpu_count() >= 2:
        with io.load(path, backend="cuda", devices=[1, 0]) as acq:
            _assert_same(_compute_products(acq), reference)
