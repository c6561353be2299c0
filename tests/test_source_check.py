"""Verified sources by default (issue 39): the manifest pins every shard file, a run
checks them before measuring, and every HDF5 load checks its chunks.

A flipped bit in a bitshuffle-LZ4 chunk most often decodes to wrong counts without any
error (the format has no checksum). These tests flip one and check that the default
``harness run io-scale`` exits 1 naming the shard and the frame, whether the flip came
before the run's first indexing (caught against the manifest) or after it (caught
against the frame index), and that ``--no-verify-source`` is recorded.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pytest
import xxhash
from _run_helpers import real_disk_dir

from harness.errors import ManifestError
from harness.run import provenance
from harness.run.io_scale.config import IoScaleConfig
from harness.run.io_scale.kind import run_io_scale
from harness.run.manifest import (
    check_source_files,
    dump_manifest,
    manifest_entry,
    parse_manifest,
)
from quantem.stem4d.io.synthetic import write_synthetic_arina

#: One small acquisition in shards of 6, 6 and 4 frames.
SUITE = (("flip", (4, 4), (16, 16), "uint16", 2000.0),)
FLIP_SHARD, FLIP_SHARD_FRAME = 2, 3  # frame 9 of the acquisition
FLIP_FRAME = 6 + FLIP_SHARD_FRAME


@pytest.fixture(autouse=True)
def _fingerprint_nothing(monkeypatch):
    """A shared checkout changes under a run; these tests are not about that."""
    monkeypatch.setattr(provenance, "collect_source_hashes", lambda checkout, modules=None: {})


@dataclass(frozen=True)
class Suite:
    root: Path
    manifest: Path


@pytest.fixture
def suite(tmp_path):
    """The acquisition and a manifest made by manifest_entry (as `manifest make` does)."""
    folder = real_disk_dir(tmp_path)
    root = folder / "suite" / "data"
    entries = []
    for name, scan, det, dtype, dose in SUITE:
        master = write_synthetic_arina(
            root / name, name=name, scan_shape=scan, detector_shape=det, dtype=dtype,
            dose=dose, frames_per_shard=6, processes=1,
        )  # fmt: skip
        entries.append(manifest_entry(name, master, root, scan, det, dtype))
    manifest = folder / "suite" / "manifest.json"
    manifest.write_bytes(dump_manifest(entries))
    yield folder, Suite(root, manifest)
    if folder != tmp_path:
        shutil.rmtree(folder, ignore_errors=True)


def shard_path(suite, i: int) -> Path:
    return suite.root / "flip" / f"flip_data_{i:06d}.h5"


def flip_chunk_bit(path: Path, frame: int) -> None:
    """Flip one bit in the middle of a frame's raw chunk (found by h5py, not our reader)."""
    with h5py.File(path, "r") as f:
        info = f["/entry/data/data"].id.get_chunk_info(frame)
    with open(path, "r+b") as f:
        at = info.byte_offset + info.size // 2
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x10]))


def config(folder: Path, suite, **overrides) -> IoScaleConfig:
    values = dict(
        root=suite.root,
        manifest=suite.manifest,
        backend="cpu",
        storage_id="test-disk",
        output_dir=folder / "out",
        reps=1,
        load_only=True,
        progress=False,
        command=["test"],
    )
    values.update(overrides)
    return IoScaleConfig(**values)


def test_manifest_records_each_shard_independently_checked(suite):
    """Sizes and SHA-256 by hashlib, chunk XXH3-64 of the raw chunks read by h5py."""
    _, suite = suite
    entry = json.loads(suite.manifest.read_text())["selected_acquisitions"][0]
    shards = entry["source_shards"]
    assert [s["link"] for s in shards] == ["data_000001", "data_000002", "data_000003"]
    for i, recorded in enumerate(shards, start=1):
        path = shard_path(suite, i)
        assert recorded["size"] == path.stat().st_size
        assert recorded["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        with h5py.File(path, "r") as f:
            dset = f["/entry/data/data"]
            chunks = [dset.id.read_direct_chunk((j, 0, 0))[1] for j in range(dset.shape[0])]
        expected = b"".join(xxhash.xxh3_64_digest(c) for c in chunks)  # big-endian bytes
        assert recorded["chunk_xxh3_64"] == expected.hex()
    manifest = parse_manifest(suite.manifest, suite.root)
    checked = check_source_files(manifest)
    assert checked["state"] == "checked" and checked["files"] == 3
    assert checked["bytes"] == sum(s["size"] for s in shards)


def test_check_names_the_shard_link_and_frame(suite):
    _, suite = suite
    flip_chunk_bit(shard_path(suite, FLIP_SHARD), FLIP_SHARD_FRAME)
    with pytest.raises(ManifestError) as info:
        check_source_files(parse_manifest(suite.manifest, suite.root))
    message = str(info.value)
    assert f"{shard_path(suite, FLIP_SHARD)} (/entry/data/data_000002)" in message
    assert f"the raw chunk of frame {FLIP_FRAME} (frame {FLIP_SHARD_FRAME} of the shard)" in message


def test_check_names_a_missing_shard_and_changed_links(suite):
    _, suite = suite
    manifest = parse_manifest(suite.manifest, suite.root)
    os.rename(shard_path(suite, 3), shard_path(suite, 3).with_suffix(".gone"))
    with pytest.raises(ManifestError, match=r"flip_data_000003.h5 \(/entry/data/data_000003\)"):
        check_source_files(manifest)


def test_damage_outside_the_chunks_is_still_refused(suite):
    _, suite = suite
    path = shard_path(suite, 1)
    with h5py.File(path, "r+") as f:
        f["/entry/data/data"].attrs["note"] = "edited"
    with pytest.raises(ManifestError, match="no frame's raw chunk changed"):
        check_source_files(parse_manifest(suite.manifest, suite.root))


def test_old_manifest_without_shards_still_runs_and_says_so(suite):
    """A version-1 manifest written before source_shards validates; nothing to check."""
    _, suite = suite
    doc = json.loads(suite.manifest.read_text())
    for entry in doc["selected_acquisitions"]:
        del entry["source_shards"]
    suite.manifest.write_text(json.dumps(doc))
    assert check_source_files(parse_manifest(suite.manifest, suite.root))["state"] == (
        "not in manifest"
    )


def _cli_run(suite, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", "run", "io-scale", str(suite.root), "--backend", "cpu",
         "--selection-manifest", str(suite.manifest), "--storage-id", "test-disk",
         "--output-dir", str(out), "--reps", "1", "--load-only", *extra],
        capture_output=True, text=True, timeout=300, env={**os.environ},
    )  # fmt: skip


@pytest.mark.slow
def test_default_run_refuses_a_flip_made_before_the_first_indexing(suite):
    """Done-when of issue 39: the flip is older than the run's frame index, so only the
    manifest (made before the damage) can catch it; the CLI exits 1 in one line naming
    the shard and the frame, and writes no report."""
    folder, suite = suite
    flip_chunk_bit(shard_path(suite, FLIP_SHARD), FLIP_SHARD_FRAME)
    proc = _cli_run(suite, folder / "out")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert str(shard_path(suite, FLIP_SHARD)) in proc.stderr
    assert f"frame {FLIP_FRAME} (frame {FLIP_SHARD_FRAME} of the shard)" in proc.stderr
    assert not (folder / "out" / "loading.json").exists()


@pytest.mark.slow
def test_no_verify_source_runs_and_records_it(suite):
    """--no-verify-source measures the damaged file (that is what it asks for) and the
    report says that neither check ran."""
    folder, suite = suite
    flip_chunk_bit(shard_path(suite, FLIP_SHARD), FLIP_SHARD_FRAME)
    proc = _cli_run(suite, folder / "out", "--no-verify-source")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((folder / "out" / "loading.json").read_text())
    assert doc["source_check"] == {"manifest_files": {"state": "off"}, "chunk_checksums": False}
    assert doc["conditions"]["verify_source"] is False


@pytest.mark.slow
def test_default_run_refuses_a_flip_made_after_the_first_indexing(suite):
    """Done-when of issue 39: the manifest check passes (the file is intact then); the
    flip lands after the run's first indexing and every HDF5 load checks its chunks, so
    the run fails (exit 1) naming the shard and the frame."""
    folder, suite = suite

    def flip_after_indexing(event: str, details: dict) -> None:
        if event == "first-observation":
            flip_chunk_bit(shard_path(suite, FLIP_SHARD), FLIP_SHARD_FRAME)

    outcome = run_io_scale(config(folder, suite, on_event=flip_after_indexing))
    assert outcome.exit_code == 1
    doc = outcome.report
    assert doc["source_check"]["chunk_checksums"] is True
    assert doc["source_check"]["manifest_files"]["state"] == "checked"
    assert doc["conditions"]["verify_source"] is True
    named = [
        f
        for f in doc["status"]["failures"]
        if str(shard_path(suite, FLIP_SHARD)) in f
        and f"frame {FLIP_FRAME}, shard_frame {FLIP_SHARD_FRAME}" in f
    ]
    assert named, doc["status"]["failures"]


@pytest.mark.slow
def test_default_run_of_intact_files_records_both_checks(suite):
    folder, suite = suite
    outcome = run_io_scale(config(folder, suite))
    assert outcome.exit_code == 0, outcome.report["status"]["failures"]
    check = outcome.report["source_check"]
    assert check["chunk_checksums"] is True
    assert check["manifest_files"]["state"] == "checked"
    assert check["manifest_files"]["files"] == 3
    assert np.isfinite(check["manifest_files"]["seconds"])


def test_the_default_follows_the_backend(suite):
    """Unset, verify_source is on for cpu (and cuda) and off for native, which reads
    .qem (block checksums) and refuses an explicit --verify-source."""
    from harness.errors import UsageError
    from harness.run.io_scale.config import check_config

    folder, suite = suite
    cfg = config(folder, suite)
    assert cfg.verify_source is None
    check_config(cfg)
    assert cfg.verify_source is True and cfg.check_source_files is True
    native = config(folder, suite, backend="native")
    with pytest.raises(UsageError, match="--backend native needs --native-binary"):
        check_config(native)  # not the --verify-source refusal: the default follows
    assert native.verify_source is False
    with pytest.raises(UsageError, match="--verify-source needs --backend cpu or cuda"):
        check_config(config(folder, suite, backend="native", verify_source=True))


def test_cli_flags_are_exclusive_and_parsed():
    from harness.cli import build_parser

    parser = build_parser()
    base = ["run", "io-scale", "R", "--backend", "cpu"]
    assert parser.parse_args(base).verify_source is None
    assert parser.parse_args([*base, "--verify-source"]).verify_source is True
    assert parser.parse_args([*base, "--no-verify-source"]).verify_source is False
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "--verify-source", "--no-verify-source"])
