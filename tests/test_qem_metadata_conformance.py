"""Both ``.qem`` readers agree on every METADATA object (``qem_metadata_cases.py``).

The Python reader always runs; the native reader where it can be built (``native``
marker; CI builds it). Before this suite, a ``source`` without ``files`` passed the
Python reader and failed the native one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _native_support import native_binary_fixture  # noqa: F401  (fixture)
from qem_metadata_cases import CASES, SLACK, SLACK_FIELD, edited_file

from harness.native import NativeLoadError, run_native_load
from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.errors import QemFormatError
from quantem.stem4d.io.qem.reader import QemFile
from quantem.stem4d.io.qem.writer import save_qem


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> bytes:
    rng = np.random.default_rng(8)
    data = rng.poisson(1.0, size=(2, 3, 6, 5)).astype(np.uint16)
    mask = np.zeros((6, 5), np.uint32)
    mask[2, 3] = 1
    metadata = {"pixel_mask": mask, SLACK_FIELD: "s" * SLACK}
    acq = Acquisition(data, metadata, mask == 0, "cpu")
    path = save_qem(acq, tmp_path_factory.mktemp("meta") / "m.qem", block_frames=2)
    with QemFile(path) as qem:
        assert qem.metadata["detector"][SLACK_FIELD] == "s" * SLACK
    return path.read_bytes()


def _python_error(path: Path) -> QemFormatError | None:
    try:
        QemFile(path).close()
    except QemFormatError as exc:
        return exc
    return None


@pytest.mark.parametrize("name", sorted(CASES))
def test_python_reader_follows_the_spec(pristine, tmp_path, name):
    path = tmp_path / "case.qem"
    path.write_bytes(edited_file(pristine, name))
    error = _python_error(path)
    if CASES[name][1]:
        assert error is None, error
    else:
        assert error is not None, f"{name}: accepted"
        assert error.fields.get("section") == "METADATA", error


@pytest.mark.native
@pytest.mark.parametrize("name", sorted(CASES))
def test_native_reader_agrees_with_python(native_binary, pristine, tmp_path, name):
    path = tmp_path / "case.qem"
    path.write_bytes(edited_file(pristine, name))
    python = _python_error(path)
    try:
        run_native_load(native_binary, path, threads=1)
        native = None
    except NativeLoadError as exc:
        native = exc
    assert (python is None) == (native is None) == CASES[name][1], (name, python, native)
    if native is not None:
        assert native.section == "METADATA", native.message
