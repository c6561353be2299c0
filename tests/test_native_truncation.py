"""The native reader's ``--io mmap`` mode: a file truncated while mapped is a clean error.

Touching a mapped page past the new end of file raises SIGBUS; the reader now turns a
SIGBUS inside its own mapping into an IoError naming the file (exit 1) instead of dying
(before: killed in 6 of 6 runs). The parent truncates the file while the child decodes;
a run that finishes first, or hits the truncation while opening, proves nothing and is
retried.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import numpy as np
import pytest
from _native_support import native_binary_fixture  # noqa: F401  (fixture)

from harness.native import run_native_load
from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.io.qem.writer import save_qem

pytestmark = [pytest.mark.native, pytest.mark.slow]


def test_mmap_mode_survives_truncation_while_mapped(native_binary, tmp_path):
    rng = np.random.default_rng(3)
    data = rng.integers(0, 60000, size=(24, 24, 128, 128), dtype=np.uint16)  # incompressible
    acq = Acquisition(data, {"pixel_mask": np.zeros((128, 128), np.uint32)}, None, "cpu")
    source = save_qem(acq, tmp_path / "big.qem", block_frames=4)
    pristine = source.read_bytes()
    stages = run_native_load(native_binary, source, threads=1, io="mmap")["stages"]
    delay = stages["open"] + stages["read"] + 0.3 * (stages["verify"] + stages["decode"])
    path = tmp_path / "shrinking.qem"
    hit = 0
    for attempt in range(8):
        path.write_bytes(pristine)
        child = subprocess.Popen(
            [str(native_binary), "--json", "--threads", "1", "--io", "mmap", "--", str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        time.sleep(delay * (0.5 + attempt / 8))
        os.truncate(path, 4096)
        _out, err = child.communicate(timeout=120)
        assert child.returncode != -signal.SIGBUS, "killed by SIGBUS"
        message = err.decode("utf-8", "replace")
        if child.returncode == 1 and "shrank while it was mapped" in message:
            assert str(path) in message
            hit += 1
            if hit >= 2:
                break
    assert hit >= 1, "the truncation never landed while the file was mapped"
