"""``harness qem`` through a subprocess: exit codes, output, deterministic JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.io.qem.reader import load_qem
from quantem.stem4d.io.qem.writer import save_qem


def harness(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", "qem", *args], capture_output=True, text=True
    )


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    rng = np.random.default_rng(4)
    data = rng.poisson(0.4, size=(4, 5, 16, 16)).astype(np.uint16)
    data[..., 3, 3] = 65535
    mask = np.zeros((16, 16), dtype=np.uint32)
    mask[3, 3] = 2
    path = tmp_path_factory.mktemp("cli") / "small.qem"
    save_qem(Acquisition(data, {"pixel_mask": mask}, mask == 0, "cpu"), path, block_frames=3)
    return path, data


def test_verify_ok_and_corrupt(small, tmp_path):
    path, _ = small
    result = harness("verify", str(path))
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout and "7 blocks" in result.stdout
    damaged = bytearray(path.read_bytes())
    damaged[-100] ^= 0x01  # inside the last block's extent or the footer padding
    bad = tmp_path / "bad.qem"
    bad.write_bytes(bytes(damaged))
    result = harness("verify", str(bad))
    assert result.returncode == 1
    assert str(bad) in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_inspect_text_and_json(small):
    path, data = small
    text = harness("inspect", str(path))
    assert text.returncode == 0, text.stderr
    assert "PAYLOAD" in text.stdout and "stream_states" in text.stdout
    result = harness("inspect", str(path), "--json")
    assert result.returncode == 0
    doc = json.loads(result.stdout)
    assert doc["shape"] == list(data.shape)
    parts = doc["bytes"]
    accounted = (
        parts["envelope"]
        + parts["section_padding"]
        + parts["metadata"]
        + parts["pixel_mask"]
        + parts["model"]
        + parts["indexes"]
        + parts["payload"]
    )
    assert accounted == doc["file_bytes"] == path.stat().st_size
    payload = (
        parts["payload_rans_words"]
        + parts["payload_stream_states"]
        + parts["payload_escapes"]
        + parts["payload_raw_blocks"]
        + parts["payload_padding"]
    )
    assert payload == parts["payload"]


def test_header_is_deterministic_json(small, tmp_path):
    path, _ = small
    first = harness("header", str(path))
    assert first.returncode == 0
    copy = tmp_path / "copy.qem"
    copy.write_bytes(path.read_bytes())
    assert harness("header", str(copy)).stdout == first.stdout
    doc = json.loads(first.stdout)
    assert first.stdout == json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n"
    assert len(doc["blocks"]) == doc["n_blocks"] == 7


@pytest.mark.slow
def test_convert_qem_to_qem_with_verify_and_hashes(small, tmp_path):
    path, data = small
    out = tmp_path / "again.qem"
    result = harness("convert", str(path), str(out), "--verify", "--source-hashes")
    assert result.returncode == 0, result.stderr
    assert "verified" in result.stdout
    np.testing.assert_array_equal(load_qem(out, apply_mask=False).data, data)
    again = harness("convert", str(path), str(out))
    assert again.returncode == 1 and "exists" in again.stderr
    assert harness("convert", str(path), str(out), "--overwrite").returncode == 0


def test_convert_writes_format_2_and_refuses_bad_band_rows(small, tmp_path):
    path, data = small
    out = tmp_path / "v2.qem"
    result = harness("convert", str(path), str(out), "--format-version", "2", "--verify")
    assert result.returncode == 0, result.stderr
    info = json.loads(harness("inspect", str(out), "--json").stdout)
    assert info["version"].startswith("2.")
    np.testing.assert_array_equal(load_qem(out, apply_mask=False).data, data)
    assert "quads per class" in harness("inspect", str(out)).stdout
    banded = tmp_path / "v2b.qem"
    result = harness("convert", str(path), str(banded), "--format-version", "2", "--band-rows", "4")
    assert result.returncode == 0, result.stderr
    np.testing.assert_array_equal(load_qem(banded, apply_mask=False).data, data)
    # 16 detector rows: 99 rows a band is refused, cleanly, and nothing is written.
    bad = tmp_path / "bad.qem"
    result = harness("convert", str(path), str(bad), "--format-version", "2", "--band-rows", "99")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "band_rows 99" in result.stderr and str(bad) in result.stderr
    assert not bad.exists() and not list(tmp_path.glob("bad.qem*"))
    result = harness("convert", str(path), str(bad), "--band-rows", "4")
    assert result.returncode == 64 and "--format-version 2" in result.stderr


def test_usage_errors_exit_64(small, tmp_path):
    path, _ = small
    assert harness().returncode == 64
    assert harness("convert", str(path), str(tmp_path / "x.h5")).returncode == 64
    assert harness("bogus").returncode == 64


@pytest.mark.slow
def test_missing_and_foreign_files_exit_1(tmp_path):
    result = harness("verify", str(tmp_path / "none.qem"))
    assert result.returncode == 1 and "none.qem" in result.stderr
    foreign = tmp_path / "f.qem"
    foreign.write_bytes(b"not a qem file at all" * 20)
    result = harness("inspect", str(foreign))
    assert result.returncode == 1 and "magic" in result.stderr
