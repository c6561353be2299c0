"""Tests that kill survivors of the mutmut run over the ARINA reader
(tests/mutation/arina-survivors.md names each mutant a test here kills)."""

from __future__ import annotations

import os

import pytest

from quantem.stem4d.errors import SourceIntegrityError
from quantem.stem4d.io.arina import load_arina, open_arina
from quantem.stem4d.io.synthetic import write_synthetic_arina

SCAN, DET = (3, 4), (16, 12)


@pytest.fixture
def master(tmp_path):
    return write_synthetic_arina(
        tmp_path / "acq", scan_shape=SCAN, detector_shape=DET, frames_per_shard=5, processes=1
    )


def _flip(source, frame: int) -> None:
    shard = source.shard_paths[int(source.index.frame_shard[frame])]
    offset = int(source.index.frame_offset[frame]) + int(source.index.frame_nbytes[frame]) // 2
    with open(shard, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x10]))


def test_a_changed_chunk_says_what_changed_in_full(master):
    source = open_arina(master)
    _flip(source, 11)
    with pytest.raises(SourceIntegrityError) as info:
        load_arina(master, verify_source=True)
    assert info.value.path == os.fspath(source.shard_paths[2])
    assert info.value.detail == (
        "chunk changed since the frame index was built (its XXH3-64 differs from the one "
        "recorded at the first observation)"
    )
    assert info.value.fields == {"frame": 11, "shard_frame": 1}
