"""Archived QEM reference headers: prove a newly prepared ``.qem`` encodes the same thing.

A *reference header* is the first ``payload_offset`` bytes of a ``.qem`` file: the
fixed header, METADATA, PIXEL_MASK, MODEL, BLOCK_INDEX and BLOCK_CHECKSUMS sections
(docs/qem-format.md §2-§9), without the payload. It is small (kilobytes to a few MB),
so it can be archived next to a selection manifest.

Comparison covers what determines the decoded data and its byte layout: the header
fields (shape, item sizes, block size, block count), the pixel mask, the model, every
block's frame range, mode, length, word/nonzero/escape counts and offset *relative to
the payload*, the payload length, and the block checksum table, all exactly. The
METADATA section is deliberately not compared: it names the source path and
modification time, which differ between machines for the same data; those shift the
absolute offsets, hence relative offsets. The reference is itself checked (header and
section checksums) before use, so a damaged archive is an error, not a mismatch.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from harness.errors import ManifestError

_COMPARED_HEADER_FIELDS = (
    "version_major",
    "n_frames",
    "scan_shape",
    "detector_shape",
    "stored_itemsize",
    "source_itemsize",
    "block_frames",
    "n_blocks",
)


def _layout(data: bytes, label: str) -> dict:
    """Parse and check a header prefix; return the comparable layout."""
    from quantem.errors import QemFormatError
    from quantem.io.qem import format as qf
    from quantem.io.qem.checksum import xxh3

    try:
        header = qf.parse_header(data, label)
    except QemFormatError as exc:
        raise ManifestError(f"{label}: not a valid QEM reference header: {exc}") from exc
    payload = header.section(qf.SECTION_PAYLOAD)
    sections = {}
    for section_id in (
        qf.SECTION_PIXEL_MASK,
        qf.SECTION_MODEL,
        qf.SECTION_BLOCK_INDEX,
        qf.SECTION_BLOCK_CHECKSUMS,
    ):
        entry = header.section(section_id)
        name = qf.SECTION_NAMES[section_id]
        if entry.end > len(data):
            raise ManifestError(
                f"{label}: section {name} ends at byte {entry.end}, past the {len(data)} bytes given"
            )
        body = bytes(data[entry.offset : entry.end])
        if entry.present and xxh3(body) != entry.xxh3:
            raise ManifestError(
                f"{label}: section {name} checksum mismatch (damaged reference header)"
            )
        sections[name] = body
    index = np.frombuffer(sections["BLOCK_INDEX"], dtype=qf.BLOCK_INDEX_DTYPE).copy()
    index["offset"] -= np.uint64(payload.offset)
    return {
        "header": {name: getattr(header, name) for name in _COMPARED_HEADER_FIELDS},
        "payload_offset": payload.offset,
        "payload_length": payload.length,
        "pixel_mask": sections["PIXEL_MASK"],
        "model": sections["MODEL"],
        "block_index": index,
        "block_checksums": np.frombuffer(sections["BLOCK_CHECKSUMS"], dtype="<u8"),
    }


def extract_reference_header(qem_path: str | os.PathLike) -> bytes:
    """The bytes ``[0, payload_offset)`` of a ``.qem`` file."""
    from quantem.io.qem import format as qf

    with open(qem_path, "rb") as f:
        head = f.read(qf.HEADER_SIZE + qf.FOOTER_SIZE)
        header = qf.parse_header(head, str(qem_path))
        f.seek(0)
        return f.read(header.section(qf.SECTION_PAYLOAD).offset)


def write_reference_header(qem_path: str | os.PathLike, out_path: str | os.PathLike) -> Path:
    """Archive the reference header of ``qem_path`` as a new file (never overwrites)."""
    data = extract_reference_header(qem_path)
    _layout(data, str(qem_path))  # refuse to archive something that does not parse
    out = Path(out_path)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, out)
    finally:
        os.unlink(tmp)
    return out


def compare_reference_header(
    qem_path: str | os.PathLike, reference_path: str | os.PathLike
) -> list[str]:
    """Differences between a prepared ``.qem`` and an archived reference header; empty if identical."""
    reference = _layout(Path(reference_path).read_bytes(), str(reference_path))
    candidate = _layout(extract_reference_header(qem_path), str(qem_path))
    differences = []
    for name, value in reference["header"].items():
        if candidate["header"][name] != value:
            differences.append(f"header {name}: {candidate['header'][name]} != reference {value}")
    if differences:
        return differences
    for name in ("payload_length", "pixel_mask", "model"):
        if candidate[name] != reference[name]:
            differences.append(f"{name} differs")
    ref_sums, cand_sums = reference["block_checksums"], candidate["block_checksums"]
    bad_blocks = np.flatnonzero(ref_sums != cand_sums)
    if bad_blocks.size:
        shown = ", ".join(str(b) for b in bad_blocks[:8])
        differences.append(f"block checksum table differs in {bad_blocks.size} block(s): {shown}")
    ref_index, cand_index = reference["block_index"], candidate["block_index"]
    bad_entries = np.flatnonzero(ref_index != cand_index)
    if bad_entries.size:
        shown = ", ".join(str(b) for b in bad_entries[:8])
        differences.append(f"block layout differs in {bad_entries.size} block(s): {shown}")
    return differences
