"""The ``mask_lines`` floor of a masked product: the lines it must read, measured; a BF over
a small disk reads a fraction of the data and once beat the whole-data floor."""

from __future__ import annotations

import numpy as np
import pytest

from harness.run.floors import mask_lines as ml
from quantem.stem4d.detector.masks import annulus_mask, disk_mask


def test_line_ranges_cover_whole_lines_and_merge():
    mask = np.zeros((4, 64), bool)  # uint16: 128 bytes a row, two lines
    mask[0, 3:5] = True  # bytes 6..10 -> line [0, 64)
    mask[0, 30:34] = True  # bytes 60..68 -> lines [0, 128): merged with the first
    mask[2, 40:41] = True  # byte 336 of the frame -> line [320, 384)
    ranges = ml.line_ranges(mask, 2, mask.size * 2)
    assert ranges.tolist() == [[0, 128], [320, 384]]
    assert ml.read_lines_bytes(mask, 2, mask.size * 2) == 192


def test_the_smaller_read_of_mask_and_complement():
    det = (64, 64)
    validity = np.ones(det, bool)
    disk = disk_mask(det, (32, 32), 6)
    assert ml.smaller_read(disk, validity, 2) is disk
    ring = annulus_mask(det, (32, 32), 6, None)  # everything outside the disk
    picked = ml.smaller_read(ring, validity, 2)
    np.testing.assert_array_equal(picked, validity & ~ring)


def test_the_floor_reads_the_lines_and_checks_its_fold():
    rng = np.random.default_rng(5)
    data = rng.integers(0, 60000, (8, 8, 64, 64), dtype=np.uint16)
    validity = np.ones((64, 64), bool)
    disk = disk_mask((64, 64), (32, 32), 6)
    floor = ml.mask_lines_floor(data, disk, validity, threads=[1, 2], repeats=2)
    per_frame = ml.read_lines_bytes(disk, 2, 64 * 64 * 2)
    assert floor["method"] == ml.MASK_LINES and floor["bytes"] == per_frame * 64
    assert 0 < floor["bytes"] < data.nbytes / 3 and floor["seconds"] > 0
    assert floor["settings"]["read"] == "mask" and {s["threads"] for s in floor["sweep"]} == {1, 2}


def test_a_fold_that_skips_words_fails(monkeypatch):
    data = np.random.default_rng(1).integers(1, 60000, (3, 1, 32, 32), dtype=np.uint16)
    mask = disk_mask((32, 32), (16, 16), 5)

    def short(words, starts, stops, first, last):  # leaves out each range's last word
        acc = 0
        for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
            acc ^= int(np.bitwise_xor.reduce(words[first:last, a : b - 1], axis=None))
        return np.uint64(acc)

    monkeypatch.setattr(ml, "_fold", short)
    with pytest.raises(RuntimeError, match="folded"):
        ml.mask_lines_floor(data, mask, np.ones((32, 32), bool), threads=[1], repeats=1)


@pytest.mark.parametrize("frames", [1, 3, 4, 9])
def test_the_fold_reads_every_frame_four_at_a_time_and_the_rest(frames):
    data = np.random.default_rng(frames).integers(1, 60000, (frames, 1, 32, 32), dtype=np.uint16)
    mask = disk_mask((32, 32), (16, 16), 5)
    floor = ml.mask_lines_floor(data, mask, np.ones((32, 32), bool), threads=[1, 2], repeats=1)
    assert floor["bytes"] == ml.read_lines_bytes(mask, 2, 32 * 32 * 2) * frames


def test_an_adf_without_frame_totals_is_bounded_by_its_own_lines():
    # Its complement is the smaller read only once the totals are known: before that, a
    # floor over the complement's lines is one no exact ADF can reach (it read 4.8x).
    data = np.random.default_rng(7).integers(0, 60000, (4, 4, 64, 64), dtype=np.uint16)
    validity = np.ones((64, 64), bool)
    ring = annulus_mask((64, 64), (32, 32), 8, None)
    fresh = ml.mask_lines_floor(data, ring, validity, threads=[1], repeats=1)
    assert fresh["settings"]["read"] == "mask"
    assert fresh["bytes"] == ml.read_lines_bytes(ring, 2, 64 * 64 * 2) * 16
    known = ml.mask_lines_floor(data, ring, validity, threads=[1], repeats=1, totals_known=True)
    assert known["settings"]["read"] == "complement" and known["bytes"] < fresh["bytes"] / 3
