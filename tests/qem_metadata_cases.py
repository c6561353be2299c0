"""Conformance cases for the ``.qem`` METADATA object (docs/qem-format.md §5).

Shared by both readers' tests (``tests/test_qem_metadata_conformance.py``): each case
edits the METADATA JSON of a valid file and says whether §5 allows the result. Both
the Python reader and the native one must accept exactly the valid cases and reject
the others naming the METADATA section. Each edit is resealed (section checksum,
header, footer) and keeps the section's length (a filler key, which readers must
ignore, takes up the difference), so only the rule under test can fail.
"""

from __future__ import annotations

import copy
import json
import struct
from collections.abc import Callable

import xxhash

#: Room the pristine file keeps in METADATA (a free-form detector field) for edits that
#: make the JSON longer.
SLACK_FIELD = "conformance_slack"
SLACK = 64


def _set(path: str, value):
    def edit(meta: dict) -> None:
        *parents, last = path.split(".")
        node = meta
        for key in parents:
            node = node[key]
        node[last] = value

    return edit


def _delete(path: str):
    def edit(meta: dict) -> None:
        *parents, last = path.split(".")
        node = meta
        for key in parents:
            node = node[key]
        del node[last]

    return edit


#: name -> (edit of the METADATA dict, valid per §5)
CASES: dict[str, tuple[Callable[[dict], None], bool]] = {
    "unchanged": (lambda meta: None, True),
    "unknown top-level key": (_set("zz_future", {"x": 1}), True),
    "unknown source key": (_set("source.origin", "beamline"), True),
    "source.identity null": (_set("source.identity", None), True),
    "source.sha256 object": (_set("source.sha256", {"a.h5": "0" * 64}), True),
    "source without files": (_delete("source.files"), False),
    "source without kind": (_delete("source.kind"), False),
    "source without identity": (_delete("source.identity"), False),
    "source without sha256": (_delete("source.sha256"), False),
    "source.files not a list": (_set("source.files", "a.h5"), False),
    "source.files holds a number": (_set("source.files", [1]), False),
    "source.kind not a string": (_set("source.kind", 3), False),
    "source.identity a list": (_set("source.identity", []), False),
    "source not an object": (_set("source", []), False),
    "calibration not an object": (_set("calibration", None), False),
    "encoder missing": (_delete("encoder"), False),
    "detector a string": (_set("detector", "x"), False),
    "n_frames as float": (lambda meta: meta.update(n_frames=float(meta["n_frames"])), False),
    "n_frames as bool": (lambda meta: meta.update(n_frames=True), False),
    "scan_shape as floats": (
        lambda meta: meta.update(scan_shape=[float(v) for v in meta["scan_shape"]]),
        False,
    ),
    "scan_shape of three": (lambda meta: meta["scan_shape"].append(1), False),
    "dtype missing": (_delete("dtype"), False),
    "pixel_mask.n_masked as float": (
        lambda meta: meta["pixel_mask"].update(n_masked=float(meta["pixel_mask"]["n_masked"])),
        False,
    ),
    "pixel_mask.dtype missing": (_delete("pixel_mask.dtype"), False),
    "pixel_mask not an object": (_set("pixel_mask", 0), False),
    "metadata not an object": (lambda meta: "replace with a list", False),
}


def metadata_section(raw: bytes) -> tuple[int, int]:
    offset, length, _ = struct.unpack_from("<QQQ", raw, 64)
    return offset, length


def edited_file(pristine: bytes, name: str) -> bytes:
    """``pristine`` with its METADATA edited by case ``name``, same length, resealed."""
    edit, _ = CASES[name]
    offset, length = metadata_section(pristine)
    meta = json.loads(pristine[offset : offset + length])
    meta = copy.deepcopy(meta)
    meta["detector"].pop(SLACK_FIELD)
    if edit(meta) == "replace with a list":
        text = json.dumps([meta], sort_keys=True, separators=(",", ":"))
        filler = length - len(text) - len(',""')
        text = text[:-1] + "," + json.dumps("x" * filler) + "]"
    else:
        text = json.dumps(meta, sort_keys=True, separators=(",", ":"))
        filler = length - len(text) - len(',"~":""')
        assert filler >= 0, f"case {name!r} needs more slack"
        text = text[:-1] + ',"~":' + json.dumps("x" * filler) + "}"
    data = text.encode("ascii")
    assert len(data) == length
    raw = bytearray(pristine)
    raw[offset : offset + length] = data
    struct.pack_into("<Q", raw, 64 + 16, xxhash.xxh3_64_intdigest(data))
    struct.pack_into("<Q", raw, 248, xxhash.xxh3_64_intdigest(bytes(raw[:248])))
    footer = len(raw) - 32
    struct.pack_into("<Q", raw, footer + 16, struct.unpack_from("<Q", raw, 248)[0])
    struct.pack_into(
        "<Q", raw, footer + 24, xxhash.xxh3_64_intdigest(bytes(raw[footer : footer + 24]))
    )
    return bytes(raw)
