"""QEM reference headers: exact comparison of layout and checksums, metadata-independent."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import numpy as np
import pytest

from harness.errors import ManifestError
from harness.run.io_scale.qem_reference import (
    compare_header_documents,
    compare_reference_header,
    header_document,
    parse_reference_header,
    write_reference_header,
)
from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.io.qem.writer import save_qem


def _acquisition(seed: int, identity: str) -> Acquisition:
    rng = np.random.default_rng(seed)
    data = rng.poisson(2.0, size=(4, 5, 16, 16)).astype(np.uint16)
    data[0, 0, 3, 3] = 300  # needs uint16 storage and escapes
    metadata = {
        "scan_shape": (4, 5),
        "detector_shape": (16, 16),
        "dtype": "uint16",
        "n_frames": 20,
        "pixel_mask": np.zeros((16, 16), np.uint32),
        "source_identity": {"path": identity},
    }
    return Acquisition(data, metadata, np.ones((16, 16), bool), "cpu")


@pytest.fixture
def files(tmp_path):
    a = save_qem(_acquisition(0, "/short"), tmp_path / "a.qem", block_frames=3)
    # same counts, much longer metadata: every absolute offset shifts
    b = save_qem(
        _acquisition(0, "/a/much/longer/path/" + "x" * 300), tmp_path / "b.qem", block_frames=3
    )
    c = save_qem(_acquisition(1, "/short"), tmp_path / "c.qem", block_frames=3)
    return a, b, c


def test_same_data_matches_even_when_metadata_moves_offsets(files, tmp_path):
    a, b, _ = files
    ref = write_reference_header(a, tmp_path / "a.qem-header.json")
    doc_a, doc_b = header_document(a), header_document(b)
    assert doc_a["sections"]["PAYLOAD"]["offset"] != doc_b["sections"]["PAYLOAD"]["offset"] or (
        doc_a["sections"]["METADATA"]["length"] != doc_b["sections"]["METADATA"]["length"]
    )
    assert compare_reference_header(b, ref) == []
    assert compare_reference_header(a, ref) == []


def test_other_data_differs_in_checksums(files, tmp_path):
    a, _, c = files
    ref = write_reference_header(a, tmp_path / "a.qem-header.json")
    differences = compare_reference_header(c, ref)
    assert differences and any("checksum" in d or "MODEL" in d for d in differences)


def test_single_block_changes_are_named(files):
    a, _, _ = files
    doc = header_document(a)
    tampered = copy.deepcopy(doc)
    tampered["blocks"][2]["xxh3"] = "0" * 16
    assert compare_header_documents(doc, tampered) == [
        "block checksum table differs in 1 block(s): 2"
    ]
    moved = copy.deepcopy(doc)
    moved["blocks"][1]["length"] += 16
    assert (
        "block layout (mode, length, offset) differs in 1 block(s): 1"
        in compare_header_documents(doc, moved)
    )
    shape = copy.deepcopy(doc)
    shape["block_frames"] = 4
    assert compare_header_documents(doc, shape) == ["block_frames: 3 != reference 4"]


def test_reference_written_equals_harness_qem_header_output(files, tmp_path):
    a, _, _ = files
    ref = write_reference_header(a, tmp_path / "a.qem-header.json")
    done = subprocess.run(
        [sys.executable, "-m", "harness", "qem", "header", str(a)], capture_output=True, check=True
    )
    assert ref.read_bytes() == done.stdout
    with pytest.raises(FileExistsError):
        write_reference_header(a, ref)  # never overwrites


def test_bad_reference_documents_are_refused(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ManifestError, match="cannot read"):
        parse_reference_header(bad)
    bad.write_text(json.dumps({"format": "qem"}))
    with pytest.raises(ManifestError, match="missing"):
        parse_reference_header(bad)
