"""Ahead-of-time fatbins against NVRTC: the same products, and the path taken recorded."""

from __future__ import annotations

import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="needs a CUDA GPU with CuPy (not installed here)")

from quantem.stem4d import io  # noqa: E402
from quantem.stem4d.acquisition import Acquisition  # noqa: E402
from quantem.stem4d.cuda import detector_kernels, module_loader  # noqa: E402
from quantem.stem4d.io.qem.writer import save_qem  # noqa: E402
from quantem.stem4d.io.synthetic import write_synthetic_arina  # noqa: E402

ARINA = (192, 192)


def _products(master, qem, mask):
    """Dense HDF5 and .qem loads, their BF sums, the encoded BF sum, on the host."""
    out = {}
    with io.load(master, backend="cuda") as h:
        out["hdf5"] = h.data.get()
        out["bf"] = detector_kernels.masked_sum(h.data, mask).get()
    with io.load(qem, backend="cuda") as q:
        out["qem"] = q.data.get()
    with io.load(qem, backend="cuda", representation="encoded") as e:
        out["bf_encoded"] = e.encoded.masked_sum(mask).get()
    return out


def _paths_taken():
    return {r["file"]: r["path"] for r in module_loader.kernel_provenance()}


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32"])
def test_fatbin_and_nvrtc_give_identical_products(tmp_path, monkeypatch, dtype):
    master = write_synthetic_arina(
        tmp_path, scan_shape=(6, 5), detector_shape=ARINA, dtype=dtype, frames_per_shard=16,
        processes=1, progress=False,
    )  # fmt: skip
    cpu = io.load(master)
    qem = tmp_path / "a.qem"
    meta = {"pixel_mask": (~np.asarray(cpu.validity)).astype(np.uint32)}
    save_qem(Acquisition(np.asarray(cpu.data), meta, cpu.validity, "cpu"), qem, block_frames=4)
    rr, cc = np.mgrid[: ARINA[0], : ARINA[1]]
    mask = (rr - 96) ** 2 + (cc - 90) ** 2 < 30**2

    module_loader.forget_modules()
    monkeypatch.delenv(module_loader.DISABLE_AOT_ENV, raising=False)
    aot = _products(master, qem, mask)
    taken = _paths_taken()
    assert set(taken.values()) == {"fatbin"}, taken
    assert {"lz4_bitshuffle.cu", "rans_decode.cu", "detector_kernels.cu", "xxh3.cu"} <= set(taken)
    for record in module_loader.kernel_provenance():
        assert len(record["binary_sha256"]) == 64

    module_loader.forget_modules()
    monkeypatch.setenv(module_loader.DISABLE_AOT_ENV, "1")
    nvrtc = _products(master, qem, mask)
    assert set(_paths_taken().values()) == {"nvrtc"}
    module_loader.forget_modules()

    np.testing.assert_array_equal(aot["hdf5"], np.asarray(cpu.data))
    for key in aot:
        np.testing.assert_array_equal(aot[key], nvrtc[key], err_msg=key)
    np.testing.assert_array_equal(aot["qem"], aot["hdf5"])
    np.testing.assert_array_equal(aot["bf_encoded"], aot["bf"])


def test_unlisted_specialisation_falls_back_to_nvrtc(tmp_path):
    master = write_synthetic_arina(
        tmp_path, scan_shape=(3, 4), detector_shape=(40, 24), frames_per_shard=5,
        processes=1, progress=False,
    )  # fmt: skip
    module_loader.forget_modules()
    with io.load(master, backend="cuda") as gpu:
        np.testing.assert_array_equal(gpu.data.get(), io.load(master).data)
    records = [r for r in module_loader.kernel_provenance() if r["file"] == "lz4_bitshuffle.cu"]
    assert records and all(r["path"] == "nvrtc" for r in records)
    assert all("no fatbin" in r["reason"] for r in records)
