"""Hardware tests: every test here needs an NVIDIA GPU reachable through CuPy.

They are skipped, with the reason, on machines without one (CI); run them on the
device machine: ``python -m pytest -q -m "" tests/hardware``.
"""

from __future__ import annotations

import pytest

from quantem.stem4d.backends import cuda_unavailable_reason


def pytest_collection_modifyitems(config, items):
    reason = cuda_unavailable_reason()
    for item in items:
        if "tests/hardware" not in str(item.fspath).replace("\\", "/"):
            continue
        item.add_marker(pytest.mark.hardware)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"needs a CUDA GPU: {reason}"))
