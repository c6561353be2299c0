"""Bad .qem input: every corruption gives a QemFormatError naming the section or block.

Never a crash, a hang, a huge allocation or an out-of-bounds read. Files whose
checksums are *recomputed* after an edit ("resealed") test the structural checks that
stand behind the checksums.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from _qem_reference import ReferenceError, read_reference
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.errors import QemFormatError, QemVersionError
from quantem.stem4d.io.qem import format as fmt
from quantem.stem4d.io.qem.checksum import xxh3
from quantem.stem4d.io.qem.reader import QemFile, load_qem
from quantem.stem4d.io.qem.writer import save_qem


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> bytes:
    """A small file with RANS, ZERO and RAW blocks, escapes and a pixel mask."""
    rng = np.random.default_rng(21)
    data = rng.poisson(0.6, size=(3, 4, 6, 10)).astype(np.uint16)
    data[..., 2, 3] = 65535
    data[1, :2] = 0
    data[2, 3] = rng.integers(256, 65535, size=(6, 10))
    mask = np.zeros((6, 10), dtype=np.uint32)
    mask[2, 3] = 2
    acq = Acquisition(data, {"pixel_mask": mask}, mask == 0, "cpu")
    path = save_qem(acq, tmp_path_factory.mktemp("good") / "good.qem", block_frames=2)
    raw = path.read_bytes()
    with QemFile(path) as qem:
        assert set(qem.block_index["mode"].tolist()) == {0, 1, 2}
    return raw


def open_bytes(tmp_path, data: bytes, verify: bool = True) -> np.ndarray:
    path = tmp_path / "x.qem"
    path.write_bytes(data)
    with QemFile(path, verify=verify) as qem:
        if verify:
            qem.verify_checksums()
        return qem.decode_blocks(np.arange(qem.n_blocks))


def expect_error(tmp_path, data: bytes, match: str | None = None) -> QemFormatError:
    with pytest.raises(QemFormatError, match=match) as info:
        open_bytes(tmp_path, data)
    error = info.value
    assert "section" in error.fields or "block" in error.fields, str(error)
    assert str(tmp_path / "x.qem") in str(error)
    return error


def reseal(data: bytearray) -> bytes:
    """Recompute every section checksum, the header checksum and the footer."""
    for i in range(fmt.N_SECTIONS):
        offset, length, _ = struct.unpack_from("<QQQ", data, 64 + 24 * i)
        if length and i != fmt.SECTION_PAYLOAD and offset + length <= len(data):
            struct.pack_into(
                "<Q", data, 64 + 24 * i + 16, xxh3(bytes(data[offset : offset + length]))
            )
    struct.pack_into("<Q", data, 248, xxh3(bytes(data[:248])))
    size = struct.unpack_from("<Q", data, 16)[0]
    if size == len(data):
        data[-32:] = fmt.pack_footer(size, struct.unpack_from("<Q", data, 248)[0])
    return bytes(data)


def section(data: bytes, section_id: int) -> tuple[int, int]:
    offset, length, _ = struct.unpack_from("<QQQ", data, 64 + 24 * section_id)
    return offset, length


def test_good_file_is_accepted(tmp_path, good):
    assert open_bytes(tmp_path, good).shape == (12, 6, 10)
    read_reference(good)


def flip_positions(tmp_path, good, positions):
    path = tmp_path / "x.qem"
    for position in positions:
        damaged = bytearray(good)
        damaged[position] ^= 1 << (position % 8)
        path.write_bytes(damaged)
        with pytest.raises(QemFormatError) as info, QemFile(path) as qem:
            qem.verify_checksums()
            qem.decode_blocks(np.arange(qem.n_blocks))
        fields = info.value.fields
        assert "section" in fields or "block" in fields, (position, str(info.value))


def test_sampled_byte_flips_are_detected(tmp_path, good):
    """One flipped bit in every 11th byte (and in the first/last 300 bytes)."""
    positions = sorted({*range(0, len(good), 11), *range(300), *range(len(good) - 300, len(good))})
    flip_positions(tmp_path, good, positions)


@pytest.mark.slow
def test_every_byte_flipped_is_detected(tmp_path, good):
    """One flipped bit in every byte of the file (bit index = offset mod 8)."""
    flip_positions(tmp_path, good, range(len(good)))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_random_bit_flips(tmp_path, good, data):
    damaged = bytearray(good)
    flips = data.draw(
        st.lists(st.integers(0, 8 * len(good) - 1), min_size=1, max_size=4, unique=True)
    )
    for bit in flips:
        damaged[bit // 8] ^= 1 << (bit % 8)
    expect_error(tmp_path, bytes(damaged))
    # the same file without payload checksums: an error or a decode, never a crash
    try:
        frames = open_bytes(tmp_path, bytes(damaged), verify=False)
        assert frames.shape == (12, 6, 10)
    except QemFormatError:
        pass
    with pytest.raises(ReferenceError):
        read_reference(bytes(damaged))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cut=st.integers(min_value=0, max_value=10**6))
def test_truncation(tmp_path, good, cut):
    size = cut % len(good)
    error = expect_error(tmp_path, good[:size])
    assert error.fields.get("section") in ("header", "footer")


def test_appended_bytes(tmp_path, good):
    expect_error(tmp_path, good + b"\0" * 64, match="truncated|size")


def test_empty_and_foreign_files(tmp_path):
    expect_error(tmp_path, b"", match="too short")
    expect_error(tmp_path, b"\x89HDF\r\n\x1a\n" + bytes(400), match="magic")


def test_wrong_magic(tmp_path, good):
    data = bytearray(good)
    data[1:4] = b"XYZ"
    expect_error(tmp_path, bytes(data), match="magic")


def test_unknown_major_version(tmp_path, good):
    data = bytearray(good)
    struct.pack_into("<H", data, 8, 3)
    with pytest.raises(QemVersionError, match=r"unsupported \.qem major version 3"):
        open_bytes(tmp_path, reseal(data))


def test_a_1_0_file_relabelled_2_0_is_refused(tmp_path, good):
    # 2.0 reads offset 60 as band_rows; a 1.0 file has 0 there: refused, never misread
    data = bytearray(good)
    struct.pack_into("<H", data, 8, 2)
    expect_error(tmp_path, reseal(data), match="band_rows 0 out of range")


def test_newer_minor_version_is_read(tmp_path, good):
    data = bytearray(good)
    struct.pack_into("<H", data, 10, 7)
    struct.pack_into("<Q", data, 232, 12345)  # reserved fields may be used by 1.7
    assert open_bytes(tmp_path, reseal(data)).shape == (12, 6, 10)


def test_reserved_header_field(tmp_path, good):
    data = bytearray(good)
    struct.pack_into("<I", data, 60, 1)
    expect_error(tmp_path, reseal(data), match="reserved")


@pytest.mark.parametrize(
    ("offset", "fmt_char", "value", "match"),
    [
        (24, "Q", 2**63, "frame count"),  # n_frames
        (32, "I", 0, "frame count"),  # scan_r
        (40, "I", 0, "detector shape"),  # det_r
        (48, "B", 3, "item sizes"),  # stored_itemsize
        (52, "I", 2**31 - 1, "block_frames"),
        (56, "I", 2**32 - 1, "n_blocks"),
        (16, "Q", 2**60, "header says"),  # file_size
    ],
)
def test_oversized_or_inconsistent_header_fields(tmp_path, good, offset, fmt_char, value, match):
    data = bytearray(good)
    struct.pack_into("<" + fmt_char, data, offset, value)
    expect_error(tmp_path, reseal(data), match=match)


def test_frame_pixels_over_the_limit(tmp_path, good):
    data = bytearray(good)
    struct.pack_into("<II", data, 40, 65535, 65535)
    expect_error(tmp_path, reseal(data), match="pixels per frame")


def test_section_offset_not_canonical(tmp_path, good):
    data = bytearray(good)
    offset, _ = section(good, fmt.SECTION_MODEL)
    struct.pack_into("<Q", data, 64 + 24 * fmt.SECTION_MODEL, offset + 64)
    error = expect_error(tmp_path, reseal(data))
    assert error.fields["section"] == "MODEL"


def test_section_length_past_the_file(tmp_path, good):
    data = bytearray(good)
    struct.pack_into("<Q", data, 64 + 24 * fmt.SECTION_METADATA + 8, 2**62)
    expect_error(tmp_path, reseal(data), match="METADATA")


def test_nonzero_padding_between_sections(tmp_path, good):
    data = bytearray(good)
    offset, length = section(good, fmt.SECTION_METADATA)
    gap = offset + length
    assert gap % 64 != 0, "test needs padding after METADATA"
    data[gap] = 1
    error = expect_error(tmp_path, reseal(data), match="padding")
    assert error.fields["section"] == "PIXEL_MASK"  # the section after the padding


def edit_index(good: bytes, block: int, field: str, value: int) -> bytes:
    data = bytearray(good)
    offset, _ = section(good, fmt.SECTION_BLOCK_INDEX)
    entry = offset + fmt.BLOCK_ENTRY_SIZE * block + fmt.BLOCK_INDEX_DTYPE.fields[field][1]
    size = fmt.BLOCK_INDEX_DTYPE.fields[field][0].itemsize
    data[entry : entry + size] = value.to_bytes(size, "little")
    return reseal(data)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("offset", 0),
        ("offset", 2**63),
        ("length", 2**40),
        ("length", 3),
        ("mode", 3),
        ("n_frames", 2**31),
        ("frame_start", 1),
        ("n_words", 2**32 - 1),
        ("n_escapes", 2**32 - 1),
        ("n_nonzero", 2**32 - 1),
        ("band", 1),
    ],
)
def test_block_index_inconsistencies(tmp_path, good, field, value):
    error = expect_error(tmp_path, edit_index(good, 1, field, value))
    assert error.fields.get("section") == "BLOCK_INDEX"
    assert error.fields.get("block") in (0, 1)


def rans_block(good: bytes) -> int:
    path_index = section(good, fmt.SECTION_BLOCK_INDEX)[0]
    index = np.frombuffer(good, dtype=fmt.BLOCK_INDEX_DTYPE, count=6, offset=path_index)
    return int(np.flatnonzero(index["mode"] == fmt.MODE_RANS)[0])


def test_block_checksum_names_the_block(tmp_path, good):
    data = bytearray(good)
    checks, _ = section(good, fmt.SECTION_BLOCK_CHECKSUMS)
    block = rans_block(good)
    data[checks + 8 * block] ^= 1
    error = expect_error(tmp_path, reseal(data), match="block checksum")
    assert error.fields["block"] == block


def test_corrupt_rans_stream_without_checksums_is_caught_by_structure(tmp_path, good):
    """Damage RANS words, recompute the block checksum: the decode checks still fail."""
    index_offset, _ = section(good, fmt.SECTION_BLOCK_INDEX)
    index = np.frombuffer(good, dtype=fmt.BLOCK_INDEX_DTYPE, count=6, offset=index_offset)
    checks, _ = section(good, fmt.SECTION_BLOCK_CHECKSUMS)
    failures = 0
    for block in np.flatnonzero(index["mode"] == fmt.MODE_RANS):
        entry = index[block]
        for word in range(int(entry["n_words"])):
            data = bytearray(good)
            position = int(entry["offset"]) + 128 + 2 * word
            data[position] ^= 0x5A
            extent_end = fmt.block_extent_end(int(entry["offset"]), int(entry["length"]))
            struct.pack_into(
                "<Q",
                data,
                checks + 8 * int(block),
                xxh3(bytes(data[int(entry["offset"]) : extent_end])),
            )
            try:
                open_bytes(tmp_path, reseal(data))
            except QemFormatError as exc:
                assert exc.fields.get("block") == int(block)
                failures += 1
    # the final-state and word-count checks catch (nearly) every damaged word
    assert failures >= 0.9 * sum(
        int(index[b]["n_words"]) for b in np.flatnonzero(index["mode"] == 2)
    )


def test_bad_frequency_table(tmp_path, good):
    data = bytearray(good)
    offset, length = section(good, fmt.SECTION_MODEL)
    data[offset + length - 2] ^= 1  # last frequency of the last context
    expect_error(tmp_path, reseal(data), match="sums to")


def test_bad_class_map(tmp_path, good):
    data = bytearray(good)
    offset, _ = section(good, fmt.SECTION_MODEL)
    data[offset + 16] = 9
    expect_error(tmp_path, reseal(data), match="class map")


def test_bad_metadata(tmp_path, good):
    data = bytearray(good)
    offset, length = section(good, fmt.SECTION_METADATA)
    text = bytes(data[offset : offset + length]).replace(
        b'"scan_shape":[3,4]', b'"scan_shape":[4,3]'
    )
    assert len(text) == length
    data[offset : offset + length] = text
    expect_error(tmp_path, reseal(data), match="scan_shape")
    data[offset] = ord("[")
    expect_error(tmp_path, reseal(data), match="METADATA")


def test_metadata_mask_count_must_agree(tmp_path, good):
    data = bytearray(good)
    offset, length = section(good, fmt.SECTION_METADATA)
    text = bytes(data[offset : offset + length])
    assert b'"n_masked":1' in text
    data[offset : offset + length] = text.replace(b'"n_masked":1', b'"n_masked":2')
    expect_error(tmp_path, reseal(data), match="pixel_mask")
    with pytest.raises(ReferenceError):
        read_reference(reseal(data))


def test_missing_file(tmp_path):
    from quantem.stem4d.errors import SourceNotFoundError

    with pytest.raises(SourceNotFoundError):
        load_qem(tmp_path / "nope.qem")


def test_cli_verify_names_the_bad_block(tmp_path, good):
    from harness.cli import main

    data = bytearray(good)
    index_offset, _ = section(good, fmt.SECTION_BLOCK_INDEX)
    index = np.frombuffer(good, dtype=fmt.BLOCK_INDEX_DTYPE, count=6, offset=index_offset)
    block = rans_block(good)
    data[int(index[block]["offset"]) + 130] ^= 0x10
    path = tmp_path / "bad.qem"
    path.write_bytes(bytes(data))
    assert main(["qem", "verify", str(path)]) == 1
    path.write_bytes(good)
    assert main(["qem", "verify", str(path)]) == 0
