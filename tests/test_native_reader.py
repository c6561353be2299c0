"""The native C++ reader against the Python writer and reader: every frame of files
written by quantem.stem4d.io.save decodes identically in both, and the sample-frame hashes
agree. Also runs the native unit tests (ctest) of the cached build."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _native_support import native_binary_fixture, read_dump  # noqa: F401  (fixture)

from harness.native import NativeLoadError, hash_frame_u32_le, io_read_bytes, run_native_load
from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.io import save, synthetic
from quantem.stem4d.io.qem.reader import load_qem

pytestmark = pytest.mark.native

REPO = Path(__file__).resolve().parents[1]


def _acquisition(data: np.ndarray, mask: np.ndarray | None = None) -> Acquisition:
    meta = {"scan_shape": data.shape[:2], "detector_shape": data.shape[2:]}
    if mask is not None:
        meta["pixel_mask"] = mask
    validity = np.ones(data.shape[2:], bool) if mask is None else mask == 0
    return Acquisition(data, meta, validity, "cpu")


def _pattern(kind: str, shape: tuple[int, int, int, int], dtype: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    top = np.iinfo(dtype).max
    if kind == "zero":
        return np.zeros(shape, dtype)
    if kind == "max":
        return np.full(shape, top, dtype)
    if kind == "random":
        return rng.integers(0, top, size=shape, dtype=dtype, endpoint=True)
    if kind == "sparse":  # electron counting: mostly 0, small counts, rare large values
        data = rng.poisson(0.4, size=shape).astype(dtype)
        hot = rng.random(shape) < 0.01
        data[hot] = rng.integers(0, top, size=int(hot.sum()), dtype=dtype, endpoint=True)
        data[0, 0] = 0  # an all-zero frame
        return data
    raise ValueError(kind)


def _native_decode(binary: Path, qem: Path, tmp_path: Path, **kwargs) -> tuple[dict, np.ndarray]:
    dump = tmp_path / (qem.stem + ".raw")
    doc = run_native_load(binary, qem, dump_path=dump, **kwargs)
    data = read_dump(dump, doc["dtype"], tuple(doc["shape"]))
    dump.unlink()
    return doc, data


CASES = [
    # (pattern, shape, dtype, block_frames, keep_source_dtype)
    ("sparse", (3, 4, 6, 11), "uint16", 2, False),  # P % 8 != 0, partial last block
    ("sparse", (4, 4, 16, 16), "uint8", 3, False),
    ("sparse", (2, 5, 9, 7), "uint32", 4, True),
    ("random", (2, 3, 8, 8), "uint8", 2, False),
    ("random", (2, 3, 5, 5), "uint16", 5, False),
    ("random", (1, 4, 4, 6), "uint32", 1, True),
    ("zero", (3, 3, 10, 10), "uint16", 4, True),
    ("zero", (1, 1, 1, 1), "uint8", None, False),
    ("max", (2, 2, 7, 3), "uint8", 3, False),
    ("max", (2, 2, 4, 4), "uint16", 1, False),
    ("max", (2, 3, 3, 3), "uint32", 2, False),
    ("sparse", (5, 1, 1, 13), "uint16", 2, True),
]


@pytest.mark.parametrize(("kind", "shape", "dtype", "block_frames", "keep"), CASES)
def test_native_and_python_decode_every_frame_identically(
    native_binary, tmp_path, kind, shape, dtype, block_frames, keep
) -> None:
    data = _pattern(kind, shape, dtype, seed=len(shape) + shape[-1])
    qem = save(
        _acquisition(data), tmp_path / "a.qem", block_frames=block_frames, keep_source_dtype=keep
    )
    n = shape[0] * shape[1]
    doc, native = _native_decode(
        native_binary, qem, tmp_path, sample_frames=["FIRST", "MID", "LAST"]
    )
    with load_qem(qem, apply_mask=False) as acq:
        python = np.asarray(acq.data)
    assert doc["shape"] == list(shape)
    assert doc["source_dtype"] == dtype
    assert doc["dtype"] == str(python.dtype)
    assert native.dtype == python.dtype
    np.testing.assert_array_equal(native, python)
    np.testing.assert_array_equal(native.astype(np.uint64), data.astype(np.uint64))
    frames = native.reshape(n, *shape[2:])
    assert doc["sample_frames"] == [0, n // 2, n - 1]
    expected = [hash_frame_u32_le(data.reshape(n, *shape[2:])[f]) for f in doc["sample_frames"]]
    assert doc["sample_hashes_u32_le"] == expected
    assert [hash_frame_u32_le(frames[f]) for f in doc["sample_frames"]] == expected


def test_report_fields_threads_and_io_modes_agree(native_binary, tmp_path) -> None:
    data = _pattern("sparse", (8, 8, 12, 12), "uint16", seed=5)
    mask = np.zeros((12, 12), np.uint32)
    mask[3, 4] = 1
    mask[11, 11] = 4
    qem = save(_acquisition(data, mask), tmp_path / "m.qem", block_frames=5)
    reports = [
        run_native_load(native_binary, qem, sample_frames=[0, 17, 63], threads=t, io=io)
        for t in (1, 2, 3)
        for io in ("pread", "mmap")
    ]
    hashes = {tuple(r["sample_hashes_u32_le"]) for r in reports}
    assert len(hashes) == 1
    r = reports[0]
    assert r["sample_frames"] == [0, 17, 63]
    assert next(iter(hashes)) == tuple(
        hash_frame_u32_le(data.reshape(64, 12, 12)[f]) for f in (0, 17, 63)
    )
    assert r["n_masked_pixels"] == 2
    assert r["n_blocks"] == 13 and r["block_frames"] == 5
    assert r["file_bytes"] == qem.stat().st_size
    assert r["decoded_bytes"] == data.nbytes == r["resident_bytes"]
    assert r["verified"] is True and r["threads"] == 1
    assert set(r["stages"]) == {"open", "read", "verify", "decode", "hash", "total"}
    assert r["stages"]["total"] >= r["stages"]["decode"] >= 0
    assert r["peak_rss_bytes"] > 0 and r["launch_seconds"] >= 0
    assert io_read_bytes(r) is not None  # Linux has /proc/self/io
    assert r["io_after"]["rchar"] - r["io_before"]["rchar"] >= r["payload_bytes"]
    unverified = run_native_load(native_binary, qem, verify=False)
    assert unverified["verified"] is False
    assert unverified["sample_hashes_u32_le"] == [
        hash_frame_u32_le(data.reshape(64, 12, 12)[f]) for f in (0, 32, 63)
    ]


def test_synthetic_arina_acquisition(native_binary, tmp_path) -> None:
    frames = synthetic.make_frames(
        0, 36, scan_shape=(6, 6), detector_shape=(24, 24), dtype="uint16", seed=3
    )
    data = np.asarray(frames).reshape(6, 6, 24, 24)
    qem = save(_acquisition(data), tmp_path / "s.qem")
    doc, native = _native_decode(native_binary, qem, tmp_path)
    np.testing.assert_array_equal(native.astype(np.uint64), data.astype(np.uint64))
    assert doc["block_modes"]["rans"] >= 1


def test_spec_test_vector_file(native_binary, tmp_path) -> None:
    vector = REPO / "tests" / "data" / "qem-v1.0-vector.qem"
    doc, native = _native_decode(native_binary, vector, tmp_path, sample_frames=list(range(24)))
    with load_qem(vector, apply_mask=False) as acq:
        python = np.asarray(acq.data)
    np.testing.assert_array_equal(native, python)
    assert doc["block_modes"] == {"rans": 1, "zero": 1, "raw": 1}
    frames = python.reshape(24, 6, 11)
    assert doc["sample_hashes_u32_le"] == [hash_frame_u32_le(f) for f in frames]


def test_frame_out_of_range_is_a_usage_error(native_binary, tmp_path) -> None:
    qem = save(_acquisition(_pattern("sparse", (2, 2, 4, 4), "uint8", 1)), tmp_path / "u.qem")
    with pytest.raises(NativeLoadError) as info:
        run_native_load(native_binary, qem, sample_frames=[4])
    assert info.value.returncode == 64
    assert info.value.kind == "usage"


def test_command_line_exit_codes_and_human_output(native_binary, tmp_path) -> None:
    qem = save(_acquisition(_pattern("sparse", (2, 2, 4, 4), "uint8", 1)), tmp_path / "h.qem")
    ok = subprocess.run([native_binary, qem], capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    assert "2 x 2 scan of 4 x 4 uint8" in ok.stdout and "frame 3 sha256(u32 le)" in ok.stdout
    for argv, code in (
        ([], 64),
        ([qem, "--threads", "x"], 64),
        ([qem, "--bogus"], 64),
        ([tmp_path / "missing.qem"], 1),
        ([REPO / "pyproject.toml"], 1),
    ):
        proc = subprocess.run([native_binary, *argv], capture_output=True, text=True, check=False)
        assert proc.returncode == code, (argv, proc.stderr)
        assert proc.stderr.strip().count("\n") <= 1  # usage line + message at most
    help_proc = subprocess.run(
        [native_binary, "--help"], capture_output=True, text=True, check=False
    )
    assert help_proc.returncode == 0 and "--sample-frames" in help_proc.stdout


def test_dump_is_atomic_and_never_partial(native_binary, tmp_path) -> None:
    qem = save(_acquisition(_pattern("sparse", (2, 2, 4, 4), "uint8", 1)), tmp_path / "d.qem")
    target = tmp_path / "out.raw"
    target.write_bytes(b"previous")
    bad = tmp_path / "bad.qem"
    raw = bytearray(qem.read_bytes())
    raw[-40] ^= 1
    bad.write_bytes(bytes(raw))
    with pytest.raises(NativeLoadError):
        run_native_load(native_binary, bad, dump_path=target)
    assert target.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.qem", "d.qem", "out.raw"]


@pytest.mark.slow
def test_native_unit_tests_pass(native_binary) -> None:
    """The ctest suite of the same build (unit, command-line, corruption, spec vector)."""
    proc = subprocess.run(
        ["ctest", "--test-dir", str(Path(native_binary).parent), "--output-on-failure", "-j", "2"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "100% tests passed" in proc.stdout
    summary = json.dumps(proc.stdout.splitlines()[-3:])
    assert "out of" in summary


@pytest.mark.slow
def test_harness_native_build_command(native_binary, tmp_path) -> None:
    """`harness native build` end to end, as a Debug build (warnings are errors at -O0
    too) with its ctest suite."""
    build = tmp_path / "debug-build"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "native",
            "build",
            "--build-dir",
            str(build),
            "--build-type",
            "Debug",
            "--test",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    binary = Path(proc.stdout.strip())
    assert binary == build / "qem-native-load" and binary.is_file()
    help_proc = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    assert help_proc.returncode == 0 and "qem-native-load" in help_proc.stdout
