"""Package-level contracts: import isolation, error hierarchy, CLI exit codes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from quantem.stem4d import errors


def test_importing_quantem_does_not_import_cupy_or_torch():
    code = (
        "import sys, quantem, quantem.stem4d.io, quantem.stem4d.detector;"
        "bad = [m for m in ('cupy', 'torch') if m in sys.modules];"
        "print(','.join(bad)); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_quantem_never_imports_harness():
    code = (
        "import sys, quantem, quantem.stem4d.io, quantem.stem4d.detector;"
        "sys.exit(1 if any(m.startswith('harness') for m in sys.modules) else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_errors_inherit_builtins_and_name_the_file():
    err = errors.QemFormatError("x.qem", "bad checksum", block=3)
    assert isinstance(err, ValueError) and isinstance(err, errors.QuantemError)
    assert "x.qem" in str(err) and "block 3" in str(err)
    assert isinstance(errors.SourceNotFoundError("a.h5", "missing"), FileNotFoundError)


def test_cuda_backend_never_falls_back(monkeypatch):
    from quantem.stem4d import backends, io

    monkeypatch.setattr(backends, "cuda_unavailable_reason", lambda: "no device (test)")
    with pytest.raises(errors.BackendUnavailableError, match="no device"):
        io.load("whatever_master.h5", backend="cuda")
    with pytest.raises(ValueError, match="unknown backend"):
        io.load("whatever_master.h5", backend="tpu")


def test_cli_usage_error_exits_64():
    result = subprocess.run(
        [sys.executable, "-m", "harness", "--no-such-flag"], capture_output=True, text=True
    )
    assert result.returncode == 64
    assert "Traceback" not in result.stderr
