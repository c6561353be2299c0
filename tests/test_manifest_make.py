"""``harness manifest make``: a selection manifest the runner accepts, for data under ROOT."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.run.demo import write_demo_suite
from harness.run.manifest_make import acquisition_id

SMALL = (("small-u16", (4, 4), (16, 16), "uint16", 500.0),)


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory):
    return write_demo_suite(tmp_path_factory.mktemp("suite"), SMALL, frames_per_shard=8)


def test_manifest_make_matches_the_hand_written_manifest(suite, tmp_path: Path, capsys) -> None:
    out = tmp_path / "m.json"
    assert main(["manifest", "make", str(suite.root), "--out", str(out), "--products"]) == 0
    made = json.loads(out.read_text())["selected_acquisitions"]
    expected = json.loads(suite.manifest.read_text())["selected_acquisitions"]
    assert len(made) == len(expected) == 1
    for key in ("filename", "source_master_sha256", "shape", "dtype"):
        assert made[0][key] == expected[0][key], key
    assert len(made[0]["indexed_product_sha256"]) == 64
    # the runner's parser accepts it
    from harness.run.manifest import check_master_hashes, parse_manifest

    check_master_hashes(parse_manifest(out, suite.root))
    # never overwrites
    assert main(["manifest", "make", str(suite.root), "--out", str(out)]) == 64
    assert "never overwrites" in capsys.readouterr().err


def test_manifest_make_refuses_a_folder_without_masters(tmp_path: Path, capsys) -> None:
    assert main(["manifest", "make", str(tmp_path)]) == 64
    assert "no ARINA master files" in capsys.readouterr().err


def test_acquisition_ids_follow_the_path_and_fit_the_schema() -> None:
    root = Path("/data")
    assert acquisition_id(root / "day1" / "scan 3_master.h5", root) == "day1-scan-3"
    assert acquisition_id(root / "_master.h5", root) == "acquisition"
