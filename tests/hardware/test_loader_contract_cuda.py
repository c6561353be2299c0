"""The real CUDA loaders (HDF5, ``.qem`` dense, ``.qem`` encoded) pass the loader contract.

The same suite (``quantem.stem4d.testing.loader_contract``) runs on the host for the CPU readers and
for the CUDA loaders with CuPy replaced (``tests/test_loader_contract.py``); here the
kernels decode on the GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from quantem.stem4d import io
from quantem.stem4d.testing.loader_contract import Loaded, LoaderContract


def _host(array: Any) -> Any:
    import cupy

    return None if array is None else cupy.asnumpy(array)


class TestCudaHdf5(LoaderContract):
    fmt = "hdf5"

    def load(self, path: Path, **options: Any) -> Loaded:
        with io.load(path, backend="cuda", **options) as acq:
            return Loaded(_host(acq.data), acq.metadata, acq.validity)


class TestCudaQem(LoaderContract):
    fmt = "qem"

    def load(self, path: Path, **options: Any) -> Loaded:
        with io.load(path, backend="cuda", **options) as acq:
            return Loaded(_host(acq.data), acq.metadata, acq.validity)


class TestCudaEncoded(LoaderContract):
    fmt = "qem"
    dense = False

    def load(self, path: Path, **options: Any) -> Loaded:
        with io.load(path, backend="cuda", representation="encoded", **options) as acq:
            assert acq.data is None and acq.representation == "encoded"
            metadata = dict(acq.metadata)
            assert metadata.pop("resident_bytes") > 0
            return Loaded(None, metadata, acq.validity)

    def reference(self, path: Path, fmt: str | None = None, **options: Any) -> Loaded:
        # the encoded payload holds the stored counts: its metadata is an unmasked load's
        return super().reference(path, fmt, **{**options, "apply_mask": False})

    def test_encoded_frames_are_the_stored_counts(self, path, raw):
        with io.load(path, backend="cuda", representation="encoded") as acq:
            frames = np.stack([_host(acq.encoded.frame(i)) for i in range(raw.shape[0])])
        np.testing.assert_array_equal(frames.reshape(raw.shape), raw)
