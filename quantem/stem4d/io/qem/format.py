"""The ``.qem`` byte layout (versions 1.0 and 2.0), mirrored from ``docs/qem-format.md``.

Each constant and structure names the document section it mirrors. Parsing
functions validate and raise :class:`~quantem.stem4d.errors.QemFormatError` naming the
section; they never allocate more than the bytes they were given justify.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from quantem.stem4d.errors import QemFormatError, QemVersionError
from quantem.stem4d.io.qem.checksum import xxh3

# §1 conventions -----------------------------------------------------------------
ITEMSIZE_TO_DTYPE: Final = {1: "uint8", 2: "uint16", 4: "uint32"}
DTYPE_TO_ITEMSIZE: Final = {v: k for k, v in ITEMSIZE_TO_DTYPE.items()}

# §2 layout ----------------------------------------------------------------------
SECTION_ALIGN: Final = 64
PAYLOAD_ALIGN: Final = 4096
BLOCK_ALIGN: Final = 16
FOOTER_ALIGN: Final = 64

# §3 fixed header ------------------------------------------------------------------
MAGIC: Final = b"\x89QEM\r\n\x1a\n"
VERSION_MAJOR: Final = 1
VERSION_MINOR: Final = 0
#: Major versions this reader decodes, each with the newest minor it knows (§15, §19).
SUPPORTED_VERSIONS: Final = {1: 0, 2: 0}
#: The newest major version (per-pixel symbols in row bands, §19).
VERSION_2: Final = 2
HEADER_SIZE: Final = 256
HEADER_CHECKSUM_OFFSET: Final = 248
SECTION_TABLE_OFFSET: Final = 64
SECTION_ENTRY_SIZE: Final = 24
MAX_DETECTOR_SIDE: Final = 65535
MAX_FRAME_PIXELS: Final = 1 << 28
MAX_FRAMES: Final = 1 << 40
MAX_BLOCK_PIXELS: Final = 1 << 31
_HEADER_FIXED = struct.Struct("<8sHHIQQIIIIBBHIII")  # bytes [0, 64)
assert _HEADER_FIXED.size == SECTION_TABLE_OFFSET

# §4 section table -----------------------------------------------------------------
SECTION_METADATA: Final = 0
SECTION_PIXEL_MASK: Final = 1
SECTION_MODEL: Final = 2
SECTION_BLOCK_INDEX: Final = 3
SECTION_BLOCK_CHECKSUMS: Final = 4
SECTION_PAYLOAD: Final = 5
SECTION_SPATIAL_INDEX: Final = 6
N_SECTIONS: Final = 7
SECTION_NAMES: Final = (
    "METADATA",
    "PIXEL_MASK",
    "MODEL",
    "BLOCK_INDEX",
    "BLOCK_CHECKSUMS",
    "PAYLOAD",
    "SPATIAL_INDEX",
)
MAX_METADATA_BYTES: Final = 16 << 20

# §7 model ---------------------------------------------------------------------------
GROUP_PIXELS: Final = 8
MAX_CLASSES: Final = 4
ALPHABET: Final = 256
ESCAPE_SYMBOL: Final = 255
ESCAPE_MIN_VALUE: Final = 256
MODEL_HEADER_SIZE: Final = 16

# §8 block index ---------------------------------------------------------------------
BLOCK_ENTRY_SIZE: Final = 48
MODE_ZERO: Final = 0
MODE_RAW: Final = 1
MODE_RANS: Final = 2
MODE_NAMES: Final = {MODE_ZERO: "zero", MODE_RAW: "raw", MODE_RANS: "rans"}
BLOCK_INDEX_DTYPE: Final = np.dtype(
    [
        ("frame_start", "<u8"),
        ("n_frames", "<u4"),
        ("mode", "<u4"),
        ("offset", "<u8"),
        ("length", "<u8"),
        ("n_words", "<u4"),
        ("n_nonzero", "<u4"),
        ("n_escapes", "<u4"),
        # reserved (0) in 1.0; the entry's row band in 2.0 (§19.4)
        ("band", "<u4"),
    ]
)
assert BLOCK_INDEX_DTYPE.itemsize == BLOCK_ENTRY_SIZE

# §10 / §11 rANS block ------------------------------------------------------------------
LANES: Final = 32
LANE_STATES_SIZE: Final = 4 * LANES
PROB_BITS: Final = 12
PROB_SCALE: Final = 1 << PROB_BITS
RANS_L: Final = 1 << 16
WORD_BITS: Final = 16

# §19 version 2.0: per-pixel symbols in row bands ------------------------------------
#: rANS states of a 2.0 RANS block (4 per GPU lane) and their bytes.
BAND_STATES: Final = 128
BAND_STATES_SIZE: Final = 4 * BAND_STATES
#: Pixels of a band that share one class (a "quad", §19.3).
QUAD_PIXELS: Final = 4

# §13 footer ----------------------------------------------------------------------------
FOOTER_MAGIC: Final = b"QEM-END\x1a"
FOOTER_SIZE: Final = 32
_FOOTER = struct.Struct("<8sQQQ")


def align_up(value: int, alignment: int) -> int:
    """The smallest multiple of ``alignment`` that is >= ``value`` (§1)."""
    return -(-value // alignment) * alignment


def n_groups(frame_pixels: int) -> int:
    """Number of 8-pixel groups of a frame (§7)."""
    return -(-frame_pixels // GROUP_PIXELS)


def model_length(n_group: int, n_contexts: int) -> int:
    """Exact MODEL section length (§7)."""
    return MODEL_HEADER_SIZE + align_up(n_group, 4) + 2 * ALPHABET * n_contexts


def n_bands(det_r: int, band_rows: int) -> int:
    """Row bands of a 2.0 frame (§19.1); 1 for 1.0 (``band_rows`` 0)."""
    return -(-det_r // band_rows) if band_rows else 1


def band_geometry(det_r: int, det_c: int, band_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Per band: first row and number of rows (int64), §19.1."""
    bands = n_bands(det_r, band_rows)
    rows = band_rows if band_rows else det_r
    first = np.arange(bands, dtype=np.int64) * rows
    return first, np.minimum(rows, det_r - first)


def band_quads(det_r: int, det_c: int, band_rows: int) -> np.ndarray:
    """Per band: the index of its first quad in the 2.0 class map, and the total (int64
    [n_bands + 1]), §19.3."""
    _, rows = band_geometry(det_r, det_c, band_rows)
    quads = -(-(rows * det_c) // QUAD_PIXELS)
    out = np.zeros(quads.size + 1, dtype=np.int64)
    np.cumsum(quads, out=out[1:])
    return out


@dataclass(frozen=True)
class Section:
    """One section-table entry (§4)."""

    offset: int
    length: int
    xxh3: int

    @property
    def present(self) -> bool:
        return self.length > 0

    @property
    def end(self) -> int:
        return self.offset + self.length


@dataclass(frozen=True)
class Header:
    """The fixed header (§3), with its section table (§4)."""

    version_major: int
    version_minor: int
    file_size: int
    n_frames: int
    scan_shape: tuple[int, int]
    detector_shape: tuple[int, int]
    stored_itemsize: int
    source_itemsize: int
    block_frames: int
    n_blocks: int
    sections: tuple[Section, ...]
    header_xxh3: int
    #: 2.0: rows per band (§19.1); 0 in 1.0 (the field is reserved there).
    band_rows: int = 0

    @property
    def n_bands(self) -> int:
        return n_bands(self.detector_shape[0], self.band_rows)

    @property
    def n_frame_blocks(self) -> int:
        return -(-self.n_frames // self.block_frames)

    @property
    def frame_pixels(self) -> int:
        return self.detector_shape[0] * self.detector_shape[1]

    @property
    def n_groups(self) -> int:
        return n_groups(self.frame_pixels)

    @property
    def stored_dtype(self) -> np.dtype:
        return np.dtype(ITEMSIZE_TO_DTYPE[self.stored_itemsize])

    @property
    def source_dtype(self) -> np.dtype:
        return np.dtype(ITEMSIZE_TO_DTYPE[self.source_itemsize])

    def section(self, section_id: int) -> Section:
        return self.sections[section_id]


def pack_header(header: Header) -> bytes:
    """Serialise a header; ``header.header_xxh3`` is ignored and recomputed (§3)."""
    fixed = _HEADER_FIXED.pack(
        MAGIC,
        header.version_major,
        header.version_minor,
        HEADER_SIZE,
        header.file_size,
        header.n_frames,
        header.scan_shape[0],
        header.scan_shape[1],
        header.detector_shape[0],
        header.detector_shape[1],
        header.stored_itemsize,
        header.source_itemsize,
        0,
        header.block_frames,
        header.n_blocks,
        header.band_rows,
    )
    table = b"".join(struct.pack("<QQQ", s.offset, s.length, s.xxh3) for s in header.sections)
    body = fixed + table + bytes(HEADER_CHECKSUM_OFFSET - len(fixed) - len(table))
    return body + struct.pack("<Q", xxh3(body))


def parse_header(data: bytes, path: Any = None) -> Header:
    """Validate the fixed header (§3, §14 steps 1-4 except the file size) and parse it."""
    if len(data) < HEADER_SIZE + FOOTER_SIZE:
        raise QemFormatError(
            path, f"file too short to be .qem ({len(data)} bytes)", section="header"
        )
    fixed = _HEADER_FIXED.unpack_from(data, 0)
    (
        magic,
        major,
        minor,
        header_size,
        file_size,
        n_frames,
        scan_r,
        scan_c,
        det_r,
        det_c,
        stored,
        source,
        reserved0,
        block_frames,
        n_blocks,
        reserved1,
    ) = fixed
    if magic != MAGIC:
        raise QemFormatError(path, "not a .qem file (bad magic)", section="header")
    if major not in SUPPORTED_VERSIONS:
        known = ", ".join(f"{a}.x (up to {a}.{b})" for a, b in SUPPORTED_VERSIONS.items())
        raise QemVersionError(
            path,
            f"unsupported .qem major version {major}.{minor}; this reader supports {known}",
            section="header",
        )
    computed = xxh3(bytes(data[:HEADER_CHECKSUM_OFFSET]))
    (stored_checksum,) = struct.unpack_from("<Q", data, HEADER_CHECKSUM_OFFSET)
    if computed != stored_checksum:
        raise QemFormatError(path, "header checksum mismatch", section="header")

    def bad(detail: str) -> QemFormatError:
        return QemFormatError(path, detail, section="header")

    if header_size != HEADER_SIZE:
        raise bad(f"header_size {header_size} != {HEADER_SIZE}")
    reserved_tail = bytes(
        data[SECTION_TABLE_OFFSET + N_SECTIONS * SECTION_ENTRY_SIZE : HEADER_CHECKSUM_OFFSET]
    )
    known_minor = minor <= SUPPORTED_VERSIONS[major]
    band_rows = reserved1 if major == VERSION_2 else 0
    if known_minor and (reserved0 or (reserved1 and major != VERSION_2) or any(reserved_tail)):
        raise bad("reserved header field is not zero")
    if stored not in ITEMSIZE_TO_DTYPE or source not in ITEMSIZE_TO_DTYPE:
        raise bad(f"invalid item sizes stored={stored} source={source}")
    if not (1 <= det_r <= MAX_DETECTOR_SIDE and 1 <= det_c <= MAX_DETECTOR_SIDE):
        raise bad(f"detector shape {det_r}x{det_c} out of range")
    if det_r * det_c > MAX_FRAME_PIXELS:
        raise bad(f"{det_r * det_c} pixels per frame exceeds {MAX_FRAME_PIXELS}")
    if scan_r < 1 or scan_c < 1 or n_frames != scan_r * scan_c or n_frames > MAX_FRAMES:
        raise bad(f"frame count {n_frames} inconsistent with scan {scan_r}x{scan_c}")
    if block_frames < 1 or block_frames * det_r * det_c > MAX_BLOCK_PIXELS:
        raise bad(f"block_frames {block_frames} out of range")
    if major == VERSION_2 and not 1 <= band_rows <= det_r:
        raise bad(f"band_rows {band_rows} out of range 1..{det_r}")
    bands = n_bands(det_r, band_rows)
    if n_blocks != -(-n_frames // block_frames) * bands:
        raise bad(
            f"n_blocks {n_blocks} != ceil({n_frames} / {block_frames})"
            + (f" * {bands} bands" if major == VERSION_2 else "")
        )
    sections = tuple(
        Section(*struct.unpack_from("<QQQ", data, SECTION_TABLE_OFFSET + SECTION_ENTRY_SIZE * i))
        for i in range(N_SECTIONS)
    )
    return Header(
        version_major=major,
        version_minor=minor,
        file_size=file_size,
        n_frames=n_frames,
        scan_shape=(scan_r, scan_c),
        detector_shape=(det_r, det_c),
        stored_itemsize=stored,
        source_itemsize=source,
        block_frames=block_frames,
        n_blocks=n_blocks,
        sections=sections,
        header_xxh3=stored_checksum,
        band_rows=band_rows,
    )


def pack_footer(file_size: int, header_xxh3: int) -> bytes:
    """Serialise the footer (§13)."""
    body = _FOOTER.pack(FOOTER_MAGIC, file_size, header_xxh3, 0)[:24]
    return body + struct.pack("<Q", xxh3(body))


def parse_footer(data: bytes, header: Header, path: Any = None) -> None:
    """Validate the footer against the header (§13)."""
    magic, file_size, header_checksum, checksum = _FOOTER.unpack(data)
    if magic != FOOTER_MAGIC:
        raise QemFormatError(
            path, "bad footer magic (truncated or incomplete file?)", section="footer"
        )
    if xxh3(bytes(data[:24])) != checksum:
        raise QemFormatError(path, "footer checksum mismatch", section="footer")
    if file_size != header.file_size or header_checksum != header.header_xxh3:
        raise QemFormatError(path, "footer does not match the header", section="footer")


def expected_section_layout(lengths: list[int]) -> tuple[list[int], int]:
    """Canonical offsets of the sections and the footer for given lengths (§2).

    Returns ``(offsets, footer_offset)``; absent sections (length 0) get offset 0,
    except PAYLOAD, which is always placed.
    """
    offsets = []
    end = HEADER_SIZE
    for section_id, length in enumerate(lengths):
        if section_id == SECTION_PAYLOAD:
            start = align_up(end, PAYLOAD_ALIGN)
            offsets.append(start)
            end = start + length
        elif length > 0:
            start = align_up(end, SECTION_ALIGN)
            offsets.append(start)
            end = start + length
        else:
            offsets.append(0)
    return offsets, align_up(end, FOOTER_ALIGN)


def dump_metadata(metadata: dict) -> bytes:
    """Deterministic METADATA bytes (§5)."""
    return json.dumps(
        metadata, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


REQUIRED_METADATA_KEYS: Final = (
    "scan_shape",
    "detector_shape",
    "n_frames",
    "dtype",
    "source_dtype",
    "pixel_mask",
    "calibration",
    "source",
    "encoder",
    "detector",
)
#: Keys the METADATA ``source`` object must have (§5): kind, file names, identity, SHA-256s.
SOURCE_METADATA_KEYS: Final = ("kind", "files", "identity", "sha256")


def parse_metadata(data: bytes, header: Header, path: Any = None) -> dict:
    """Parse METADATA JSON and check it agrees with the header (§5)."""

    def bad(detail: str) -> QemFormatError:
        return QemFormatError(path, detail, section="METADATA")

    try:
        metadata = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise bad(f"invalid JSON: {exc}") from None
    if not isinstance(metadata, dict):
        raise bad("not a JSON object")
    missing = [key for key in REQUIRED_METADATA_KEYS if key not in metadata]
    if missing:
        raise bad(f"missing keys {missing}")
    # JSON integers only: Python's 1.0 == 1 and True == 1 must not pass (the native
    # reader, and the spec's types, refuse them).
    checks = {
        "scan_shape": list(header.scan_shape),
        "detector_shape": list(header.detector_shape),
        "n_frames": header.n_frames,
        "dtype": ITEMSIZE_TO_DTYPE[header.stored_itemsize],
        "source_dtype": ITEMSIZE_TO_DTYPE[header.source_itemsize],
    }
    for key, expected in checks.items():
        value = metadata[key]
        if isinstance(expected, list):
            same = (
                isinstance(value, list)
                and len(value) == len(expected)
                and all(is_json_int(v) and v == e for v, e in zip(value, expected))
            )
        elif isinstance(expected, int):
            same = is_json_int(value) and value == expected
        else:
            same = isinstance(value, str) and value == expected
        if not same:
            raise bad(f"{key} {value!r} disagrees with the header ({expected!r})")
    mask = metadata["pixel_mask"]
    if not isinstance(mask, dict):
        raise bad("pixel_mask must be an object")
    encoding = "section" if header.sections[SECTION_PIXEL_MASK].present else "all-zero"
    if mask.get("encoding") != encoding:
        raise bad(f"pixel_mask.encoding must be {encoding!r}")
    if mask.get("dtype") != "uint32" or not is_json_int(mask.get("n_masked")):
        raise bad("pixel_mask must have dtype 'uint32' and an integer n_masked")
    for key in ("calibration", "source", "encoder", "detector"):
        if not isinstance(metadata[key], dict):
            raise bad(f"{key} must be an object")
    source = metadata["source"]
    missing = [key for key in SOURCE_METADATA_KEYS if key not in source]
    if missing:
        raise bad(f"source is missing keys {missing}")
    if not isinstance(source["kind"], str):
        raise bad("source.kind must be a string")
    if not isinstance(source["files"], list) or not all(
        isinstance(f, str) for f in source["files"]
    ):
        raise bad("source.files must be a list of strings")
    for key in ("identity", "sha256"):
        if source[key] is not None and not isinstance(source[key], dict):
            raise bad(f"source.{key} must be an object or null")
    return metadata


def is_json_int(value: Any) -> bool:
    """A JSON integer as :func:`json.loads` returns it (not a bool, not a float)."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Model:
    """The MODEL section (§7): class map and per-context frequency tables."""

    n_classes: int
    group_class: np.ndarray  # uint8 [G] (1.0: per 8-pixel group; 2.0: per band quad, §19.3)
    freq: np.ndarray  # uint16 [C, 256]
    #: 2.0: one context per class (direct pixel symbols); 1.0: a mask and a value context.
    contexts_per_class: int = 2

    @property
    def n_contexts(self) -> int:
        return self.contexts_per_class * self.n_classes

    @property
    def cum(self) -> np.ndarray:
        """uint32 [C, 257] cumulative frequencies."""
        cum = np.zeros((self.n_contexts, ALPHABET + 1), dtype=np.uint32)
        np.cumsum(self.freq, axis=1, out=cum[:, 1:])
        return cum

    @property
    def slot_symbol(self) -> np.ndarray:
        """uint8 [C, 4096] slot -> symbol decode tables."""
        table = np.empty((self.n_contexts, PROB_SCALE), dtype=np.uint8)
        for context in range(self.n_contexts):
            table[context] = np.repeat(
                np.arange(ALPHABET, dtype=np.uint8), self.freq[context].astype(np.int64)
            )
        return table


def pack_model(model: Model) -> bytes:
    n_group = int(model.group_class.size)
    head = struct.pack("<IIII", model.n_classes, model.n_contexts, n_group, 0)
    classes = model.group_class.astype(np.uint8).tobytes()
    classes += bytes(align_up(n_group, 4) - n_group)
    return head + classes + model.freq.astype("<u2").tobytes()


def parse_model(data: bytes, header: Header, path: Any = None) -> Model:
    """Validate and parse the MODEL section (§7)."""

    def bad(detail: str) -> QemFormatError:
        return QemFormatError(path, detail, section="MODEL")

    if len(data) < MODEL_HEADER_SIZE:
        raise bad("section too short")
    n_classes, n_contexts, n_group, reserved = struct.unpack_from("<IIII", data, 0)
    per_class = 1 if header.version_major == VERSION_2 else 2
    if not 1 <= n_classes <= MAX_CLASSES or n_contexts != per_class * n_classes:
        raise bad(f"invalid class/context counts {n_classes}/{n_contexts}")
    if header.version_major == VERSION_2:
        expected_groups = int(band_quads(*header.detector_shape, header.band_rows)[-1])
        what = "n_quads"
    else:
        expected_groups, what = header.n_groups, "n_groups"
    if n_group != expected_groups or reserved:
        raise bad(f"{what} {n_group} != {expected_groups} or reserved field set")
    if len(data) != model_length(n_group, n_contexts):
        raise bad(f"length {len(data)} != {model_length(n_group, n_contexts)}")
    buffer = np.frombuffer(data, dtype=np.uint8)
    group_class = buffer[MODEL_HEADER_SIZE : MODEL_HEADER_SIZE + n_group].copy()
    padding = buffer[MODEL_HEADER_SIZE + n_group : MODEL_HEADER_SIZE + align_up(n_group, 4)]
    if padding.any():
        raise bad("class map padding is not zero")
    if group_class.size and int(group_class.max()) >= n_classes:
        raise bad("class map value out of range")
    start = MODEL_HEADER_SIZE + align_up(n_group, 4)
    freq = np.frombuffer(data, dtype="<u2", offset=start).reshape(n_contexts, ALPHABET)
    freq = freq.astype(np.uint16)
    sums = freq.astype(np.int64).sum(axis=1)
    if (sums != PROB_SCALE).any():
        context = int(np.flatnonzero(sums != PROB_SCALE)[0])
        raise bad(f"frequency table of context {context} sums to {int(sums[context])}, not 4096")
    if per_class == 1 and (freq[:, ESCAPE_SYMBOL] == 0).any():
        context = int(np.flatnonzero(freq[:, ESCAPE_SYMBOL] == 0)[0])
        raise bad(f"frequency table of context {context} gives ESCAPE no slot (2.0 needs one)")
    return Model(
        n_classes=n_classes, group_class=group_class, freq=freq, contexts_per_class=per_class
    )


def parse_block_index(data: bytes, header: Header, path: Any = None) -> np.ndarray:
    """Validate the BLOCK_INDEX section (§8, §10, §14 step 10) and return it as a
    structured array (native byte order)."""
    n_blocks = header.n_blocks
    if len(data) != BLOCK_ENTRY_SIZE * n_blocks:
        raise QemFormatError(path, f"length {len(data)} != 48 * {n_blocks}", section="BLOCK_INDEX")
    index = np.frombuffer(data, dtype=BLOCK_INDEX_DTYPE).astype(BLOCK_INDEX_DTYPE.newbyteorder("="))
    payload = header.sections[SECTION_PAYLOAD]
    w = header.stored_itemsize
    version_2 = header.version_major == VERSION_2
    bands = header.n_bands
    entry = np.arange(n_blocks, dtype=np.uint64)
    block = entry // np.uint64(bands)
    band = entry % np.uint64(bands)
    frame_start = block * np.uint64(header.block_frames)
    n_frames = np.minimum(np.uint64(header.block_frames), np.uint64(header.n_frames) - frame_start)
    if version_2:
        _, band_rows = band_geometry(*header.detector_shape, header.band_rows)
        unit_pixels = band_rows.astype(np.uint64)[band.astype(np.int64)] * np.uint64(
            header.detector_shape[1]
        )
    else:
        unit_pixels = np.uint64(header.frame_pixels)
    pixels = n_frames * unit_pixels
    mode = index["mode"]
    n_words = index["n_words"].astype(np.uint64)
    n_escapes = index["n_escapes"].astype(np.uint64)
    n_nonzero = index["n_nonzero"].astype(np.uint64)
    is_rans = mode == MODE_RANS
    states = np.uint64(BAND_STATES_SIZE if version_2 else LANE_STATES_SIZE)
    expected_length = np.where(
        mode == MODE_RAW,
        pixels * np.uint64(w),
        np.where(
            is_rans,
            (states + 2 * n_words + np.uint64(3)) // np.uint64(4) * np.uint64(4)
            + n_escapes * np.uint64(w),
            np.uint64(0),
        ),
    )
    problems = [
        (index["frame_start"] != frame_start, "frame_start"),
        (index["n_frames"] != n_frames, "frame count"),
        (mode > MODE_RANS, "unknown mode"),
        (index["band"] != (band if version_2 else 0), "band" if version_2 else "reserved field"),
        (~is_rans & ((n_words | n_nonzero | n_escapes) != 0), "counts on a non-RANS block"),
    ]
    if version_2:
        problems += [
            (n_nonzero != 0, "n_nonzero must be 0 in 2.0"),
            (is_rans & (n_escapes > pixels), "n_escapes exceeds pixels"),
            (is_rans & (n_words > pixels), "too many words"),
        ]
    else:
        groups = header.n_groups
        problems += [
            (is_rans & (n_nonzero > pixels), "n_nonzero exceeds pixels"),
            (is_rans & (n_escapes > n_nonzero), "n_escapes exceeds n_nonzero"),
            (is_rans & (n_escapes > 0) & (w == 1), "escapes with uint8 data"),
            (is_rans & (n_words > n_frames * np.uint64(groups) + n_nonzero), "too many words"),
        ]
    problems.append(
        (index["length"] != expected_length, "length inconsistent with mode and counts")
    )
    bad_rows = np.zeros(n_blocks, dtype=bool)
    for rows, _ in problems:
        bad_rows |= rows
    if n_blocks:
        ends = index["offset"] + index["length"]
        padded_ends = (
            (ends + np.uint64(BLOCK_ALIGN - 1)) // np.uint64(BLOCK_ALIGN) * np.uint64(BLOCK_ALIGN)
        )
        expected_offset = np.empty(n_blocks, dtype=np.uint64)
        expected_offset[0] = payload.offset
        expected_offset[1:] = padded_ends[:-1]
        misplaced = index["offset"] != expected_offset
        # overflow guard: lengths are bounded by the formulas above, offsets by the file
        misplaced |= index["offset"] > np.uint64(header.file_size)
        bad_rows |= misplaced
        problems.append((misplaced, "offset"))
    if bad_rows.any():
        first = int(np.flatnonzero(bad_rows)[0])
        reason = next(name for rows, name in problems if rows[first])
        raise QemFormatError(
            path, f"block index entry invalid: {reason}", section="BLOCK_INDEX", block=first
        )
    total = int(padded_ends[-1]) - payload.offset if n_blocks else 0
    if total != payload.length:
        raise QemFormatError(
            path, f"PAYLOAD length {payload.length} != block extents {total}", section="PAYLOAD"
        )
    return index


def block_extent_end(offset: int, length: int) -> int:
    """End of a block's extent: the block plus its trailing padding (§8)."""
    return align_up(offset + length, BLOCK_ALIGN)
