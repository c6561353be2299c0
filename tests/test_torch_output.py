"""``output="torch"`` routing on the host, without PyTorch.

PyTorch is not a test dependency; a stand-in ``torch`` module (``from_dlpack`` wraps
the numpy array it is given, so sharing is observable) checks what the options
convert and what they leave alone. The real thing, on the CPU and on the GPU, is
tested in ``tests/hardware/test_torch_output.py`` on the device.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import quantem.stem4d.io
from quantem.stem4d.detector import prepare
from quantem.stem4d.errors import BackendUnavailableError
from quantem.stem4d.interop import is_torch_tensor, to_torch
from quantem.stem4d.io.synthetic import write_synthetic_arina


class Tensor:  # what is_torch_tensor recognises: a class named Tensor from module torch
    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    @property
    def dtype(self):  # a torch dtype is not a numpy dtype: nothing may rely on this
        return "torch-dtype"

    def detach(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return self.array


Tensor.__module__ = "torch"


@pytest.fixture
def fake_torch(monkeypatch: pytest.MonkeyPatch):
    module = types.ModuleType("torch")
    module.Tensor = Tensor
    calls = []

    def from_dlpack(obj):
        calls.append(obj)
        return Tensor(np.from_dlpack(obj))

    module.from_dlpack = from_dlpack
    monkeypatch.setitem(sys.modules, "torch", module)
    return calls


@pytest.fixture
def no_torch(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # "import torch" raises ImportError


@pytest.fixture(scope="module")
def master(tmp_path_factory):
    folder = tmp_path_factory.mktemp("torch-out")
    return write_synthetic_arina(
        folder, "t", scan_shape=(4, 5), detector_shape=(16, 16), dtype="uint16", dead_pixels=2
    )


def test_unknown_output_is_refused_before_reading(tmp_path) -> None:
    with pytest.raises(ValueError, match="output must be one of"):
        quantem.stem4d.io.load(tmp_path / "does-not-exist_master.h5", output="jax")


def test_torch_output_without_torch_is_refused_before_reading(tmp_path, no_torch) -> None:
    with pytest.raises(BackendUnavailableError, match="needs PyTorch"):
        quantem.stem4d.io.load(tmp_path / "does-not-exist_master.h5", output="torch")


def test_prepare_with_torch_output_without_torch_is_refused(master, no_torch) -> None:
    acq = quantem.stem4d.io.load(master)
    with pytest.raises(BackendUnavailableError, match="needs PyTorch"):
        prepare(acq, output="torch")
    with pytest.raises(ValueError, match="output must be one of"):
        prepare(acq, output="tensor")


def test_loaded_torch_output_shares_the_array(master, fake_torch) -> None:
    reference = quantem.stem4d.io.load(master)
    acq = quantem.stem4d.io.load(master, output="torch")
    assert acq.output == "torch" and is_torch_tensor(acq.data)
    assert np.shares_memory(acq.data.array, acq.array)
    np.testing.assert_array_equal(acq.array, reference.array)
    assert acq.dtype == np.uint16  # from the array, not the tensor
    acq.close()
    assert acq.data is None and acq.array is None


def test_session_products_follow_the_output(master, fake_torch) -> None:
    plain = prepare(quantem.stem4d.io.load(master))
    session = prepare(quantem.stem4d.io.load(master, output="torch"))
    mask = np.zeros((16, 16), dtype=bool)
    mask[4:12, 4:12] = True
    device_products = {
        "masked_sum": (session.masked_sum(mask), plain.masked_sum(mask)),
        "frame": (session.frame((1, 2)), plain.frame((1, 2))),
        "bf": (session.bf(), plain.bf()),
        "adf": (session.adf(), plain.adf()),
    }
    for name, (tensor, array) in device_products.items():
        assert is_torch_tensor(tensor), name
        assert tensor.array.dtype == array.dtype, name
        np.testing.assert_array_equal(tensor.array, array, err_msg=name)
    com, plain_com = session.center_of_mass(), plain.center_of_mass()
    assert type(com).__name__ == "CenterOfMass"
    for tensor, array in zip(com, plain_com):
        assert is_torch_tensor(tensor)
        np.testing.assert_array_equal(tensor.array, array)
    # host products keep their documented numpy contract
    for name in ("mean_dp_exact", "mean_dp"):
        host = getattr(session, name)()
        assert isinstance(host, np.ndarray), name
        np.testing.assert_array_equal(host, getattr(plain, name)())
    assert isinstance(session.masked_sum_exact(mask), np.ndarray)
    # a torch mask is accepted like a numpy one
    np.testing.assert_array_equal(session.masked_sum(Tensor(mask)).array, plain.masked_sum(mask))


def test_prepare_output_overrides_the_acquisition(master, fake_torch) -> None:
    arrays = prepare(quantem.stem4d.io.load(master, output="torch"), output="array")
    assert isinstance(arrays.bf(), np.ndarray)
    tensors = prepare([quantem.stem4d.io.load(master)] * 2, output="torch")
    assert all(is_torch_tensor(t) for t in tensors.bf())
    assert is_torch_tensor(tensors[1].bf())  # indexing keeps the override
    assert all(is_torch_tensor(s.bf()) for s in tensors)


def test_set_output_round_trip_and_to_torch(master, fake_torch) -> None:
    acq = quantem.stem4d.io.load(master)
    array = acq.array
    acq.set_output("torch")
    assert is_torch_tensor(acq.data) and acq.array is array
    acq.set_output("array")
    assert acq.data is array and acq.output == "array"
    assert is_torch_tensor(to_torch(acq))
    acq.close()
    with pytest.raises(TypeError, match="dense, open acquisition"):
        to_torch(acq)
    with pytest.raises(TypeError, match="no __dlpack__"):
        to_torch(object())
