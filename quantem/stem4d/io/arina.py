"""Reader of Dectris ARINA HDF5 acquisitions (master file + bitshuffle-LZ4 data shards).

:func:`open_arina` parses the master and its shards and builds (or reuses) the frame
index; :func:`read_compressed` reads raw chunks by byte offset with parallel ``pread``;
:mod:`quantem.stem4d.io.cpu_decode` decodes them on all cores; :func:`load_arina` applies the
load options (:mod:`quantem.stem4d.io.transforms`) and returns an :class:`Acquisition`. Without
load options, each thread reads then decodes its own pieces of frames into the result.
The layout is described in ``docs/arina.md`` and mirrored in
:mod:`quantem.stem4d.io.arina_layout`.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import math
import os
import threading
import warnings
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import xxhash

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.errors import (
    ArinaFormatError,
    FrameIndexWarning,
    ScanShapeError,
    SourceIntegrityError,
    SourceIsDirectoryError,
    SourceNotFoundError,
    UnsupportedDtypeError,
)
from quantem.stem4d.io import arina_layout as layout
from quantem.stem4d.io import library_decode
from quantem.stem4d.io.frame_index import (
    FrameIndex,
    cached_shard_layout,
    load_or_build_frame_index,
    shard_stats,
)
from quantem.stem4d.io.transforms import FrameFinisher, LoadOptions, parse_loader_options

#: Whether :func:`load_arina` checks every raw chunk against the frame index's XXH3-64
#: when the caller does not say: on, as its cost on a warm CPU load is within 5%
#: (docs/arina.md).
VERIFY_SOURCE_DEFAULT = True
#: Frames decoded per batch by :func:`load_arina` and :func:`iter_frame_batches`.
DEFAULT_BATCH_FRAMES = 1024
#: Contiguous chunks are read with one ``preadv`` call up to this many bytes.
MAX_READ_BYTES = 8 << 20


@dataclass
class ArinaSource:
    """An opened ARINA acquisition: layout facts, frame index and metadata (no pixel data)."""

    master_path: str
    shard_paths: list[str]
    shard_frames: list[int]
    scan_shape: tuple[int, int]
    detector_shape: tuple[int, int]
    dtype: np.dtype
    n_frames: int
    pixel_mask: np.ndarray
    validity: np.ndarray
    metadata: dict
    source_identity: dict
    index: FrameIndex = field(repr=False)

    @property
    def frame_bytes(self) -> int:
        return self.detector_shape[0] * self.detector_shape[1] * self.dtype.itemsize

    def frame_files(self, start: int, stop: int) -> list[str]:
        return [self.shard_paths[s] for s in self.index.frame_shard[start:stop]]


def expected_chunk_hashes(source: ArinaSource) -> np.ndarray:
    """XXH3-64 (seed 0) of every frame's raw chunk as first observed, uint64 in frame order.

    What ``verify_source=True`` compares the chunks read now against, on the CPU here and
    on the GPU by the CUDA loader. Raises :class:`SourceIntegrityError` when the frame
    index was read from a version-2 sidecar, which has no checksums.
    """
    hashes = source.index.chunk_xxh3
    if hashes is None:
        raise SourceIntegrityError(
            source.master_path,
            "the frame index has no chunk checksums (built by an older quantem); "
            "load once with fresh_index=True to record them from the current files",
        )
    return hashes


def chunk_mismatch_error(source: ArinaSource, frame: int) -> SourceIntegrityError:
    """The error for a frame whose chunk differs from its recorded checksum."""
    shard = int(source.index.frame_shard[frame])
    shard_first = int(sum(source.shard_frames[:shard]))
    return SourceIntegrityError(
        source.shard_paths[shard],
        "chunk changed since the frame index was built (its XXH3-64 differs from the one "
        "recorded at the first observation)",
        frame=int(frame),
        shard_frame=int(frame) - shard_first,
    )


def verify_chunks(source: ArinaSource, first: int, buffer: Any, offsets: np.ndarray) -> None:
    """Check chunks of frames ``[first, first + len(offsets) - 1)`` held in ``buffer``
    (frame ``first + i`` at ``buffer[offsets[i]:offsets[i+1]]``) against the index."""
    n = len(offsets) - 1
    expected = expected_chunk_hashes(source)[first : first + n]
    data = memoryview(buffer).cast("B")
    for i in range(n):
        got = xxhash.xxh3_64_intdigest(data[int(offsets[i]) : int(offsets[i + 1])])
        if got != int(expected[i]):
            raise chunk_mismatch_error(source, first + i)


def _sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _scalar(value: Any) -> Any:
    if isinstance(value, bytes | np.bytes_):
        return bytes(value).decode("utf-8", "replace").rstrip("\x00")
    if isinstance(value, np.generic):
        return value.item()
    return value


def _read_detector_fields(f: Any) -> tuple[dict, dict]:
    """Scalar datasets of the detector and detectorSpecific groups, and their units."""
    import h5py

    fields: dict[str, Any] = {}
    units: dict[str, str] = {}
    for group_path in (layout.DETECTOR_GROUP, layout.DETECTOR_SPECIFIC_GROUP):
        group = f.get(group_path)
        if not isinstance(group, h5py.Group):
            continue
        for name in group:
            link = group.get(name, getlink=True)
            if not isinstance(link, h5py.HardLink):
                continue
            item = group[name]
            if not isinstance(item, h5py.Dataset) or item.shape != ():
                continue
            if item.dtype.kind not in "iufSb":
                continue
            fields.setdefault(name, _scalar(item[()]))
            unit = item.attrs.get("units")
            if unit is not None:
                units.setdefault(name, _scalar(unit))
    return fields, units


def _count_field(master: Path, fields: dict, name: str, default: int | None = None) -> int:
    """A frame-count field (``ntrigger``, ``nimages``) as a positive integer, or an error."""
    value = fields.get(name, default)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ArinaFormatError(master, f"{name} must be an integer, not {value!r}")
    if value < 1:
        raise ArinaFormatError(master, f"{name} must be at least 1, not {value}")
    return int(value)


class ShardLink(NamedTuple):
    """One ``data_NNNNNN`` entry of the master: its name and the file and dataset it names."""

    name: str
    path: str
    dataset: str


def _link_label(master: Path, link: ShardLink) -> str:
    return f"{layout.DATA_GROUP}/{link.name} in {master}"


def _resolve_shards(f: Any, master: Path) -> list[ShardLink]:
    """The ``data_NNNNNN`` entries in frame order, each naming a distinct file and dataset."""
    import h5py

    group = f.get(layout.DATA_GROUP)
    if not isinstance(group, h5py.Group):
        raise ArinaFormatError(master, f"not an ARINA master: no {layout.DATA_GROUP} group")
    numbered = []
    for name in group:
        match = layout.SHARD_LINK_PATTERN.match(name)
        if match:
            numbered.append((int(match.group(1)), name))
    if not numbered:
        raise ArinaFormatError(
            master, f"not an ARINA master: no data_NNNNNN entries in {layout.DATA_GROUP}"
        )
    shards = []
    for _, name in sorted(numbered):
        link = group.get(name, getlink=True)
        if isinstance(link, h5py.ExternalLink):
            target = Path(link.filename)
            if not target.is_absolute():
                target = master.parent / target
            shards.append(ShardLink(name, os.fspath(target), link.path))
        elif isinstance(link, h5py.HardLink):
            shards.append(ShardLink(name, os.fspath(master), f"{layout.DATA_GROUP}/{name}"))
        else:
            raise ArinaFormatError(master, f"{layout.DATA_GROUP}/{name} is a soft link")
    _check_distinct_links(master, shards)
    return shards


def _check_distinct_links(master: Path, shards: list[ShardLink]) -> None:
    """Refuse two links naming one file and dataset: the second would repeat the first's
    frames in place of its own (spelled apart, e.g. ``./a.h5`` and ``a.h5``, included)."""
    seen: dict[tuple[str, str], ShardLink] = {}
    for link in shards:
        key = (os.path.realpath(link.path), "/" + link.dataset.strip("/"))
        first = seen.setdefault(key, link)
        if first is not link:
            raise ArinaFormatError(
                master,
                f"{layout.DATA_GROUP}/{link.name} and {layout.DATA_GROUP}/{first.name} both "
                f"link to {link.dataset} in {link.path}; each data_NNNNNN must name its own "
                "frames",
            )


@dataclass(frozen=True)
class _ShardFacts:
    frames: int
    frame_shape: tuple[int, int]
    dtype: np.dtype
    #: (image_nr_low, image_nr_high) attributes of the dataset, 1-based; None if absent
    image_nr: tuple[int, int] | None
    #: (device, inode, object address): the same dataset however it is reached
    identity: tuple[int, int, int]


def _image_numbers(dset: Any, path: str, where: str) -> tuple[int, int] | None:
    """The dataset's ``image_nr_low``/``image_nr_high`` attributes (both or neither)."""
    values = [dset.attrs.get(name) for name in layout.IMAGE_NR_ATTRS]
    if all(v is None for v in values):
        return None
    try:
        low, high = (int(np.asarray(v).reshape(())) for v in values)
    except (TypeError, ValueError):
        raise ArinaFormatError(
            path, f"image_nr_low/image_nr_high {values} are not two integers ({where})"
        ) from None
    return low, high


def _inspect_shard(master: Path, link: ShardLink) -> _ShardFacts:
    """Frames, frame shape, dtype and frame numbers of one shard, checking chunking and
    filter; every error names the shard file and the master's link to it."""
    import h5py

    path, where = link.path, f"the target of {_link_label(master, link)}"
    if not os.path.exists(path):
        raise SourceNotFoundError(path, f"data shard is missing ({where})")
    try:
        with h5py.File(path, "r") as f:
            dset = f.get(link.dataset)
            if not isinstance(dset, h5py.Dataset):
                raise ArinaFormatError(path, f"no dataset {link.dataset} ({where})")
            shape, dtype, chunks = dset.shape, dset.dtype, dset.chunks
            filters = dset.id.get_create_plist()
            filter_list = [filters.get_filter(i) for i in range(filters.get_nfilters())]
            image_nr = _image_numbers(dset, path, where)
            address = h5py.h5o.get_info(dset.id).addr
        stat = os.stat(path)
    except OSError as exc:
        raise ArinaFormatError(path, f"cannot open the data shard ({where}): {exc}") from None
    if len(shape) != 3:
        raise ArinaFormatError(
            path, f"data has shape {shape}, expected (frames, rows, cols) ({where})"
        )
    if dtype.name not in layout.SUPPORTED_DTYPES:
        raise UnsupportedDtypeError(
            f"{path}: data type {dtype} is not supported (uint8, uint16, uint32) ({where})"
        )
    if chunks != (1, shape[1], shape[2]):
        raise ArinaFormatError(path, f"chunks {chunks} are not one frame each ({where})")
    ids = [flt[0] for flt in filter_list]
    if ids != [layout.BSHUF_FILTER_ID]:
        raise ArinaFormatError(
            path, f"filters {ids} are not bitshuffle ({layout.BSHUF_FILTER_ID}) alone ({where})"
        )
    cd_values = filter_list[0][2]
    if len(cd_values) <= 4:
        raise ArinaFormatError(
            path, f"bitshuffle without LZ4 compression is not supported ({where})"
        )
    if cd_values[4] != layout.BSHUF_COMPRESS_LZ4:
        raise ArinaFormatError(path, f"bitshuffle compression {cd_values[4]} is not LZ4 ({where})")
    return _ShardFacts(
        int(shape[0]),
        (int(shape[1]), int(shape[2])),
        dtype,
        image_nr,
        (stat.st_dev, stat.st_ino, int(address)),
    )


def _inspect_shards(
    master: Path, shards: list[ShardLink]
) -> tuple[list[int], tuple[int, int], np.dtype, list[tuple[int, int] | None]]:
    """Frames per shard, the common frame shape and dtype, and each shard's frame numbers
    (``image_nr_low``/``image_nr_high`` or None), every shard checked: one dataset per link."""
    shard_frames: list[int] = []
    image_numbers: list[tuple[int, int] | None] = []
    detector_shape, dtype = None, None
    owners: dict[tuple[int, int, int], ShardLink] = {}
    for link in shards:
        facts = _inspect_shard(master, link)
        first = owners.setdefault(facts.identity, link)
        if first is not link:
            raise ArinaFormatError(
                master,
                f"{layout.DATA_GROUP}/{link.name} and {layout.DATA_GROUP}/{first.name} reach "
                f"the same dataset ({link.dataset} in {link.path}); each data_NNNNNN must name "
                "its own frames",
            )
        if detector_shape is None:
            detector_shape, dtype = facts.frame_shape, facts.dtype
        elif facts.frame_shape != detector_shape or facts.dtype != dtype:
            raise ArinaFormatError(
                link.path,
                f"frames {facts.frame_shape} {facts.dtype} differ from the first shard's "
                f"{detector_shape} {dtype} (the target of {_link_label(master, link)})",
            )
        shard_frames.append(facts.frames)
        image_numbers.append(facts.image_nr)
    assert detector_shape is not None and dtype is not None
    return shard_frames, detector_shape, dtype, image_numbers


def _check_image_numbers(
    master: Path,
    shards: list[ShardLink],
    shard_frames: list[int],
    image_numbers: list[tuple[int, int] | None],
) -> None:
    """Each shard's ``image_nr_low``/``image_nr_high`` (1-based, inclusive), where it has
    them, must be the frames of its link's place: right after those of the links before."""
    starts = np.concatenate([[1], np.cumsum(shard_frames)[:-1] + 1]).astype(int).tolist()
    for link, n, place_low, numbers in zip(
        shards, shard_frames, starts, image_numbers, strict=True
    ):
        if numbers is None or numbers == (place_low, place_low + n - 1):
            continue
        low, high = numbers
        # The link whose place the shard's numbers claim, when it is another one.
        claimed = [
            other.name
            for other, start, m in zip(shards, starts, shard_frames, strict=True)
            if other is not link and start <= low < start + m
        ]
        also = f"; those are the frames of {layout.DATA_GROUP}/{claimed[0]}" if claimed else ""
        raise ArinaFormatError(
            link.path,
            f"holds frames {low}-{high} (image_nr_low/image_nr_high, {n} frames stored) "
            f"but {_link_label(master, link)} places it at frames "
            f"{place_low}-{place_low + n - 1}{also}",
            link=link.name,
        )


def _odd_shard(shards: list[ShardLink], shard_frames: list[int]) -> str:
    """Name the first shard holding another count than the first one (the last may hold
    fewer): where a frame count mismatch most likely comes from."""
    for i, (link, n) in enumerate(zip(shards, shard_frames, strict=True)):
        last = i == len(shards) - 1
        if n > shard_frames[0] or (n < shard_frames[0] and not last):
            return f"; {layout.DATA_GROUP}/{link.name} ({link.path}) holds {n}, the first {shard_frames[0]}"
    return ""


def resolve_scan_shape(
    n_frames: int, scan_shape: Any, attribute: Any, path: str
) -> tuple[tuple[int, int], str]:
    """Scan shape from the argument, else the ``scan_shape`` attribute, else a square."""
    for candidate, origin in ((scan_shape, "argument"), (attribute, "attribute")):
        if candidate is None:
            continue
        try:
            shape = tuple(int(n) for n in np.asarray(candidate).reshape(-1))
        except (TypeError, ValueError):
            raise ScanShapeError(
                f"{path}: scan_shape {origin} {candidate!r} is not two integers"
            ) from None
        if len(shape) != 2 or min(shape) < 1:
            raise ScanShapeError(
                f"{path}: scan_shape {origin} {shape} is not two positive integers"
            )
        if shape[0] * shape[1] != n_frames:
            raise ScanShapeError(
                f"{path}: scan_shape {shape} ({origin}) holds {shape[0] * shape[1]} frames, "
                f"the acquisition has {n_frames}"
            )
        return shape, origin  # type: ignore[return-value]
    side = math.isqrt(n_frames)
    if side * side == n_frames:
        return (side, side), "square"
    raise ScanShapeError(
        f"{path}: {n_frames} frames are not a square scan and the file has no scan_shape "
        "attribute; pass scan_shape=(rows, cols)"
    )


#: Parsed masters of this process, by (absolute path, SHA-256 of the file's bytes): what
#: :func:`_parsed_master` read with h5py (a warm re-open of the same unchanged master skips
#: h5py: 13-18 ms of a 50 ms warm CUDA load of 262,144 small chunks on the H200).
_MASTER_CACHE: dict[tuple[str, str], tuple] = {}
_MASTER_CACHE_SIZE = 16
_MASTER_CACHE_LOCK = threading.Lock()


def _read_master(master: Path) -> tuple:
    """(shards, detector fields, units, scan-shape attribute, pixel mask) of a master."""
    import h5py

    try:
        f = h5py.File(master, "r")
    except OSError as exc:
        raise ArinaFormatError(master, f"not a readable HDF5 file ({exc})") from None
    with f:
        shards = _resolve_shards(f, master)
        fields, units = _read_detector_fields(f)
        scan_attr = f[layout.DATA_GROUP].attrs.get(layout.SCAN_SHAPE_ATTR)
        spec = f.get(layout.DETECTOR_SPECIFIC_GROUP)
        mask_dset = spec.get(layout.PIXEL_MASK) if spec is not None else None
        pixel_mask = None if mask_dset is None else np.asarray(mask_dset[()])
    return shards, fields, units, scan_attr, pixel_mask


def _parsed_master(master: Path, sha256: str) -> tuple:
    """:func:`_read_master`, from this process's cache when the file at ``master`` still
    holds the bytes whose SHA-256 is ``sha256`` (content-addressed: equal bytes parse to
    equal results). A parse is cached only if the file hashes the same after it, so a
    master rewritten while it was read is never cached under the bytes it no longer has.
    Callers get copies of the mutable parts."""
    key = (os.fspath(master), sha256)
    with _MASTER_CACHE_LOCK:
        hit = _MASTER_CACHE.get(key)
    if hit is None:
        hit = _read_master(master)
        if _sha256_file(os.fspath(master)) == sha256:
            with _MASTER_CACHE_LOCK:
                while len(_MASTER_CACHE) >= _MASTER_CACHE_SIZE:
                    _MASTER_CACHE.pop(next(iter(_MASTER_CACHE)))
                _MASTER_CACHE[key] = hit
    shards, fields, units, scan_attr, pixel_mask = hit
    return (
        list(shards),
        dict(fields),
        dict(units),
        copy.deepcopy(scan_attr),
        None if pixel_mask is None else pixel_mask.copy(),
    )


def read_shard_links(master_path: str | os.PathLike) -> list[ShardLink]:
    """The master's ``data_NNNNNN`` links in frame order (each to its own file and
    dataset), without opening the shards: what a caller checking the files needs."""
    master = Path(master_path).absolute()
    if not master.is_file():
        raise SourceNotFoundError(master, "master file does not exist")
    return _parsed_master(master, _sha256_file(os.fspath(master)))[0]


def open_arina(
    master_path: str | os.PathLike,
    *,
    scan_shape: tuple[int, int] | None = None,
    index_dir: str | os.PathLike | None = None,
    fresh_index: bool = False,
) -> ArinaSource:
    """Open an ARINA master file: discover shards, check counts, load the frame index.

    Raises
    ------
    SourceNotFoundError
        The master or a shard does not exist.
    ArinaFormatError
        Not an ARINA layout, frame count mismatch, pixel-mask shape mismatch, truncated
        shard, unsupported chunking or filter.
    UnsupportedDtypeError, ScanShapeError
        As named.
    """
    master = Path(master_path).absolute()
    if master.is_dir():
        raise SourceIsDirectoryError(master, "is a directory; expected an ARINA *_master.h5 file")
    if not master.is_file():
        raise SourceNotFoundError(master, "master file does not exist")
    stat = master.stat()
    # Hashed on every open (not remembered by stat): the harness's cold loads prove by
    # the physical reads that every file of a load, the master included, was read.
    master_sha256 = _sha256_file(os.fspath(master))
    shards, fields, units, scan_attr, pixel_mask = _parsed_master(master, master_sha256)
    if layout.NTRIGGER not in fields:
        raise ArinaFormatError(
            master, f"not an ARINA master: no {layout.DETECTOR_SPECIFIC_GROUP}/{layout.NTRIGGER}"
        )

    identity = {
        "path": os.fspath(master),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "master_sha256": master_sha256,
    }
    shard_paths = [link.path for link in shards]
    dataset_paths = [link.dataset for link in shards]
    try:
        stats = shard_stats(shard_paths)  # once, for the layout and the index
    except SourceNotFoundError as exc:
        missing = next(link for link in shards if link.path == exc.path)
        raise SourceNotFoundError(
            exc.path, f"data shard is missing (the target of {_link_label(master, missing)})"
        ) from None
    cached = (
        None
        if fresh_index
        else cached_shard_layout(
            identity, shard_paths, dataset_paths, index_dir=index_dir, stats=stats
        )
    )
    if cached is not None:  # the shards are unchanged since their index was built
        shard_frames, detector_shape, dtype = cached
        image_numbers = None  # checked when the index was built from these same shards
    else:
        shard_frames, detector_shape, dtype, image_numbers = _inspect_shards(master, shards)
    n_frames = int(sum(shard_frames))
    nimages = _count_field(master, fields, layout.NIMAGES, 1)
    expected = _count_field(master, fields, layout.NTRIGGER) * nimages
    if n_frames != expected:
        raise ArinaFormatError(
            master,
            f"frame count mismatch: shards hold {n_frames} frames, ntrigger * nimages = "
            f"{expected}{_odd_shard(shards, shard_frames)}",
        )
    if image_numbers is not None:
        _check_image_numbers(master, shards, shard_frames, image_numbers)
    if pixel_mask is None:
        pixel_mask = np.zeros(detector_shape, dtype=np.uint32)
    if pixel_mask.dtype.kind not in "uib":
        raise ArinaFormatError(
            master,
            f"pixel_mask has dtype {pixel_mask.dtype}; an integer bit mask is expected",
        )
    if pixel_mask.shape != detector_shape:
        raise ArinaFormatError(
            master, f"pixel_mask shape {pixel_mask.shape} differs from the frames' {detector_shape}"
        )
    pixel_mask = pixel_mask.astype(np.uint32, copy=False)
    resolved, scan_origin = resolve_scan_shape(n_frames, scan_shape, scan_attr, os.fspath(master))

    index = load_or_build_frame_index(
        identity,
        shard_paths,
        shard_frames,
        dtype.itemsize,
        detector_shape[0] * detector_shape[1],
        index_dir=index_dir,
        fresh=fresh_index,
        dataset_paths=dataset_paths,
        detector_shape=detector_shape,
        dtype=dtype.name,
        stats=stats,
    )
    validity = pixel_mask == 0
    metadata = {
        **{k: v for k, v in fields.items() if k != layout.PIXEL_MASK},
        "units": units,
        "scan_shape": resolved,
        "scan_shape_origin": scan_origin,
        "detector_shape": detector_shape,
        "dtype": dtype.name,
        "n_frames": n_frames,
        "pixel_mask": pixel_mask,
        "invalid_pixels": int((~validity).sum()),
        "source_files": [os.fspath(master), *dict.fromkeys(shard_paths)],
        "source_identity": identity,
        "source_format": "arina-hdf5",
        "compressed_bytes": index.compressed_bytes,
    }
    frame_time = fields.get(layout.FRAME_TIME)
    if frame_time is not None and units.get(layout.FRAME_TIME, "s") == "s":
        metadata["dwell_time_s"] = float(frame_time)
    return ArinaSource(
        master_path=os.fspath(master),
        shard_paths=shard_paths,
        shard_frames=shard_frames,
        scan_shape=resolved,
        detector_shape=detector_shape,
        dtype=np.dtype(dtype),
        n_frames=n_frames,
        pixel_mask=pixel_mask,
        validity=validity,
        metadata=metadata,
        source_identity=identity,
        index=index,
    )


def _read_runs(source: ArinaSource, start: int, stop: int) -> list[tuple[int, int, int, int]]:
    """Group frames into ``(shard, file offset, buffer offset, length)`` contiguous reads."""
    index = source.index
    shard = index.frame_shard[start:stop]
    offset = index.frame_offset[start:stop]
    nbytes = index.frame_nbytes[start:stop]
    buffer_offset = np.concatenate([[0], np.cumsum(nbytes)]).astype(np.int64)
    # A new run starts where the shard changes, the file is not contiguous, or it is full.
    breaks = np.ones(len(offset), dtype=bool)
    if len(offset) > 1:
        breaks[1:] = (shard[1:] != shard[:-1]) | (offset[1:] != offset[:-1] + nbytes[:-1])
    runs = []
    run_start = 0
    for i in range(1, len(offset) + 1):
        extends = i < len(offset) and not breaks[i]
        if extends and buffer_offset[i + 1] - buffer_offset[run_start] <= MAX_READ_BYTES:
            continue
        runs.append(
            (
                int(shard[run_start]),
                int(offset[run_start]),
                int(buffer_offset[run_start]),
                int(buffer_offset[i] - buffer_offset[run_start]),
            )
        )
        run_start = i
    return runs


@contextlib.contextmanager
def _open_shards(source: ArinaSource, shards: Iterable[int]) -> Iterator[dict[int, int]]:
    """Read-only descriptors of the given shards, closed on exit."""
    fds: dict[int, int] = {}
    try:
        for shard in shards:
            path = source.shard_paths[shard]
            try:
                fds[shard] = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                raise SourceNotFoundError(path, "data shard is missing") from None
        yield fds
    finally:
        for fd in fds.values():
            os.close(fd)


def _read_run(
    source: ArinaSource, fds: dict[int, int], view: memoryview, run: tuple[int, int, int, int]
) -> None:
    """Read one ``(shard, file offset, buffer offset, length)`` run into ``view``."""
    shard, file_offset, buffer_offset, length = run
    done = 0
    while done < length:
        got = os.preadv(
            fds[shard], [view[buffer_offset + done : buffer_offset + length]], file_offset + done
        )
        if got == 0:
            raise ArinaFormatError(
                source.shard_paths[shard],
                f"file is truncated: a chunk at byte {file_offset + done} is missing",
            )
        done += got


def read_compressed(
    source: ArinaSource,
    start: int = 0,
    stop: int | None = None,
    out: np.ndarray | None = None,
    threads: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Read the raw chunks of frames ``[start, stop)`` into one contiguous buffer.

    Returns ``(buffer, offsets)``: frame ``i``'s chunk is ``buffer[offsets[i]:offsets[i+1]]``
    (``offsets`` has ``n + 1`` entries, the last is the total). ``out`` may be a
    preallocated uint8 buffer (e.g. page-locked) at least that large; the reads use
    ``os.preadv`` from ``threads`` threads (default: up to 8).
    """
    stop = source.n_frames if stop is None else stop
    if not 0 <= start <= stop <= source.n_frames:
        raise IndexError(f"frame range [{start}, {stop}) outside [0, {source.n_frames})")
    nbytes = source.index.frame_nbytes[start:stop]
    offsets = np.zeros(stop - start + 1, dtype=np.int64)
    np.cumsum(nbytes, out=offsets[1:])
    total = int(offsets[-1])
    if out is None:
        out = np.empty(total, dtype=np.uint8)
    elif (
        out.dtype != np.uint8 or out.ndim != 1 or out.shape[0] < total or not out.flags.c_contiguous
    ):
        raise ValueError(f"out must be a contiguous 1-D uint8 buffer of at least {total} bytes")
    runs = _read_runs(source, start, stop)
    if not runs:
        return out, offsets
    view = memoryview(out)
    with _open_shards(source, {run[0] for run in runs}) as fds:
        workers = min(threads or min(8, os.cpu_count() or 1), len(runs))
        if workers <= 1:
            for run in runs:
                _read_run(source, fds, view, run)
        else:
            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(lambda run: _read_run(source, fds, view, run), runs))
    return out, offsets


def _decode_range(
    source: ArinaSource,
    start: int,
    stop: int,
    compressed: tuple[np.ndarray, np.ndarray],
    out: np.ndarray | None,
    threads: int | None,
    engine: str,
    verify_source: bool = False,
) -> np.ndarray:
    from quantem.stem4d.io.cpu_decode import decode_frames

    buffer, offsets = compressed
    if verify_source:
        verify_chunks(source, start, buffer, offsets)
    return decode_frames(
        buffer,
        offsets,
        source.detector_shape,
        source.dtype,
        out=out,
        threads=threads,
        frame_numbers=np.arange(start, stop),
        frame_files=source.frame_files(start, stop),
        engine=engine,
    )


def _library_chunks(buffer, offsets, out, frame_bytes, elem_size, errors, engine, scratch):
    """:func:`~quantem.stem4d.io.cpu_decode.decode_chunks`'s signature for the library engine."""
    library_decode.decode_chunks(buffer, offsets, out, frame_bytes, elem_size, errors)


def _read_and_decode_into(
    source: ArinaSource,
    out: np.ndarray,
    threads: int | None,
    engine: str,
    verify_source: bool = False,
) -> None:
    """Read and decode every frame into ``out`` (flat uint8), each thread its own pieces.

    No separate reader: each of ``threads`` threads takes the next piece of
    :data:`~quantem.stem4d.io.library_decode.FRAMES_PER_TASK` frames (the numba engines:
    :data:`~quantem.stem4d.io.cpu_decode.FRAMES_PER_TASK`), ``preadv``s its chunks into a
    staging buffer it keeps (cache-warm, no page faults after the first piece), then
    decodes them straight into ``out`` (so the decoding thread touches those pages
    first). A reader thread beside the decoders would take CPU from them on a small
    machine; here reading and decoding overlap across threads instead.
    """
    engine = library_decode.resolve_engine(engine)
    if engine == "library":  # numba stays unimported: a one-shot script's largest cost
        per_task, decode_chunks = library_decode.FRAMES_PER_TASK, _library_chunks
    else:
        from quantem.stem4d.io import cpu_decode

        per_task, decode_chunks = cpu_decode.FRAMES_PER_TASK, cpu_decode.decode_chunks
    if verify_source:
        expected_chunk_hashes(source)  # refuses an index without checksums before reading
    n = source.n_frames
    frame_bytes = source.frame_bytes
    elem_size = source.dtype.itemsize
    errors = np.zeros(n, dtype=np.int32)
    pieces = iter(range(0, n, per_task))
    take = threading.Lock()
    failed = threading.Event()

    def work(fds: dict[int, int]) -> None:
        staging = np.empty(0, dtype=np.uint8)
        scratch = np.empty(max(frame_bytes, 1), dtype=np.uint8)
        while not failed.is_set():
            with take:
                first = next(pieces, None)
            if first is None:
                return
            last = min(first + per_task, n)
            offsets = np.zeros(last - first + 1, dtype=np.int64)
            np.cumsum(source.index.frame_nbytes[first:last], out=offsets[1:])
            if staging.size < offsets[-1]:
                staging = np.empty(int(offsets[-1]) * 5 // 4, dtype=np.uint8)
            try:
                view = memoryview(staging)
                for run in _read_runs(source, first, last):
                    _read_run(source, fds, view, run)
                if verify_source:
                    verify_chunks(source, first, staging, offsets)
                decode_chunks(
                    staging,
                    offsets,
                    out[first * frame_bytes : last * frame_bytes],
                    frame_bytes,
                    elem_size,
                    errors[first:last],
                    engine,
                    scratch,
                )
            except BaseException:
                failed.set()
                raise

    workers = max(1, min(threads or library_decode.default_threads(), -(-n // per_task)))
    with _open_shards(source, range(len(source.shard_paths))) as fds:
        if workers == 1:
            work(fds)
        else:
            with ThreadPoolExecutor(workers) as pool:
                try:
                    for done in [pool.submit(work, fds) for _ in range(workers)]:
                        done.result()
                except BaseException:
                    failed.set()  # e.g. KeyboardInterrupt: the others stop after a piece
                    raise
    if not errors.any():
        return
    from quantem.stem4d.io.cpu_decode import first_decode_error

    failure = first_decode_error(
        errors,
        lambda i: read_compressed(source, i, i + 1, threads=1)[0],
        frame_bytes,
        elem_size,
        engine,
        frame_numbers=np.arange(n),
        frame_files=source.frame_files(0, n),
    )
    if failure is not None:
        raise failure


def _iter_compressed_batches(
    source: ArinaSource, batch_frames: int, start: int, stop: int, threads: int | None
) -> Iterator[tuple[int, int, tuple[np.ndarray, np.ndarray]]]:
    """Yield ``(first, last, (buffer, offsets))`` per batch, reading the next one meanwhile."""
    if batch_frames < 1:
        raise ValueError(f"batch_frames must be >= 1, got {batch_frames}")
    ranges = [(a, min(a + batch_frames, stop)) for a in range(start, stop, batch_frames)]
    if not ranges:
        return
    with ThreadPoolExecutor(1) as reader:
        pending = reader.submit(read_compressed, source, *ranges[0], None, threads)
        for i, (first, last) in enumerate(ranges):
            compressed = pending.result()
            if i + 1 < len(ranges):
                pending = reader.submit(read_compressed, source, *ranges[i + 1], None, threads)
            yield first, last, compressed


def iter_frame_batches(
    source: ArinaSource,
    batch_frames: int = DEFAULT_BATCH_FRAMES,
    *,
    start: int = 0,
    stop: int | None = None,
    threads: int | None = None,
    engine: str = "auto",
    verify_source: bool = False,
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(first frame, frames (n, det_r, det_c))`` decoded on the CPU, in order.

    The next batch's chunks are read while the current one is decoded; with
    ``verify_source`` each chunk is first checked against its recorded XXH3-64.
    """
    stop = source.n_frames if stop is None else stop
    if verify_source:
        expected_chunk_hashes(source)
    for first, last, compressed in _iter_compressed_batches(
        source, batch_frames, start, stop, threads
    ):
        yield (
            first,
            _decode_range(source, first, last, compressed, None, threads, engine, verify_source),
        )


def load_arina(
    path: str | os.PathLike,
    *,
    dtype: str = "native",
    apply_mask: bool = True,
    det_bin: int = 1,
    scan_shape: tuple[int, int] | None = None,
    fresh_index: bool = False,
    index_dir: str | os.PathLike | None = None,
    threads: int | None = None,
    engine: str = "auto",
    batch_frames: int = DEFAULT_BATCH_FRAMES,
    verify_source: bool | None = None,
    load_options: LoadOptions | None = None,
) -> Acquisition:
    """Load an ARINA acquisition into memory as a 4D numpy array (backend ``"cpu"``).

    Parameters
    ----------
    path
        The ``*_master.h5`` file.
    dtype, apply_mask, det_bin
        Load options, applied by :meth:`quantem.stem4d.io.transforms.LoadOptions.finish`: mask
        first (default on: invalid pixels read 0), then dtype (``"u8"`` saturates,
        counted in ``metadata["clipped_pixels"]``), then detector binning (uint32 block
        sums; trailing rows/columns that do not fill a block are dropped).
    load_options
        The parsed :class:`~quantem.stem4d.io.transforms.LoadOptions` (what ``io.load``
        passes), instead of ``dtype``, ``apply_mask`` and ``det_bin``.
    scan_shape
        Overrides the file's scan shape (must hold every frame).
    fresh_index, index_dir
        Rebuild the frame index instead of reusing its sidecar; where sidecars live
        (default ``$QUANTEM_INDEX_DIR`` or ``~/.cache/quantem/index``).
    threads
        Cores for reading and decoding (default: ``NUMBA_NUM_THREADS`` or every CPU
        this process may use). When the options
        keep the stored dtype and shape, each thread reads and decodes its own pieces
        of frames straight into the result (no separate reader thread) and the mask is
        applied in place.
    engine
        Chunk decoder, see :func:`quantem.stem4d.io.cpu_decode.decode_frames`.
    batch_frames
        Frames per batch when load options change the dtype or shape (decoded,
        finished, then copied into the result).
    verify_source
        Check every raw chunk against the XXH3-64 recorded in the frame index when the
        acquisition was first observed; a chunk that changed since raises
        :class:`~quantem.stem4d.errors.SourceIntegrityError` naming the shard and frame (the
        bitshuffle-LZ4 format has no checksum of its own, so a flipped bit otherwise
        decodes as wrong data). Default (None): :data:`VERIFY_SOURCE_DEFAULT`, on; an index
        read from an older sidecar without checksums then loads unverified with a
        :class:`~quantem.stem4d.errors.FrameIndexWarning` (``True`` refuses it).
        ``False`` skips the check.
    """
    if batch_frames < 1:
        raise ValueError(f"batch_frames must be >= 1, got {batch_frames}")
    options = parse_loader_options(load_options, dtype, apply_mask, det_bin)
    source = open_arina(path, scan_shape=scan_shape, index_dir=index_dir, fresh_index=fresh_index)
    if verify_source is None:
        verify_source = VERIFY_SOURCE_DEFAULT
        if verify_source and source.index.chunk_xxh3 is None:
            # An older sidecar is read, never rewritten: say so rather than refuse.
            warnings.warn(
                f"{source.master_path}: the frame index has no chunk checksums (built by an "
                "older quantem), so this load cannot verify its chunks; load once with "
                "fresh_index=True to record them",
                FrameIndexWarning,
                stacklevel=2,
            )
            verify_source = False
    options.check_detector(source.detector_shape)
    if options.changes_layout(source.dtype):
        finisher = FrameFinisher(
            options, source.n_frames, source.dtype, source.detector_shape, source.validity
        )
        for first, frames in iter_frame_batches(
            source, batch_frames, threads=threads, engine=engine, verify_source=verify_source
        ):
            finisher(first, first + len(frames), frames)
        data, info = finisher.out, finisher.info
    else:
        # Decode straight into the result, each thread reading its own pieces.
        data = np.empty((source.n_frames, *source.detector_shape), dtype=source.dtype)
        _read_and_decode_into(
            source, data.reshape(-1).view(np.uint8), threads, engine, verify_source
        )
        data, info = options.finish(data, source.validity, overwrite=True)
    data = data.reshape(*source.scan_shape, *data.shape[1:])
    metadata = dict(source.metadata)
    metadata.update(
        options.metadata(
            info, stored_dtype=source.dtype, stored_detector_shape=source.detector_shape
        )
    )
    return Acquisition(data, metadata, options.finish_validity(source.validity), "cpu")


__all__ = [
    "ArinaSource",
    "ShardLink",
    "chunk_mismatch_error",
    "expected_chunk_hashes",
    "iter_frame_batches",
    "load_arina",
    "open_arina",
    "read_compressed",
    "read_shard_links",
    "resolve_scan_shape",
    "verify_chunks",
]
