"""``harness data synth`` through a real subprocess: output, exit codes, one-line errors."""

from __future__ import annotations

import subprocess
import sys

import h5py
import hdf5plugin  # noqa: F401
import numpy as np

from quantem.stem4d.io.synthetic import make_frames


def _harness(*argv, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "harness", *map(str, argv)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


def test_synth_writes_an_acquisition_and_prints_the_master(tmp_path):
    out = tmp_path / "acq"
    proc = _harness(
        "data",
        "synth",
        out,
        "--name",
        "demo",
        "--scan-shape",
        3,
        5,
        "--detector-shape",
        8,
        6,
        "--dtype",
        "uint8",
        "--frames-per-shard",
        4,
        "--seed",
        9,
        "--dead-pixels",
        2,
        "--processes",
        1,
    )
    assert proc.returncode == 0, proc.stderr
    master = out / "demo_master.h5"
    assert proc.stdout.strip() == str(master)
    with h5py.File(master, "r") as f:
        got = np.concatenate([f[f"/entry/data/data_00000{i}"][()] for i in (1, 2, 3, 4)])
    expected = make_frames(
        0, 15, scan_shape=(3, 5), detector_shape=(8, 6), dtype="uint8", seed=9, dead_pixels=2
    )
    np.testing.assert_array_equal(got, expected)


def test_synth_refuses_to_overwrite_with_one_line_and_usage_exit(tmp_path):
    args = ("data", "synth", tmp_path, "--scan-shape", 2, 2, "--detector-shape", 4, 4)
    assert _harness(*args).returncode == 0
    proc = _harness(*args)
    assert proc.returncode == 64
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "already exists" in lines[0]
    assert "Traceback" not in proc.stderr
    assert _harness(*args, "--overwrite").returncode == 0


def test_synth_bad_shape_is_a_usage_error(tmp_path):
    proc = _harness("data", "synth", tmp_path, "--scan-shape", 0, 4)
    assert proc.returncode == 64
    assert "Traceback" not in proc.stderr
    assert "scan_shape" in proc.stderr
