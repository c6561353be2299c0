"""Frame index of an ARINA acquisition: where each frame's compressed chunk lies on disk.

Built once per source with h5py's ``chunk_iter`` (one pass over each shard's chunk
B-tree) and kept as a small sidecar in an index folder, keyed by the source's identity
(master path, size, mtime and SHA-256). Loads then read chunks by byte offset with
``os.pread`` and never go through HDF5's per-chunk machinery.

Sidecar: ``<key>.npz`` (arrays) + ``<key>.json`` (format version, source identity, shard
sizes and mtimes, frames per shard, frame shape, dtype, element size, frame elements).
Version 3 adds source integrity: the first observation records the XXH3-64 of every raw
chunk (``chunk_xxh3``), each shard's identity includes a SHA-256 of its chunk-offset
table, and the JSON carries a SHA-256 of the arrays and one of itself. A sidecar that
fails any of these is discarded and rebuilt with a :class:`FrameIndexWarning` (swapped
or edited offsets would otherwise return frames in the wrong order, silently). Version 2
sidecars are still read (they have no chunk checksums, so ``verify_source`` refuses
them). A rebuild because a shard's size or mtime changed keeps the checksums of the first
observation (from an intact version-3 sidecar of the same master and shards), so a chunk
edited in place is still reported by ``verify_source``. A sidecar whose JSON or shard stats do not match the current files is ignored and
rebuilt.
A process remembers a sidecar it has read and verified while both of its files keep
their stat (device, inode, size, modification and change times), and only when they had
not changed within 2 s of the read (file times tick coarsely); its arrays are then
read-only, since every later open shares them.
While it matches, :func:`cached_shard_layout` also spares a load from opening every shard
with h5py to learn what the sidecar already records (frames, frame shape, dtype); those
shards were checked (chunking, filter) when the sidecar was built, and a shard whose
size or modification time changed since makes the sidecar stale.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import threading
import time
import warnings
import zipfile
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash

from quantem.stem4d.errors import ArinaFormatError, FrameIndexWarning, SourceNotFoundError

INDEX_FORMAT = "quantem-frame-index"
# 2: the shards' frame shape and dtype are stored too; 3: per-chunk XXH3-64, per-shard
# offset-table hashes and the sidecar's own checksums.
INDEX_VERSION = 3
READABLE_VERSIONS = (2, 3)
INDEX_DIR_ENV = "QUANTEM_INDEX_DIR"
#: What reading a damaged ``.npz`` raises. A version-3 sidecar's file is checked against
#: its SHA-256 first (tests/test_source_fuzz.py found BadZipFile, SyntaxError and
#: NotImplementedError from numpy's and zipfile's parsers of damaged bytes); the parser
#: errors remain for version-2 sidecars, which have no such checksum.
_UNREADABLE_ARRAYS = (
    OSError,
    ValueError,
    KeyError,
    EOFError,
    SyntaxError,
    NotImplementedError,
    zipfile.BadZipFile,
)
#: Chunks are read for hashing in runs of at most this many bytes.
HASH_READ_BYTES = 16 << 20


@dataclass(frozen=True)
class FrameIndex:
    """Byte location of every frame's chunk, in frame order.

    Attributes
    ----------
    frame_shard
        int32 ``[n_frames]``: index into the source's ``shard_paths``.
    frame_offset
        int64 ``[n_frames]``: byte offset of the chunk in its shard file.
    frame_nbytes
        int64 ``[n_frames]``: byte length of the chunk.
    elem_size
        Bytes per pixel value.
    frame_elems
        Pixels per frame (``det_r * det_c``).
    chunk_xxh3
        uint64 ``[n_frames]``: XXH3-64 (seed 0) of each frame's raw chunk bytes as first
        observed, or None for an index read from a version-2 sidecar.
    """

    frame_shard: np.ndarray
    frame_offset: np.ndarray
    frame_nbytes: np.ndarray
    elem_size: int
    frame_elems: int
    chunk_xxh3: np.ndarray | None = None

    @property
    def n_frames(self) -> int:
        return int(self.frame_offset.shape[0])

    @property
    def compressed_bytes(self) -> int:
        return int(self.frame_nbytes.sum())


def default_index_dir() -> Path:
    """``$QUANTEM_INDEX_DIR``, else ``$XDG_CACHE_HOME/quantem/index`` (``~/.cache/...``)."""
    configured = os.environ.get(INDEX_DIR_ENV)
    if configured:
        return Path(configured)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "quantem" / "index"


def index_key(identity: dict) -> str:
    """Sidecar name: a hash of the source identity, so any change gives a new key."""
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _shard_stats(shard_paths: Sequence[str]) -> list[list[int]]:
    stats = []
    for path in shard_paths:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise SourceNotFoundError(
                path, "data shard linked from the master is missing"
            ) from None
        stats.append([st.st_size, st.st_mtime_ns])
    return stats


def build_frame_index(
    shard_paths: Sequence[str],
    frames_per_shard: Sequence[int],
    elem_size: int,
    frame_elems: int,
    dataset_paths: Sequence[str] | None = None,
) -> FrameIndex:
    """Read each shard's chunk locations with h5py ``chunk_iter``.

    Every frame must have exactly one stored, filtered chunk lying inside its file;
    otherwise :class:`ArinaFormatError` names the shard and frame.
    """
    import h5py

    from quantem.stem4d.io import arina_layout as layout

    if dataset_paths is None:
        dataset_paths = [layout.SHARD_DATASET] * len(shard_paths)
    n_total = int(sum(frames_per_shard))
    frame_shard = np.empty(n_total, dtype=np.int32)
    frame_offset = np.full(n_total, -1, dtype=np.int64)
    frame_nbytes = np.zeros(n_total, dtype=np.int64)
    chunk_xxh3 = np.zeros(n_total, dtype=np.uint64)
    first = 0
    for shard, (path, n, dataset_path) in enumerate(
        zip(shard_paths, frames_per_shard, dataset_paths)
    ):
        offsets = np.full(n, -1, dtype=np.int64)
        sizes = np.zeros(n, dtype=np.int64)
        unfiltered: list[int] = []

        def visit(info, offsets=offsets, sizes=sizes, unfiltered=unfiltered) -> None:
            frame = info.chunk_offset[0]
            offsets[frame] = info.byte_offset
            sizes[frame] = info.size
            if info.filter_mask != 0:
                unfiltered.append(frame)

        try:
            with h5py.File(path, "r") as f:
                dset = f[dataset_path]
                if hasattr(dset.id, "chunk_iter"):
                    dset.id.chunk_iter(visit)
                else:  # HDF5 < 1.12.3: one query per chunk
                    for i in range(dset.id.get_num_chunks()):
                        visit(dset.id.get_chunk_info(i))
        except OSError as exc:
            raise ArinaFormatError(path, f"cannot read the shard's chunk index: {exc}") from None
        if unfiltered:
            raise ArinaFormatError(
                path, "chunk stored without the bitshuffle filter", frame=first + unfiltered[0]
            )
        missing = np.flatnonzero(offsets < 0)
        if missing.size:
            raise ArinaFormatError(
                path,
                f"{missing.size} frame(s) have no stored chunk",
                frame=first + int(missing[0]),
            )
        file_size = os.stat(path).st_size
        past = np.flatnonzero(offsets + sizes > file_size)
        if past.size:
            raise ArinaFormatError(
                path,
                f"file is truncated: chunk ends past the file's {file_size} bytes",
                frame=first + int(past[0]),
            )
        frame_shard[first : first + n] = shard
        frame_offset[first : first + n] = offsets
        frame_nbytes[first : first + n] = sizes
        chunk_xxh3[first : first + n] = hash_chunks(path, offsets, sizes)
        first += n
    return FrameIndex(
        frame_shard, frame_offset, frame_nbytes, int(elem_size), int(frame_elems), chunk_xxh3
    )


def hash_chunks(path: str, offsets: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """XXH3-64 of each chunk ``[offsets[i], offsets[i] + sizes[i])`` of file ``path``.

    Chunks are read in file order, in runs of adjacent chunks of at most
    :data:`HASH_READ_BYTES`, so a shard is read once, sequentially.
    """
    hashes = np.zeros(len(offsets), dtype=np.uint64)
    order = np.argsort(offsets, kind="stable")
    fd = os.open(path, os.O_RDONLY)
    try:
        i = 0
        while i < len(order):
            j = i + 1
            start = int(offsets[order[i]])
            end = start + int(sizes[order[i]])
            while (
                j < len(order)
                and int(offsets[order[j]]) == end
                and end + int(sizes[order[j]]) - start <= HASH_READ_BYTES
            ):
                end += int(sizes[order[j]])
                j += 1
            data = os.pread(fd, end - start, start)
            if len(data) != end - start:
                raise ArinaFormatError(
                    path, f"file is truncated: a chunk at byte {start} is missing"
                )
            view = memoryview(data)
            for k in order[i:j]:
                begin = int(offsets[k]) - start
                hashes[k] = xxhash.xxh3_64_intdigest(view[begin : begin + int(sizes[k])])
            i = j
    finally:
        os.close(fd)
    return hashes


def _sidecar_paths(identity: dict, index_dir: str | os.PathLike | None) -> tuple[Path, Path]:
    folder = Path(index_dir) if index_dir is not None else default_index_dir()
    key = index_key(identity)
    return folder / f"{key}.npz", folder / f"{key}.json"


def shard_stats(shard_paths: Sequence[str]) -> list[list[int]]:
    """Each shard's ``[size, mtime_ns]``, as a sidecar records them (a caller that calls
    both :func:`cached_shard_layout` and :func:`load_or_build_frame_index` takes them
    once and passes them to each). Raises :class:`SourceNotFoundError` for a missing one."""
    return _shard_stats(shard_paths)


def cached_shard_layout(
    identity: dict,
    shard_paths: Sequence[str],
    dataset_paths: Sequence[str] | None,
    *,
    index_dir: str | os.PathLike | None = None,
    stats: list[list[int]] | None = None,
) -> tuple[list[int], tuple[int, int], np.dtype] | None:
    """Frames per shard, frame shape and dtype recorded by a sidecar that still matches.

    None when there is no sidecar, or it fails its own checksum (it is then rebuilt, with
    a warning, by :func:`load_or_build_frame_index`), or it was written for other shards,
    or any shard's size or modification time changed since. Raises
    :class:`SourceNotFoundError` for a missing shard (as opening it would). ``stats``:
    :func:`shard_stats` of ``shard_paths``, when the caller has them.

    A sidecar this process verified and remembers (:func:`_read_sidecar_once`), whose
    files kept their stat, answers from memory: its facts are the file's.
    """
    npz_path, json_path = _sidecar_paths(identity, index_dir)
    stats = _shard_stats(shard_paths) if stats is None else stats
    stored = _remembered_facts(npz_path, json_path)
    if stored is None:
        stored = _read_json(json_path)
        if stored is None or _check_document(stored) is not None:
            return None
    if (
        stored.get("source_identity") != identity
        or stored.get("shards") != [os.fspath(p) for p in shard_paths]
        or stored.get("datasets") != (list(dataset_paths) if dataset_paths is not None else None)
        or stored.get("shard_stats") != stats
    ):
        return None
    try:
        frames = [int(n) for n in stored["frames_per_shard"]]
        rows, cols = (int(n) for n in stored["detector_shape"])
        dtype = np.dtype(stored["dtype"])
    except (KeyError, TypeError, ValueError):
        return None
    if len(frames) != len(shard_paths):
        return None
    return frames, (rows, cols), dtype


def load_or_build_frame_index(
    identity: dict,
    shard_paths: Sequence[str],
    frames_per_shard: Sequence[int],
    elem_size: int,
    frame_elems: int,
    *,
    index_dir: str | os.PathLike | None = None,
    fresh: bool = False,
    dataset_paths: Sequence[str] | None = None,
    detector_shape: tuple[int, int] | None = None,
    dtype: str | None = None,
    stats: list[list[int]] | None = None,
) -> FrameIndex:
    """The source's frame index from its sidecar, or built (and stored) when absent/stale.

    A sidecar that fails its checksums or its shards' offset-table hashes is discarded
    and rebuilt with a :class:`~quantem.stem4d.errors.FrameIndexWarning`. An index folder that
    cannot be written is not an error: the index is then only kept in memory. ``stats``:
    :func:`shard_stats` of ``shard_paths``, when the caller has them.
    """
    npz_path, json_path = _sidecar_paths(identity, index_dir)
    expected = {
        "format": INDEX_FORMAT,
        "version": INDEX_VERSION,
        "source_identity": identity,
        "shards": [os.fspath(p) for p in shard_paths],
        "datasets": list(dataset_paths) if dataset_paths is not None else None,
        "shard_stats": _shard_stats(shard_paths) if stats is None else stats,
        "frames_per_shard": [int(n) for n in frames_per_shard],
        "detector_shape": list(detector_shape) if detector_shape is not None else None,
        "dtype": np.dtype(dtype).name if dtype is not None else None,
        "elem_size": int(elem_size),
        "frame_elems": int(frame_elems),
    }
    if not fresh:
        index = _read_sidecar_once(npz_path, json_path, expected)
        if index is not None:
            return index
    first_observed = _first_observed_hashes(npz_path, json_path, expected)
    index = build_frame_index(shard_paths, frames_per_shard, elem_size, frame_elems, dataset_paths)
    if first_observed is not None:
        # The shards changed since the first observation (or a rebuild was asked for):
        # the chunks must still be the ones first observed, so their checksums carry over
        # and verify_source reports every chunk that changed.
        index = dataclasses.replace(index, chunk_xxh3=first_observed)
    _write_sidecar(npz_path, json_path, expected, index)
    return index


#: Sidecars this process has read and verified: (both files' stat) -> (the expected
#: facts they matched, canonical, the index, the facts parsed: read only). A process that
#: opens the same source again skips re-hashing ~11 MB per 262,144 frames while neither
#: file has changed.
_VERIFIED: OrderedDict[tuple, tuple[bytes, FrameIndex, dict]] = OrderedDict()
_VERIFIED_MAX = 8
#: Sources may be opened from several threads at once (sharded loads).
_VERIFIED_LOCK = threading.Lock()
#: A sidecar whose files changed less than this long before they were read is not
#: remembered: file times come from a coarse clock, so a same-size rewrite within a
#: tick could otherwise keep the stat that was verified ("racy" entries, as in git).
_RACY_NS = 2_000_000_000


def _sidecar_stat(npz_path: Path, json_path: Path) -> tuple | None:
    try:
        stats = [os.stat(npz_path), os.stat(json_path)]
    except OSError:
        return None
    return tuple(
        (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        for path, st in zip((npz_path, json_path), stats)
    )


def _read_sidecar_once(npz_path: Path, json_path: Path, expected: dict) -> FrameIndex | None:
    """:func:`_read_sidecar`, remembered for this process while both files keep the
    stat (device, inode, size, modification and change times) they had when read."""
    key = _sidecar_stat(npz_path, json_path)
    facts = _canonical(expected)
    with _VERIFIED_LOCK:
        remembered = _VERIFIED.get(key) if key is not None else None
        if remembered is not None and remembered[0] == facts:
            _VERIFIED.move_to_end(key)
            return remembered[1]
    started = time.time_ns()
    index = _read_sidecar(npz_path, json_path, expected)
    if index is None or key is None:
        return index
    if max(max(entry[4], entry[5]) for entry in key) < started - _RACY_NS:
        for array in (index.frame_shard, index.frame_offset, index.frame_nbytes, index.chunk_xxh3):
            if array is not None:
                array.setflags(write=False)
        with _VERIFIED_LOCK:
            _VERIFIED[key] = (facts, index, json.loads(facts))
            while len(_VERIFIED) > _VERIFIED_MAX:
                _VERIFIED.popitem(last=False)
    return index


def _remembered_facts(npz_path: Path, json_path: Path) -> dict | None:
    """The facts of a sidecar this process verified and remembers, while both its files
    keep the stat they had (the remembered parse: the caller only reads it)."""
    key = _sidecar_stat(npz_path, json_path)
    if key is None:
        return None
    with _VERIFIED_LOCK:
        remembered = _VERIFIED.get(key)
    return None if remembered is None else remembered[2]


def _first_observed_hashes(npz_path: Path, json_path: Path, expected: dict) -> np.ndarray | None:
    """The chunk checksums of an intact version-3 sidecar of this source (same master
    identity, shards and frames per shard), however stale its shard stats are."""
    stored = _read_json(json_path)
    if stored is None or _check_document(stored) is not None or stored.get("version") != 3:
        return None
    if any(stored.get(k) != expected[k] for k in ("source_identity", "shards", "frames_per_shard")):
        return None
    try:
        with np.load(_checked_npz(npz_path, stored)) as arrays:
            index = FrameIndex(
                arrays["frame_shard"].astype(np.int32, copy=False),
                arrays["frame_offset"].astype(np.int64, copy=False),
                arrays["frame_nbytes"].astype(np.int64, copy=False),
                expected["elem_size"],
                expected["frame_elems"],
                arrays["chunk_xxh3"].astype(np.uint64, copy=False),
            )
    except _UNREADABLE_ARRAYS:
        return None
    if stored.get("arrays_sha256") != _arrays_digest(index):
        return None
    if index.chunk_xxh3.shape != (sum(expected["frames_per_shard"]),):
        return None
    return index.chunk_xxh3


def _read_json(json_path: Path) -> dict | None:
    try:
        stored = json.loads(json_path.read_text())
    except (OSError, ValueError):
        return None
    return stored if isinstance(stored, dict) else None


def _canonical(document: dict) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def _document_checksum(document: dict) -> str:
    """SHA-256 of the sidecar JSON without its ``checksum`` field."""
    return hashlib.sha256(
        _canonical({k: v for k, v in document.items() if k != "checksum"})
    ).hexdigest()


def _check_document(stored: dict) -> str | None:
    """Why a sidecar JSON cannot be trusted (None: it can, or it is simply another
    version or another source, which is not damage)."""
    if stored.get("format") != INDEX_FORMAT or stored.get("version") not in READABLE_VERSIONS:
        return "unknown format or version"
    if stored["version"] >= 3 and stored.get("checksum") != _document_checksum(stored):
        return "its JSON fails its checksum"
    return None


def _hash_view(array: np.ndarray, dtype: str) -> memoryview:
    """The bytes of ``array`` as ``dtype``, without a copy when it already is one."""
    return memoryview(np.ascontiguousarray(array, dtype=dtype)).cast("B")


def _arrays_digest(index: FrameIndex) -> str:
    digest = hashlib.sha256()
    for array, dtype in (
        (index.frame_shard, "<i4"),
        (index.frame_offset, "<i8"),
        (index.frame_nbytes, "<i8"),
        (index.chunk_xxh3, "<u8"),
    ):
        digest.update(_hash_view(array, dtype))
    return digest.hexdigest()


def shard_table_hashes(index: FrameIndex, n_shards: int) -> list[str]:
    """SHA-256 of each shard's chunk-offset table: its frames' ``(offset, nbytes)`` as
    little-endian int64 pairs, in frame order (part of the shard's identity).

    One table of every frame, grouped by shard (a stable sort keeps frame order within
    a shard, and is skipped when the frames already come in shard order), hashed slice
    by slice without copies."""
    shard = np.asarray(index.frame_shard)
    table = np.empty((shard.size, 2), dtype="<i8")
    table[:, 0] = index.frame_offset
    table[:, 1] = index.frame_nbytes
    if shard.size and np.any(shard[1:] < shard[:-1]):
        order = np.argsort(shard, kind="stable")
        shard, table = shard[order], table[order]
    bounds = np.searchsorted(shard, np.arange(n_shards + 1), side="left")
    return [
        hashlib.sha256(memoryview(table[bounds[k] : bounds[k + 1]]).cast("B")).hexdigest()
        for k in range(n_shards)
    ]


def _discard(json_path: Path, reason: str) -> None:
    warnings.warn(
        f"{json_path}: frame-index sidecar discarded and rebuilt: {reason}",
        FrameIndexWarning,
        stacklevel=4,
    )


def _read_sidecar(npz_path: Path, json_path: Path, expected: dict) -> FrameIndex | None:
    stored = _read_json(json_path)
    if stored is None:
        if json_path.exists():
            _discard(json_path, "its JSON cannot be read")
        return None
    damage = _check_document(stored)
    if damage is not None:
        if stored.get("format") == INDEX_FORMAT and stored.get("version") in READABLE_VERSIONS:
            _discard(json_path, damage)
        return None
    version = stored["version"]
    facts = {k: v for k, v in stored.items() if k in expected and k != "version"}
    if facts != {k: v for k, v in expected.items() if k != "version"}:
        return None  # another source or changed shards: stale, not damaged
    try:
        with np.load(_checked_npz(npz_path, stored)) as arrays:
            index = FrameIndex(
                arrays["frame_shard"].astype(np.int32, copy=False),
                arrays["frame_offset"].astype(np.int64, copy=False),
                arrays["frame_nbytes"].astype(np.int64, copy=False),
                expected["elem_size"],
                expected["frame_elems"],
                arrays["chunk_xxh3"].astype(np.uint64, copy=False) if version >= 3 else None,
            )
    except _UNREADABLE_ARRAYS as exc:
        damaged = isinstance(exc, _DamagedArrays)
        _discard(
            json_path,
            "its arrays fail their checksum" if damaged else f"its arrays cannot be read ({exc})",
        )
        return None
    n = sum(expected["frames_per_shard"])
    shapes = {index.frame_shard.shape, index.frame_offset.shape, index.frame_nbytes.shape}
    if index.chunk_xxh3 is not None:
        shapes.add(index.chunk_xxh3.shape)
    if shapes != {(n,)}:
        _discard(json_path, "its arrays do not describe every frame")
        return None
    if version < 3:
        return index
    if stored.get("arrays_sha256") != _arrays_digest(index):
        _discard(json_path, "its arrays fail their checksum")
        return None
    tables = shard_table_hashes(index, len(expected["shards"]))
    for shard, (got, recorded) in enumerate(zip(tables, stored.get("shard_tables") or [])):
        if got != recorded:
            _discard(json_path, f"the chunk-offset table of {expected['shards'][shard]} changed")
            return None
    if len(stored.get("shard_tables") or []) != len(tables):
        _discard(json_path, "it does not describe every shard")
        return None
    return index


class _DamagedArrays(ValueError):
    """The ``.npz`` bytes differ from the SHA-256 its (checksummed) JSON records."""


def _checked_npz(npz_path: Path, stored: dict) -> io.BytesIO:
    """The ``.npz`` file's bytes, checked against ``npz_sha256`` before numpy parses them
    (version 3), so a damaged file is refused before the zip reader sees it."""
    data = npz_path.read_bytes()
    if stored.get("version", 0) >= 3 and hashlib.sha256(data).hexdigest() != stored.get(
        "npz_sha256"
    ):
        raise _DamagedArrays("the file fails its checksum")
    return io.BytesIO(data)


def _write_sidecar(npz_path: Path, json_path: Path, expected: dict, index: FrameIndex) -> None:
    arrays = io.BytesIO()
    np.savez(
        arrays,
        frame_shard=index.frame_shard,
        frame_offset=index.frame_offset,
        frame_nbytes=index.frame_nbytes,
        chunk_xxh3=index.chunk_xxh3,
    )
    document = {
        **expected,
        "shard_tables": shard_table_hashes(index, len(expected["shards"])),
        "arrays_sha256": _arrays_digest(index),
        "npz_sha256": hashlib.sha256(arrays.getvalue()).hexdigest(),
    }
    document["checksum"] = _document_checksum(document)
    try:
        npz_path.parent.mkdir(parents=True, exist_ok=True)
        tag = f".tmp-{os.getpid()}"
        tmp_npz = npz_path.with_name(npz_path.name + tag)
        tmp_json = json_path.with_name(json_path.name + tag)
        tmp_npz.write_bytes(arrays.getvalue())
        tmp_json.write_text(_canonical(document).decode() + "\n")
        # Arrays first: a JSON present means its arrays are complete.
        os.replace(tmp_npz, npz_path)
        os.replace(tmp_json, json_path)
    except OSError:
        for tmp in (locals().get("tmp_npz"), locals().get("tmp_json")):
            if tmp is not None and Path(tmp).exists():
                Path(tmp).unlink()
