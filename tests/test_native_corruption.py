"""Corrupt .qem files fail in both readers, the same way.

A file with every section and every block mode is damaged byte by byte (start,
middle and end of each section, each block extent, the padding between them, the
header fields and the footer), truncated and extended. The native program must exit
1 naming a section or block, the Python reader must raise ``QemFormatError``, and
both must name the same section (and block, where one applies): docs/qem-format.md
section 14 fixes the order of the checks, so the first failure is the same.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import xxhash
from _native_support import native_binary_fixture  # noqa: F401  (fixture)

from harness.native import NativeLoadError, run_native_load
from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.errors import QemFormatError, QemVersionError
from quantem.stem4d.io.qem.format import SECTION_NAMES
from quantem.stem4d.io.qem.reader import load_qem
from quantem.stem4d.io.qem.writer import save_qem

pytestmark = pytest.mark.native


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> bytes:
    """RANS, ZERO and RAW blocks, escapes (65535 sentinels), a pixel mask, P % 8 != 0."""
    rng = np.random.default_rng(4)
    data = rng.poisson(0.5, size=(3, 4, 5, 9)).astype(np.uint16)
    data[..., 1, 2] = 65535
    data[1, :2] = 0
    data[2, 2:] = rng.integers(256, 65535, size=(2, 5, 9))
    mask = np.zeros((5, 9), np.uint32)
    mask[1, 2] = 2
    acq = Acquisition(data, {"pixel_mask": mask}, mask == 0, "cpu")
    path = save_qem(acq, tmp_path_factory.mktemp("pristine") / "p.qem", block_frames=2)
    return path.read_bytes()


def _regions(raw: bytes) -> list[tuple[str, int, int]]:
    """(name, start, stop) of the header fields, sections, block extents, gaps, footer."""
    regions = [("header.magic", 0, 8), ("header.fields", 8, 64), ("header.table", 64, 232)]
    regions += [("header.reserved", 232, 248), ("header.checksum", 248, 256)]
    spans = []
    for section_id, name in enumerate(SECTION_NAMES):
        offset, length, _ = struct.unpack_from("<QQQ", raw, 64 + 24 * section_id)
        if length:
            spans.append((name, offset, offset + length))
    n_blocks = struct.unpack_from("<I", raw, 56)[0]
    index_offset = struct.unpack_from("<Q", raw, 64 + 24 * 3)[0]
    for b in range(n_blocks):
        _, _, mode, offset, length = struct.unpack_from("<QIIQQ", raw, index_offset + 48 * b)
        if length:
            spans.append((f"block{b}.mode{mode}", offset, offset + length))
            pad_end = -(-(offset + length) // 16) * 16
            if pad_end > offset + length:
                spans.append((f"block{b}.padding", offset + length, pad_end))
    spans.sort(key=lambda s: s[1])
    previous = 256
    for name, start, stop in spans:
        if start > previous:
            regions.append((f"gap-before-{name}", previous, start))
        regions.append((name, start, stop))
        previous = max(previous, stop)
    footer = len(raw) - 32
    if footer > previous:
        regions.append(("gap-before-footer", previous, footer))
    regions.append(("footer", footer, len(raw)))
    return regions


def _python_error(path: Path) -> QemFormatError | None:
    try:
        with load_qem(path) as acq:
            np.asarray(acq.data)
    except QemFormatError as exc:
        return exc
    return None


def _native_error(binary: Path, path: Path) -> NativeLoadError | None:
    try:
        run_native_load(binary, path, threads=2)
    except NativeLoadError as exc:
        return exc
    return None


def _location(python: QemFormatError) -> tuple[str | None, int | None]:
    """Where the Python reader says the error is, as (section, block). Nonzero padding
    between sections is an error of the section that follows (docs/qem-format.md
    section 14 step 6, as clarified)."""
    if isinstance(python, QemVersionError):
        return ("header", None)
    block = python.fields.get("block")
    return (python.fields.get("section"), None if block is None else int(block))


def test_pristine_file_loads_in_both(native_binary, pristine, tmp_path) -> None:
    path = tmp_path / "ok.qem"
    path.write_bytes(pristine)
    assert _python_error(path) is None
    doc = run_native_load(native_binary, path)
    assert doc["block_modes"]["zero"] and doc["block_modes"]["raw"] and doc["block_modes"]["rans"]


def test_every_region_damaged_fails_in_both_readers_alike(
    native_binary, pristine, tmp_path
) -> None:
    path = tmp_path / "bad.qem"
    checked = 0
    for name, start, stop in _regions(pristine):
        for at in sorted({start, (start + stop) // 2, stop - 1}):
            for bit in (0, 5):
                raw = bytearray(pristine)
                raw[at] ^= 1 << bit
                path.write_bytes(bytes(raw))
                python = _python_error(path)
                native = _native_error(native_binary, path)
                where = f"{name} byte {at} bit {bit}"
                assert python is not None, f"Python reader accepted damage in {where}"
                assert native is not None, f"native reader accepted damage in {where}"
                assert native.returncode == 1, where
                if native.kind == "unsupported_version":
                    assert isinstance(python, QemVersionError), where
                    continue
                assert native.kind == "format", (where, native.message)
                assert (native.section, native.block) == _location(python), (
                    f"{where}: native says {native.message!r}, Python says {python}"
                )
                checked += 1
    assert checked > 50


@pytest.mark.parametrize("keep", [0, 1, 100, 255, 256, 288, -33, -32, -1, -4096])
def test_truncated_or_extended_file_fails_in_both(native_binary, pristine, tmp_path, keep) -> None:
    raw = pristine[:keep] if keep >= 0 else pristine[: len(pristine) + keep]
    path = tmp_path / "short.qem"
    path.write_bytes(raw)
    python = _python_error(path)
    native = _native_error(native_binary, path)
    assert python is not None and native is not None
    assert native.returncode == 1 and native.section == python.fields.get("section") == "header"


def test_extended_file_fails_in_both(native_binary, pristine, tmp_path) -> None:
    path = tmp_path / "long.qem"
    path.write_bytes(pristine + b"\0")
    python = _python_error(path)
    native = _native_error(native_binary, path)
    assert python is not None and native is not None
    assert native.section == python.fields.get("section") == "header"


def _reseal(raw: bytearray, section_ids: tuple[int, ...] = ()) -> bytes:
    """Recompute the given sections' checksums, the header and the footer after an
    edit, so only the structural rule under test can fail."""
    for section_id in section_ids:
        offset, length, _ = struct.unpack_from("<QQQ", raw, 64 + 24 * section_id)
        digest = xxhash.xxh3_64_intdigest(bytes(raw[offset : offset + length]))
        struct.pack_into("<Q", raw, 64 + 24 * section_id + 16, digest)
    struct.pack_into("<Q", raw, 248, xxhash.xxh3_64_intdigest(bytes(raw[:248])))
    footer = len(raw) - 32
    struct.pack_into("<Q", raw, footer + 16, struct.unpack_from("<Q", raw, 248)[0])
    struct.pack_into(
        "<Q", raw, footer + 24, xxhash.xxh3_64_intdigest(bytes(raw[footer : footer + 24]))
    )
    return bytes(raw)


def _metadata_edit(pristine: bytes, old: bytes, new: bytes) -> bytes:
    offset, length, _ = struct.unpack_from("<QQQ", pristine, 64)
    text = pristine[offset : offset + length]
    edited = text.replace(old, new, 1)
    assert edited != text and len(edited) == len(text)
    raw = bytearray(pristine)
    raw[offset : offset + length] = edited
    return _reseal(raw, (0,))


def _rans_block(pristine: bytes) -> tuple[int, int, int, int]:
    """(block, offset, length, n_escapes) of the first RANS block that has escapes."""
    index = struct.unpack_from("<Q", pristine, 64 + 24 * 3)[0]
    for b in range(struct.unpack_from("<I", pristine, 56)[0]):
        _, _, mode, offset, length, _, _, escapes = struct.unpack_from(
            "<QIIQQIII", pristine, index + 48 * b
        )
        if mode == 2 and escapes:
            return b, offset, length, escapes
    raise AssertionError("no RANS block with escapes")


def _reseal_block(pristine: bytes, raw: bytearray, b: int, offset: int, length: int) -> bytes:
    checksums = struct.unpack_from("<Q", pristine, 64 + 24 * 4)[0]
    extent_end = -(-(offset + length) // 16) * 16
    digest = xxhash.xxh3_64_intdigest(bytes(raw[offset:extent_end]))
    struct.pack_into("<Q", raw, checksums + 8 * b, digest)
    return _reseal(raw, (4,))


def _edits(pristine: bytes) -> dict[str, tuple[bytes, tuple[str, int | None] | None]]:
    """Resealed files: name -> (bytes, expected (section, block) or None = valid)."""
    index = struct.unpack_from("<Q", pristine, 64 + 24 * 3)[0]
    model = struct.unpack_from("<Q", pristine, 64 + 24 * 2)[0]
    b, offset, length, escapes = _rans_block(pristine)
    cases: dict[str, tuple[bytes, tuple[str, int | None] | None]] = {}
    cases["metadata dtype"] = (
        _metadata_edit(pristine, b'"dtype":"uint16"', b'"dtype":"uint32"'),
        ("METADATA", None),
    )
    cases["metadata n_frames"] = (
        _metadata_edit(pristine, b'"n_frames":12', b'"n_frames":13'),
        ("METADATA", None),
    )
    cases["metadata not JSON"] = (
        _metadata_edit(pristine, b'"n_frames":12,', b'"n_frames":12 '),
        ("METADATA", None),
    )
    cases["metadata mask encoding"] = (
        _metadata_edit(pristine, b'"encoding":"section"', b'"encoding":"sectiom"'),
        ("METADATA", None),
    )
    raw = bytearray(pristine)
    struct.pack_into("<I", raw, 60, 5)
    cases["1.0 reserved header field"] = (_reseal(raw), ("header", None))
    raw = bytearray(pristine)
    struct.pack_into("<H", raw, 10, 1)
    struct.pack_into("<I", raw, 60, 5)
    cases["1.1 reserved header field (read)"] = (_reseal(raw), None)
    raw = bytearray(pristine)
    struct.pack_into("<I", raw, index + 48 * 1 + 44, 1)
    cases["block index reserved"] = (_reseal(raw, (3,)), ("BLOCK_INDEX", 1))
    raw = bytearray(pristine)
    struct.pack_into("<I", raw, model + 12, 1)
    cases["model reserved"] = (_reseal(raw, (2,)), ("MODEL", None))
    raw = bytearray(pristine)
    raw[offset + 21] ^= 0x10  # lane 5's state
    cases["rans lane state"] = (_reseal_block(pristine, raw, b, offset, length), ("PAYLOAD", b))
    raw = bytearray(pristine)
    struct.pack_into("<H", raw, offset + length - 2 * escapes, 200)
    cases["escape below 256"] = (_reseal_block(pristine, raw, b, offset, length), ("PAYLOAD", b))
    return cases


@pytest.mark.parametrize(
    "name",
    [
        "metadata dtype",
        "metadata n_frames",
        "metadata not JSON",
        "metadata mask encoding",
        "1.0 reserved header field",
        "1.1 reserved header field (read)",
        "block index reserved",
        "model reserved",
        "rans lane state",
        "escape below 256",
    ],
)
def test_structural_rules_behind_the_checksums(native_binary, pristine, tmp_path, name) -> None:
    raw, expected = _edits(pristine)[name]
    path = tmp_path / "resealed.qem"
    path.write_bytes(raw)
    python = _python_error(path)
    native = _native_error(native_binary, path)
    if expected is None:
        assert python is None and native is None, (python, native and native.message)
        return
    assert python is not None and native is not None, (python, native)
    assert (native.section, native.block) == _location(python) == expected, native.message


@pytest.mark.parametrize(
    ("old", "new"),
    [(b'"n_masked":1', b'"n_masked":3'), (b'"dtype":"uint32"', b'"dtype":"uint64"')],
)
def test_metadata_must_agree_with_the_pixel_mask(
    native_binary, pristine, tmp_path, old, new
) -> None:
    """docs/qem-format.md section 14 step 9 (clarified): metadata.pixel_mask agrees
    with the PIXEL_MASK section."""
    path = tmp_path / "mask-metadata.qem"
    path.write_bytes(_metadata_edit(pristine, old, new))
    native = _native_error(native_binary, path)
    python = _python_error(path)
    assert native is not None and python is not None, (native, python)
    assert native.section == python.fields.get("section") == "METADATA", native.message
