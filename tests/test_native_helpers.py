"""harness.native helpers that need no C++ build: hashing, argument checks, launch
accounting and error parsing (against stand-in programs), binary lookup, the CLI."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.errors import NativeError
from harness.native import (
    BINARY_ENV,
    NativeLoadError,
    find_native_binary,
    hash_frame_u32_le,
    io_read_bytes,
    native_source_digest,
    run_native_load,
)


def _fake_program(tmp_path: Path, body: str) -> Path:
    """A stand-in for qem-native-load: a Python script with the given body."""
    path = tmp_path / "fake-native"
    path.write_text(f"#!{sys.executable}\nimport sys, json, time\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_hash_frame_widens_to_u32_little_endian() -> None:
    frame = np.array([[0, 1], [255, 7]], dtype=np.uint8)
    expected = hashlib.sha256(
        b"\x00\x00\x00\x00\x01\x00\x00\x00\xff\x00\x00\x00\x07\x00\x00\x00"
    ).hexdigest()
    assert hash_frame_u32_le(frame) == expected
    assert hash_frame_u32_le(frame.astype(np.uint16)) == expected
    assert hash_frame_u32_le(frame.astype(">u4")) == expected  # byte order is normalised
    assert hash_frame_u32_le(np.asfortranarray(frame.astype(np.uint32))) == expected
    with pytest.raises(TypeError):
        hash_frame_u32_le(frame.astype(np.int16))
    with pytest.raises(TypeError):
        hash_frame_u32_le(frame.astype(np.uint64))


def test_run_native_load_separates_launch_from_program_time(tmp_path: Path) -> None:
    args_file = tmp_path / "args.json"
    program = _fake_program(
        tmp_path,
        f"json.dump(sys.argv[1:], open({str(args_file)!r}, 'w'))\n"
        "time.sleep(0.05)\n"
        'print(json.dumps({"stages": {"total": 0.01}, "io_before": {"read_bytes": 10},'
        ' "io_after": {"read_bytes": 4106}}))',
    )
    doc = run_native_load(
        program, tmp_path / "x.qem", sample_frames=[0, "MID", "LAST"], threads=3, verify=False
    )
    argv = json.loads(args_file.read_text())
    assert argv == [
        "--json",
        "--sample-frames",
        "0,MID,LAST",
        "--threads",
        "3",
        "--no-verify",
        "--",
        str(tmp_path / "x.qem"),
    ]
    assert doc["wall_seconds"] >= 0.05
    assert doc["launch_seconds"] == pytest.approx(doc["wall_seconds"] - 0.01)
    assert io_read_bytes(doc) == 4096
    assert io_read_bytes({"io_before": None, "io_after": None}) is None


def test_run_native_load_reports_the_programs_error(tmp_path: Path) -> None:
    program = _fake_program(
        tmp_path,
        'print(json.dumps({"error": {"kind": "format", "section": "PAYLOAD", "block": 3,'
        ' "message": "block 3: checksum mismatch"}}))\n'
        'sys.stderr.write("qem-native-load: x.qem: block 3: checksum mismatch\\n")\n'
        "sys.exit(1)",
    )
    with pytest.raises(NativeLoadError) as info:
        run_native_load(program, "x.qem")
    err = info.value
    assert err.returncode == 1
    assert (err.kind, err.section, err.block) == ("format", "PAYLOAD", 3)
    assert err.message == "qem-native-load: x.qem: block 3: checksum mismatch"


def test_run_native_load_rejects_bad_output_and_arguments(tmp_path: Path) -> None:
    program = _fake_program(tmp_path, "print('not json')")
    with pytest.raises(NativeError, match="no valid report"):
        run_native_load(program, "x.qem")
    with pytest.raises(ValueError):
        run_native_load(program, "x.qem", sample_frames=[-1])
    with pytest.raises(ValueError):
        run_native_load(program, "x.qem", sample_frames=["MIDDLE"])
    with pytest.raises(ValueError):
        run_native_load(program, "x.qem", threads=0)
    with pytest.raises(NativeError, match="cannot start"):
        run_native_load(tmp_path / "missing-program", "x.qem")
    slow = _fake_program(tmp_path, "time.sleep(5)")
    with pytest.raises(NativeError, match="did not finish"):
        run_native_load(slow, "x.qem", timeout=0.2)


def test_find_native_binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(NativeError, match="harness native build"):
        find_native_binary(tmp_path / "nothing")
    program = _fake_program(tmp_path, "")
    assert find_native_binary(program) == program.resolve()
    monkeypatch.setenv(BINARY_ENV, str(program))
    assert find_native_binary() == program.resolve()
    plain = tmp_path / "not-executable"
    plain.write_text("")
    with pytest.raises(NativeError):
        find_native_binary(plain)


def test_source_digest_is_stable() -> None:
    assert native_source_digest() == native_source_digest()
    assert len(native_source_digest()) == 64


def test_cli_native_without_action_is_a_usage_error() -> None:
    from harness.cli import main

    assert main(["native"]) == 64
    with pytest.raises(SystemExit) as info:
        main(["native", "build", "--build-type", "Fast"])
    assert info.value.code == 64
    assert main(["native", "build", "--jobs", "0"]) == 64


def test_ci_deps_script_is_executable() -> None:
    script = Path(__file__).resolve().parents[1] / "native" / "ci-deps.sh"
    assert os.access(script, os.X_OK)


def test_native_error_with_non_utf8_stderr_is_reported(tmp_path):
    """A program whose stderr holds bytes that are not UTF-8 (a Latin-1 file name, say)
    is still reported as a NativeLoadError, not a UnicodeDecodeError."""
    from harness.native import NativeLoadError, run_native_load

    fake = tmp_path / "fake-native"
    fake.write_text(
        "#!/bin/sh\nprintf 'cannot open /data/caf\\351.qem\\n' >&2\nexit 1\n", encoding="ascii"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(NativeLoadError) as info:
        run_native_load(fake, tmp_path / "x.qem")
    assert "cannot open /data/caf\ufffd.qem" in str(info.value)


def test_build_folder_is_per_source_folder(tmp_path, monkeypatch) -> None:
    # A cached CMake build names its source folder: a checkout elsewhere with equal
    # sources must get its own build (ctest failed from a build of a removed worktree).
    import shutil

    from harness import native

    here = native.native_build_dir(tmp_path)
    assert here.parent == tmp_path and here.name.endswith("-Release")
    copy = tmp_path / "elsewhere" / "native"
    shutil.copytree(native.NATIVE_SOURCE_DIR, copy, ignore=shutil.ignore_patterns("build"))
    monkeypatch.setattr(native, "NATIVE_SOURCE_DIR", copy)
    there = native.native_build_dir(tmp_path)
    assert native.native_source_digest()[:16] in there.name  # the same sources ...
    assert there != here  # ... in another folder: another build
