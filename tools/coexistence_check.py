"""Check that electronmicroscopy's quantem and this project work in one environment.

Run with the environment's python after installing both (docs/coexistence.md):
    python tools/coexistence_check.py
"""

import subprocess
import sys
import tempfile

import numpy as np
import quantem.core

import quantem
import quantem.stem4d
import quantem.stem4d.io as qio
from quantem.stem4d.detector import prepare
from quantem.stem4d.io.synthetic import write_synthetic_arina

print("quantem", quantem.__version__, quantem.__file__)
print("stem4d", quantem.stem4d.__file__, "upstream io:", quantem.io.__name__)
with tempfile.TemporaryDirectory() as folder:
    master = write_synthetic_arina(
        folder, scan_shape=(4, 4), detector_shape=(32, 32), processes=1, progress=False
    )
    with qio.load(master) as acq:
        bf = prepare(acq).bf()
        print("bf", bf.dtype, bf.shape, int(np.asarray(bf).sum()))
done = subprocess.run([sys.executable, "-m", "harness", "--help"], capture_output=True)
print("harness --help exit", done.returncode)
sys.exit(done.returncode)
