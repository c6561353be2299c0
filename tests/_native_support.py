"""Shared support of the native-reader tests: the built binary, and file helpers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.native import ensure_native_binary, native_unavailable_reason


@pytest.fixture(scope="session", name="native_binary")
def native_binary_fixture() -> Path:
    """qem-native-load built from the current sources (cached outside the checkout;
    ``$QEM_NATIVE_BINARY`` overrides). Skips, saying what is missing, when the build
    tools are absent; CI installs them with native/ci-deps.sh, so there it runs."""
    reason = native_unavailable_reason()
    if reason is not None:
        pytest.skip(f"native reader cannot be built here: {reason}")
    return ensure_native_binary()


def read_dump(path: Path, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """The array qem-native-load --dump wrote (stored dtype, little-endian, C order)."""
    return np.fromfile(path, dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape)
