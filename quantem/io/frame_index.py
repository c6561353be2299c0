"""Frame index of an ARINA acquisition: where each frame's compressed chunk lies on disk.

Built once per source with h5py's ``chunk_iter`` (one pass over each shard's chunk
B-tree) and kept as a small sidecar in an index folder, keyed by the source's identity
(master path, size, mtime and SHA-256). Loads then read chunks by byte offset with
``os.pread`` and never go through HDF5's per-chunk machinery.

Sidecar: ``<key>.npz`` (arrays) + ``<key>.json`` (format version, source identity, shard
sizes and mtimes, frames per shard, frame shape, dtype, element size, frame elements). A
sidecar whose JSON or shard stats do not match the current files is ignored and rebuilt.
While it matches, :func:`cached_shard_layout` also spares a load from opening every shard
with h5py to learn what the sidecar already records (frames, frame shape, dtype); those
shards were checked (chunking, filter) when the sidecar was built, and a shard whose
size or modification time changed since makes the sidecar stale.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from quantem.errors import ArinaFormatError, SourceNotFoundError

INDEX_FORMAT = "quantem-frame-index"
INDEX_VERSION = 2  # 2: the shards' frame shape and dtype are stored too
INDEX_DIR_ENV = "QUANTEM_INDEX_DIR"


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
    """

    frame_shard: np.ndarray
    frame_offset: np.ndarray
    frame_nbytes: np.ndarray
    elem_size: int
    frame_elems: int

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

    from quantem.io import arina_layout as layout

    if dataset_paths is None:
        dataset_paths = [layout.SHARD_DATASET] * len(shard_paths)
    n_total = int(sum(frames_per_shard))
    frame_shard = np.empty(n_total, dtype=np.int32)
    frame_offset = np.full(n_total, -1, dtype=np.int64)
    frame_nbytes = np.zeros(n_total, dtype=np.int64)
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
        first += n
    return FrameIndex(frame_shard, frame_offset, frame_nbytes, int(elem_size), int(frame_elems))


def _sidecar_paths(identity: dict, index_dir: str | os.PathLike | None) -> tuple[Path, Path]:
    folder = Path(index_dir) if index_dir is not None else default_index_dir()
    key = index_key(identity)
    return folder / f"{key}.npz", folder / f"{key}.json"


def cached_shard_layout(
    identity: dict,
    shard_paths: Sequence[str],
    dataset_paths: Sequence[str] | None,
    *,
    index_dir: str | os.PathLike | None = None,
) -> tuple[list[int], tuple[int, int], np.dtype] | None:
    """Frames per shard, frame shape and dtype recorded by a sidecar that still matches.

    None when there is no sidecar, or it was written for other shards, or any shard's
    size or modification time changed since. Raises :class:`SourceNotFoundError` for a
    missing shard (as opening it would).
    """
    _, json_path = _sidecar_paths(identity, index_dir)
    try:
        stored = json.loads(json_path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(stored, dict):
        return None
    if (
        stored.get("format") != INDEX_FORMAT
        or stored.get("version") != INDEX_VERSION
        or stored.get("source_identity") != identity
        or stored.get("shards") != [os.fspath(p) for p in shard_paths]
        or stored.get("datasets") != (list(dataset_paths) if dataset_paths is not None else None)
        or stored.get("shard_stats") != _shard_stats(shard_paths)
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
) -> FrameIndex:
    """The source's frame index from its sidecar, or built (and stored) when absent/stale.

    An index folder that cannot be written is not an error: the index is then only
    kept in memory.
    """
    npz_path, json_path = _sidecar_paths(identity, index_dir)
    expected = {
        "format": INDEX_FORMAT,
        "version": INDEX_VERSION,
        "source_identity": identity,
        "shards": [os.fspath(p) for p in shard_paths],
        "datasets": list(dataset_paths) if dataset_paths is not None else None,
        "shard_stats": _shard_stats(shard_paths),
        "frames_per_shard": [int(n) for n in frames_per_shard],
        "detector_shape": list(detector_shape) if detector_shape is not None else None,
        "dtype": np.dtype(dtype).name if dtype is not None else None,
        "elem_size": int(elem_size),
        "frame_elems": int(frame_elems),
    }
    if not fresh:
        index = _read_sidecar(npz_path, json_path, expected)
        if index is not None:
            return index
    index = build_frame_index(shard_paths, frames_per_shard, elem_size, frame_elems, dataset_paths)
    _write_sidecar(npz_path, json_path, expected, index)
    return index


def _read_sidecar(npz_path: Path, json_path: Path, expected: dict) -> FrameIndex | None:
    try:
        stored = json.loads(json_path.read_text())
        if stored != expected:
            return None
        with np.load(npz_path) as arrays:
            index = FrameIndex(
                arrays["frame_shard"].astype(np.int32),
                arrays["frame_offset"].astype(np.int64),
                arrays["frame_nbytes"].astype(np.int64),
                expected["elem_size"],
                expected["frame_elems"],
            )
    except (OSError, ValueError, KeyError):
        return None
    n = sum(expected["frames_per_shard"])
    if not (
        index.frame_shard.shape == index.frame_offset.shape == index.frame_nbytes.shape == (n,)
    ):
        return None
    return index


def _write_sidecar(npz_path: Path, json_path: Path, expected: dict, index: FrameIndex) -> None:
    try:
        npz_path.parent.mkdir(parents=True, exist_ok=True)
        tag = f".tmp-{os.getpid()}"
        tmp_npz = npz_path.with_name(npz_path.name + tag)
        tmp_json = json_path.with_name(json_path.name + tag)
        with open(tmp_npz, "wb") as f:
            np.savez(
                f,
                frame_shard=index.frame_shard,
                frame_offset=index.frame_offset,
                frame_nbytes=index.frame_nbytes,
            )
        tmp_json.write_text(json.dumps(expected, sort_keys=True, separators=(",", ":")) + "\n")
        # Arrays first: a JSON present means its arrays are complete.
        os.replace(tmp_npz, npz_path)
        os.replace(tmp_json, json_path)
    except OSError:
        for tmp in (locals().get("tmp_npz"), locals().get("tmp_json")):
            if tmp is not None and Path(tmp).exists():
                Path(tmp).unlink()
