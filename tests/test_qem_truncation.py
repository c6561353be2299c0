"""A ``.qem`` file that shrinks while it is read is a clean error, never SIGBUS.

The reader used to memory-map the file: touching a page past the new end of file killed
the process with SIGBUS (3 of 12 runs when truncating during a load). It now reads with
``pread``; the child below opens the file, waits until the parent has truncated it, then
decodes, and must exit normally with a :class:`QemFormatError` naming the file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.io.qem.writer import save_qem

CHILD = textwrap.dedent(
    """
    import sys
    from quantem.stem4d.errors import QemFormatError
    from quantem.stem4d.io.qem.reader import QemFile, load_qem

    path, mode = sys.argv[1], sys.argv[2]
    qem = QemFile(path)
    print("open", flush=True)
    sys.stdin.readline()  # the parent truncates the file now
    try:
        if mode == "decode":
            qem.decode_blocks(range(qem.n_blocks))
        elif mode == "verify":
            qem.verify_checksums()
        else:
            load_qem(path)
    except QemFormatError as exc:
        print("QemFormatError:", exc, flush=True)
        sys.exit(3)
    print("no error", flush=True)
    """
)


@pytest.fixture
def qem_path(tmp_path):
    rng = np.random.default_rng(0)
    data = rng.poisson(3.0, (16, 16, 64, 64)).astype(np.uint16)
    acq = Acquisition(data, {"pixel_mask": np.zeros((64, 64), np.uint32)}, None, "cpu")
    return save_qem(acq, tmp_path / "shrinks.qem", block_frames=4)


@pytest.mark.parametrize("mode", ["decode", "verify", "load"])
def test_truncated_while_open_is_a_clean_error_naming_the_file(qem_path, mode):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(qem_path), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout.readline().strip() == "open"
    # page-aligned, so that the payload's pages lie wholly past the new end of file
    os.truncate(qem_path, 4096)
    out, err = child.communicate("go\n", timeout=120)
    assert child.returncode != -signal.SIGBUS, "killed by SIGBUS"
    assert child.returncode == 3, (child.returncode, out, err)
    assert "QemFormatError" in out and str(qem_path) in out
    assert "shrank while being read" in out or "truncated" in out
