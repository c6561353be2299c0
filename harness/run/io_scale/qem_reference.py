"""Archived QEM reference headers: prove a newly prepared ``.qem`` encodes the same thing.

A reference header is the archivable header document of a ``.qem`` file, the JSON
that ``harness qem header FILE`` prints (:meth:`quantem.stem4d.io.qem.reader.QemFile.header_document`):
shape, dtypes, block size, section table, metadata, and per block its mode, offset,
length and XXH3-64 checksum.

Comparison is exact on everything that determines the stored data and its layout:
version, shapes, stored and source dtype, ``block_frames``, ``n_blocks``, the length and
checksum of the PIXEL_MASK, MODEL and BLOCK_CHECKSUMS sections, the PAYLOAD length, and for every block its mode, length, checksum and
offset *relative to the payload*. Deliberately not compared: the METADATA section and
what depends on its length (absolute offsets, file size, header checksum), because the
metadata records the source's path and modification time, which differ between
machines holding the same data. The BLOCK_INDEX section's checksum is not compared
for the same reason (it holds absolute offsets); its content is, block by block.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from harness.errors import ManifestError
from harness.fsio import write_new

_HEADER_FIELDS = (
    "format",
    "version",
    "scan_shape",
    "detector_shape",
    "dtype",
    "source_dtype",
    "block_frames",
    "n_blocks",
)
_CONTENT_SECTIONS = ("PIXEL_MASK", "MODEL", "BLOCK_CHECKSUMS")
_BLOCK_FIELDS = ("mode", "length", "xxh3")


def header_document(qem_path: str | os.PathLike) -> dict[str, Any]:
    """The archivable header document of a ``.qem`` file (structure checked, payload not read)."""
    from quantem.stem4d.io.qem.reader import QemFile

    with QemFile(qem_path, verify=False) as qem:
        return qem.header_document()


def dump_header_document(document: dict[str, Any]) -> bytes:
    """Deterministic bytes, identical to what ``harness qem header`` prints."""
    return (json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n").encode()


def write_header_document(document: dict[str, Any], out_path: str | os.PathLike) -> Path:
    """Write a header document as a new file: temporary name, fsync, link (never overwrites)."""
    return write_new(
        Path(out_path), dump_header_document(document), step="writing the reference header"
    )


def write_reference_header(qem_path: str | os.PathLike, out_path: str | os.PathLike) -> Path:
    """Archive the header document of ``qem_path`` as a new file (never overwrites)."""
    return write_header_document(header_document(qem_path), out_path)


def parse_reference_header(path: str | os.PathLike) -> dict[str, Any]:
    """Read an archived header document; raise ManifestError naming what is wrong."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"{path}: cannot read the QEM reference header: {exc}") from exc
    missing = [
        k
        for k in (*_HEADER_FIELDS, "sections", "blocks")
        if not isinstance(doc, dict) or k not in doc
    ]
    if missing or doc.get("format") != "qem":
        raise ManifestError(
            f"{path}: not a QEM header document (from `harness qem header`); missing {', '.join(missing) or 'format=qem'}"
        )
    sections = doc["sections"]
    if (
        not isinstance(sections, dict)
        or "PAYLOAD" not in sections
        or not isinstance(doc["blocks"], list)
    ):
        raise ManifestError(
            f"{path}: QEM header document lacks the section table or the block list"
        )
    if len(doc["blocks"]) != doc["n_blocks"]:
        raise ManifestError(
            f"{path}: {len(doc['blocks'])} blocks listed for n_blocks={doc['n_blocks']}"
        )
    return doc


def _comparable(doc: dict[str, Any]) -> dict[str, Any]:
    payload = doc["sections"]["PAYLOAD"]["offset"]
    return {
        "header": {k: doc[k] for k in _HEADER_FIELDS},
        "sections": {
            name: (doc["sections"][name]["length"], doc["sections"][name]["xxh3"])
            for name in _CONTENT_SECTIONS
            if name in doc["sections"]
        },
        "payload_length": doc["sections"]["PAYLOAD"]["length"],
        "blocks": [
            (
                *(block[k] for k in _BLOCK_FIELDS),
                block["offset"] - payload if block["length"] else 0,
            )
            for block in doc["blocks"]
        ],
    }


def compare_header_documents(candidate: dict[str, Any], reference: dict[str, Any]) -> list[str]:
    """Differences between two header documents (empty when they encode the same data alike)."""
    cand, ref = _comparable(candidate), _comparable(reference)
    differences = [
        f"{name}: {cand['header'][name]} != reference {value}"
        for name, value in ref["header"].items()
        if cand["header"][name] != value
    ]
    if differences:
        return differences
    for name, value in ref["sections"].items():
        if cand["sections"].get(name) != value:
            differences.append(
                f"section {name} (length, xxh3) {cand['sections'].get(name)} != reference {value}"
            )
    if cand["payload_length"] != ref["payload_length"]:
        differences.append(
            f"payload length {cand['payload_length']} != reference {ref['payload_length']}"
        )
    bad_checksums = [
        i for i, (c, r) in enumerate(zip(cand["blocks"], ref["blocks"])) if c[2] != r[2]
    ]
    bad_layout = [
        i
        for i, (c, r) in enumerate(zip(cand["blocks"], ref["blocks"]))
        if (c[0], c[1], c[3]) != (r[0], r[1], r[3])
    ]
    if bad_checksums:
        shown = ", ".join(map(str, bad_checksums[:8]))
        differences.append(
            f"block checksum table differs in {len(bad_checksums)} block(s): {shown}"
        )
    if bad_layout:
        shown = ", ".join(map(str, bad_layout[:8]))
        differences.append(
            f"block layout (mode, length, offset) differs in {len(bad_layout)} block(s): {shown}"
        )
    return differences


def compare_reference_header(
    qem_path: str | os.PathLike, reference_path: str | os.PathLike
) -> list[str]:
    """Differences between a prepared ``.qem`` and an archived reference header."""
    reference = parse_reference_header(reference_path)
    return compare_header_documents(header_document(qem_path), reference)
