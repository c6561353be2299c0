"""The byte-level test vector of docs/qem-format.md §18.

The fixture file is never regenerated to make a change pass: a change that alters
its bytes is a format or encoder-policy change and needs a new vector and version.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from _qem_reference import read_reference

from quantem.stem4d.acquisition import Acquisition

REPO = Path(__file__).resolve().parents[1]
VECTOR = REPO / "tests" / "data" / "qem-v1.0-vector.qem"
SPEC = REPO / "docs" / "qem-format.md"


def vector_counts() -> np.ndarray:
    """The counts of §18, built from the spec's formulas (independently of any reader)."""
    d = np.zeros((24, 66), dtype=np.uint16)
    for t in range(8):
        for p in range(66):
            x = (t * 131 + p * 29 + 7) % 19
            d[t, p] = x if x < 6 else 0
    d[0, 65], d[3, 10], d[5, 33], d[7, 0] = 65535, 256, 300, 255
    for t in range(16, 24):
        for p in range(66):
            d[t, p] = 256 + ((t * 66 + p) * 97) % 60000
    return d.reshape(3, 8, 6, 11)


def vector_mask() -> np.ndarray:
    mask = np.zeros(66, dtype=np.uint32)
    mask[12], mask[65] = 1, 2
    return mask.reshape(6, 11)


def parse_hexdump(text: str) -> bytes:
    """Undo ``hexdump -C`` (including ``*`` runs of repeated lines)."""
    out = bytearray()
    previous = b""
    repeat = False
    for line in text.splitlines():
        if line.strip() == "*":
            repeat = True
            continue
        match = re.match(r"^([0-9a-f]{8})((?:\s+[0-9a-f]{2})*)", line)
        if not match:
            continue
        offset = int(match.group(1), 16)
        if repeat:
            while len(out) < offset:
                out += previous
            repeat = False
        assert len(out) == offset, (len(out), offset)
        row = bytes(int(h, 16) for h in match.group(2).split())
        out += row
        previous = row
    return bytes(out)


def test_spec_hexdump_equals_the_fixture():
    text = SPEC.read_text()
    section = text[text.index("## 18. Test vector") :]
    blocks = re.findall(r"```\n(00000000.*?)```", section, flags=re.S)
    assert len(blocks) == 1
    assert parse_hexdump(blocks[0]) == VECTOR.read_bytes()


def test_reference_decoder_reads_the_vector():
    result = read_reference(VECTOR.read_bytes())
    np.testing.assert_array_equal(result["frames"].reshape(3, 8, 6, 11), vector_counts())
    np.testing.assert_array_equal(result["pixel_mask"], vector_mask())


def test_numba_reader_reads_the_vector():
    from quantem.stem4d.io.qem.reader import QemFile, load_qem

    with QemFile(VECTOR) as qem:
        assert [int(m) for m in qem.block_index["mode"]] == [2, 0, 1]
        assert int(qem.block_index["n_words"][0]) == 43
        assert int(qem.block_index["n_escapes"][0]) == 3
        assert qem.model.group_class.tolist() == [1] * 8 + [0]
        states = qem.lane_states()
        assert states.shape == (3, 32)
        assert hex(int(states[0, 0])) == "0xa7945"  # lane 0 of block 0, as in §18
        assert not states[1:].any()  # ZERO and RAW blocks have no lanes
    acq = load_qem(VECTOR, apply_mask=False)
    np.testing.assert_array_equal(acq.data, vector_counts())
    np.testing.assert_array_equal(acq.metadata["pixel_mask"], vector_mask())
    assert acq.data.dtype == np.uint16


def test_writer_reproduces_the_vector(tmp_path):
    from quantem.stem4d.io.qem.writer import save_qem

    acq = Acquisition(vector_counts(), {"pixel_mask": vector_mask()}, vector_mask() == 0, "cpu")
    out = save_qem(acq, tmp_path / "v.qem", block_frames=8, n_classes=2)
    assert out.read_bytes() == VECTOR.read_bytes()


@pytest.mark.parametrize("threads", [1, 2])
def test_vector_decodes_the_same_with_any_thread_count(threads):
    from quantem.stem4d.io.qem.reader import load_qem

    np.testing.assert_array_equal(
        load_qem(VECTOR, threads=threads, apply_mask=False).data, vector_counts()
    )
