"""``output="torch"`` with real PyTorch: zero-copy tensors on the GPU, equal to the CPU products."""

from __future__ import annotations

import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy (not installed here)")
torch = pytest.importorskip("torch", reason="needs PyTorch (the 'torch' extra)")

from quantem.stem4d import io  # noqa: E402
from quantem.stem4d.detector import prepare  # noqa: E402
from quantem.stem4d.io.synthetic import write_synthetic_arina  # noqa: E402


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    folder = tmp_path_factory.mktemp("torch-out")
    master = write_synthetic_arina(
        folder, "t", scan_shape=(6, 7), detector_shape=(32, 32), dtype="uint16", dead_pixels=3
    )
    qem = io.save(master, folder / "t.qem")
    return master, qem


def _host(tensor) -> np.ndarray:
    """Back to numpy through CuPy (independent of torch's own uint64 support)."""
    assert isinstance(tensor, torch.Tensor)
    if tensor.is_cuda:
        return cupy.from_dlpack(tensor).get()
    return np.from_dlpack(tensor)


def _reference(master, apply_mask=True):
    with io.load(master, apply_mask=apply_mask) as acq:
        session = prepare(acq)
        mask = np.zeros((32, 32), dtype=bool)
        mask[8:24, 8:24] = True
        return mask, {
            "masked_sum": session.masked_sum(mask),
            "frame": session.frame((2, 3)),
            "bf": session.bf(),
            "adf": session.adf(),
            "com_row": session.center_of_mass().row,
            "com_col": session.center_of_mass().col,
        }


def _products(session, mask):
    com = session.center_of_mass()
    return {
        "masked_sum": session.masked_sum(torch.from_numpy(mask).cuda()),
        "frame": session.frame((2, 3)),
        "bf": session.bf(),
        "adf": session.adf(),
        "com_row": com.row,
        "com_col": com.col,
    }


@pytest.mark.parametrize("which", ["hdf5", "qem"])
def test_dense_cuda_load_hands_a_device_tensor_without_copy(sources, which):
    path = sources[0] if which == "hdf5" else sources[1]
    with io.load(sources[0]) as cpu:
        expected = cpu.array.copy()
    with io.load(path, backend="cuda", output="torch") as acq:
        assert isinstance(acq.data, torch.Tensor) and acq.data.is_cuda
        assert acq.data.dtype == torch.uint16
        assert acq.data.data_ptr() == acq.array.data.ptr  # the same device memory
        np.testing.assert_array_equal(_host(acq.data), expected)


@pytest.mark.parametrize("representation", ["dense", "encoded"])
def test_session_products_are_device_tensors_equal_to_cpu(sources, representation):
    # frame() gives the values as loaded: masked for dense (the default apply_mask=True),
    # the stored counts for the encoded representation; the other products never differ.
    mask, expected = _reference(sources[0], apply_mask=representation == "dense")
    with io.load(sources[1], backend="cuda", output="torch", representation=representation) as acq:
        got = _products(prepare(acq), mask)
        for name, tensor in got.items():
            assert tensor.is_cuda, name
            np.testing.assert_array_equal(_host(tensor), expected[name], err_msg=name)
        assert got["bf"].dtype == torch.uint64
        assert isinstance(prepare(acq).mean_dp_exact(), np.ndarray)


def test_cpu_load_hands_a_host_tensor_without_copy(sources):
    _, expected = _reference(sources[0])
    with io.load(sources[0], output="torch") as acq:
        assert isinstance(acq.data, torch.Tensor) and not acq.data.is_cuda
        assert acq.data.data_ptr() == acq.array.ctypes.data
        bf = prepare(acq).bf()
        assert isinstance(bf, torch.Tensor) and bf.dtype == torch.uint64
        np.testing.assert_array_equal(_host(bf), expected["bf"])


def test_tensor_outlives_close(sources):
    with io.load(sources[0]) as cpu:
        expected = cpu.array.copy()
    acq = io.load(sources[1], backend="cuda", output="torch")
    tensor = acq.data
    acq.close()
    cupy.get_default_memory_pool().free_all_blocks()
    np.testing.assert_array_equal(_host(tensor), expected)
