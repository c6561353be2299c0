"""Writing ``.qem`` files (``docs/qem-format.md``; encoder policy §16).

:func:`save_qem` makes two passes over the source: the first finds the maximum count
(for the stored dtype) and gathers the model sample, the second encodes blocks in
parallel and streams them to a temporary file. The file is fsynced and renamed into
place only when complete (and, with ``verify=True``, only after a full decode matched
the source), so a crash never leaves a file that looks finished. The same source and
parameters always give the same bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.errors import UnsupportedDtypeError, VerificationError
from quantem.stem4d.io.formats import is_qem
from quantem.stem4d.io.qem import band_rans, rans
from quantem.stem4d.io.qem import format as fmt
from quantem.stem4d.io.qem import model as qem_model
from quantem.stem4d.io.qem.checksum import xxh3
from quantem.stem4d.io.qem.progress import frame_progress

# The name written into files (informative, §6); kept as first written so that files stay
# byte-identical across the 0.2.0 move to quantem.stem4d.
ENCODER_NAME = "quantem.io.qem"
#: Version of the encoder policy (docs/qem-format.md §16). Files depend only on the
#: source, the parameters and this number (not on the package version), so a prepared
#: file can be reproduced byte for byte; bump it whenever the policy changes.
ENCODER_POLICY = 1
#: Target pixels per block (§16): large enough that the 128 bytes of lane states
#: are negligible, small enough for random access and GPU parallelism.
TARGET_BLOCK_PIXELS = 1 << 18
#: Format 2.0 entries (one row band of a frame block): about this many pixels by default.
TARGET_BAND_ENTRY_PIXELS = 3 << 16
#: Source bytes encoded per parallel batch.
BATCH_BYTES = 64 << 20
CALIBRATION_KEYS = (
    "x_pixel_size",
    "y_pixel_size",
    "detector_distance",
    "photon_energy",
    "incident_wavelength",
    "beam_center_x",
    "beam_center_y",
    "count_time",
    "frame_time",
    "scan_step",
    "scan_step_size",
)
_RESERVED_KEYS = {
    # geometry, mask and source identity live in their own fields of the file
    "scan_shape",
    "detector_shape",
    "dtype",
    "n_frames",
    "pixel_mask",
    "source_files",
    "source_identity",
    "source_dtype",
    "stored_dtype",
    "stored_detector_shape",
    # facts about a particular load or file, recomputed by the reader
    "source_format",
    "compressed_bytes",
    "invalid_pixels",
    "load_options",
    "clipped_pixels",
    "bin_saturated_pixels",
    "det_bin_dropped",
    "qem_source",
    "scan_region",
}


@dataclass
class FrameSource:
    """What the writer needs from a source: geometry, metadata and frame batches."""

    scan_shape: tuple[int, int]
    detector_shape: tuple[int, int]
    dtype: np.dtype
    pixel_mask: np.ndarray
    metadata: dict
    kind: str
    files: list[str]
    identity: dict | None
    iter_batches: Callable[[int], Iterator[tuple[int, np.ndarray]]]
    close: Callable[[], None] = field(default=lambda: None)

    @property
    def n_frames(self) -> int:
        return self.scan_shape[0] * self.scan_shape[1]


def _json_safe(value: Any) -> Any:
    """Plain JSON value or ``None`` when it cannot be stored faithfully."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if isinstance(value, list | tuple) and len(value) <= 64:
        items = [_json_safe(v) for v in value]
        return None if any(i is None for i in items) else items
    if isinstance(value, dict):
        items = {str(k): _json_safe(v) for k, v in value.items()}
        return None if any(v is None for v in items.values()) else items
    return None


def _from_acquisition(acq: Acquisition) -> FrameSource:
    data = acq.array
    if data is None:
        raise ValueError("the acquisition holds no dense data (representation='encoded')")
    if hasattr(data, "get") and not isinstance(data, np.ndarray):  # cupy
        data = data.get()
    data = np.asarray(data)
    if data.ndim != 4:
        raise ValueError(f"acquisition data must be 4D, got shape {data.shape}")
    meta = dict(acq.metadata)
    frames = data.reshape(-1, *data.shape[2:])

    def iter_batches(batch: int) -> Iterator[tuple[int, np.ndarray]]:
        for start in range(0, frames.shape[0], batch):
            yield start, frames[start : start + batch]

    mask = meta.get("pixel_mask")
    if mask is None:
        mask = np.zeros(data.shape[2:], dtype=np.uint32)
    files = [str(f) for f in meta.get("source_files", [])]
    return FrameSource(
        scan_shape=tuple(data.shape[:2]),
        detector_shape=tuple(data.shape[2:]),
        dtype=data.dtype,
        pixel_mask=np.asarray(mask),
        metadata=meta,
        kind=str(meta.get("source_format") or ("array" if not files else "acquisition")),
        files=files,
        identity=_json_safe(meta.get("source_identity")),
        iter_batches=iter_batches,
    )


def _from_arina(source: Any) -> FrameSource:
    from quantem.stem4d.io.arina import iter_frame_batches

    def iter_batches(batch: int) -> Iterator[tuple[int, np.ndarray]]:
        yield from iter_frame_batches(source, batch_frames=batch)

    return FrameSource(
        scan_shape=tuple(source.scan_shape),
        detector_shape=tuple(source.detector_shape),
        dtype=np.dtype(source.dtype),
        pixel_mask=np.asarray(source.pixel_mask),
        metadata=dict(source.metadata),
        kind="arina-hdf5",
        files=[str(source.master_path), *(str(p) for p in source.shard_paths)],
        identity=_json_safe(source.source_identity),
        iter_batches=iter_batches,
    )


def _from_qem(path: Path) -> FrameSource:
    from quantem.stem4d.io.qem.reader import QemFile, acquisition_metadata

    qem = QemFile(path)
    meta = acquisition_metadata(qem, qem.scan_shape)
    return FrameSource(
        scan_shape=qem.scan_shape,
        detector_shape=qem.detector_shape,
        dtype=qem.dtype,
        pixel_mask=qem.pixel_mask,
        metadata=meta,
        kind="qem",
        files=[str(path)],
        identity=_json_safe(meta["source_identity"]),
        iter_batches=lambda batch: qem.iter_frame_batches(batch),
        close=qem.close,
    )


def open_frame_source(source: Any) -> FrameSource:
    """Wrap an Acquisition, an ArinaSource, or a path (HDF5 master or .qem)."""
    if isinstance(source, Acquisition):
        return _from_acquisition(source)
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        if is_qem(path):
            return _from_qem(path)
        from quantem.stem4d.io.arina import open_arina

        return _from_arina(open_arina(path))
    if hasattr(source, "shard_paths") and hasattr(source, "master_path"):
        return _from_arina(source)
    raise TypeError(f"cannot save {type(source).__name__}: expected an Acquisition or a path")


def default_block_frames(frame_pixels: int, n_frames: int, target: int | None = None) -> int:
    """``ceil(target / P)`` frames (``target`` 2^18 pixels unless given), capped by the
    frame count and the 2^31 pixel limit."""
    frames = -(-(TARGET_BLOCK_PIXELS if target is None else target) // frame_pixels)
    return max(1, min(frames, n_frames, fmt.MAX_BLOCK_PIXELS // frame_pixels))


def default_band_rows(det_r: int, det_c: int) -> int:
    """2.0 rows per band: about 12 bands, each at least 512 pixels, at most ``det_r``."""
    rows = max(-(-det_r // 12), -(-512 // det_c))
    return max(1, min(rows, det_r))


def _stored_itemsize(maximum: int) -> int:
    for itemsize in (1, 2, 4):
        if maximum < (1 << (8 * itemsize)):
            return itemsize
    raise UnsupportedDtypeError(f"count {maximum} does not fit in uint32")


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(8 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _iter_aligned(src: FrameSource, batch_frames: int) -> Iterator[tuple[int, np.ndarray]]:
    """Source frames regrouped into batches of exactly ``batch_frames`` (last shorter),
    as 2D (n, P) arrays."""
    pixels = src.detector_shape[0] * src.detector_shape[1]
    pending: list[np.ndarray] = []
    have = 0
    start = 0
    for _, frames in src.iter_batches(batch_frames):
        frames = np.asarray(frames).reshape(-1, pixels)
        pending.append(frames)
        have += frames.shape[0]
        while have >= batch_frames:
            joined = np.concatenate(pending) if len(pending) > 1 else pending[0]
            yield start, joined[:batch_frames]
            start += batch_frames
            rest = joined[batch_frames:]
            pending = [rest] if rest.shape[0] else []
            have = rest.shape[0]
    if have:
        yield start, np.concatenate(pending) if len(pending) > 1 else pending[0]


def save_qem(
    source: Any,
    path: str | os.PathLike,
    *,
    verify: bool = False,
    source_hashes: bool = False,
    block_frames: int | None = None,
    progress: bool | None = None,
    keep_source_dtype: bool = False,
    model_frames: int = qem_model.DEFAULT_MODEL_FRAMES,
    n_classes: int = qem_model.DEFAULT_CLASSES,
    overwrite: bool = False,
    version: int = fmt.VERSION_MAJOR,
    band_rows: int | None = None,
) -> Path:
    """Write ``source`` as a ``.qem`` file at ``path``.

    Parameters
    ----------
    source
        An :class:`~quantem.stem4d.acquisition.Acquisition`, an ``ArinaSource``, or a path to
        an ARINA master or a ``.qem`` file.
    verify
        Decode the written file completely and compare every count with the source
        before the file is moved into place; raises ``VerificationError`` otherwise.
    source_hashes
        Record the SHA-256 of every source file in the metadata.
    block_frames
        Frames per block (default ``ceil(2^18 / pixels per frame)``).
    progress
        Show a progress bar (default: when stderr is a TTY).
    keep_source_dtype
        Store the source dtype instead of the narrowest dtype holding every count.
    model_frames, n_classes
        Encoder parameters (§16): frames sampled for the model, pixel classes (1-4).
    overwrite
        Replace an existing ``path`` (atomically, once the new file is complete).
        Without it an existing file is an error and is left untouched.
    version
        Format major version: 1 (default; masks and values, §10-§12) or 2 (per-pixel
        symbols in row bands, §19: faster GPU decoding, and masked sums decode only
        the bands a mask touches).
    band_rows
        2.0 only: detector rows per band (default :func:`default_band_rows`).

    Returns
    -------
    Path
        ``path``.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists (pass overwrite=True to replace it)")
    src = open_frame_source(source)
    try:
        return _save(
            src,
            path,
            verify,
            source_hashes,
            block_frames,
            progress,
            keep_source_dtype,
            model_frames,
            n_classes,
            version,
            band_rows,
        )
    finally:
        src.close()


def _save(
    src: FrameSource,
    path: Path,
    verify: bool,
    source_hashes: bool,
    block_frames: int | None,
    progress: bool | None,
    keep_source_dtype: bool,
    model_frames: int,
    n_classes: int,
    version: int = fmt.VERSION_MAJOR,
    band_rows: int | None = None,
) -> Path:
    if version not in (fmt.VERSION_MAJOR, fmt.VERSION_2):
        raise ValueError(f"version must be {fmt.VERSION_MAJOR} or {fmt.VERSION_2}, got {version}")
    dtype = np.dtype(src.dtype)
    if dtype.kind not in "ub" or dtype.itemsize not in (1, 2, 4):
        raise UnsupportedDtypeError(f"cannot store {dtype} counts in .qem (uint8/16/32 only)")
    det_r, det_c = src.detector_shape
    pixels = det_r * det_c
    n_frames = src.n_frames
    if not (1 <= det_r <= fmt.MAX_DETECTOR_SIDE and 1 <= det_c <= fmt.MAX_DETECTOR_SIDE):
        raise ValueError(f"detector shape {src.detector_shape} is outside the format limits")
    if pixels > fmt.MAX_FRAME_PIXELS or n_frames < 1 or n_frames > fmt.MAX_FRAMES:
        raise ValueError(f"shape {(*src.scan_shape, det_r, det_c)} outside the format limits")
    if version == fmt.VERSION_2:
        band_rows = default_band_rows(det_r, det_c) if band_rows is None else int(band_rows)
        if not 1 <= band_rows <= det_r:
            raise ValueError(f"band_rows {band_rows} out of range 1..{det_r}")
        band_first, band_n_rows = fmt.band_geometry(det_r, det_c, band_rows)
        band_quad0 = fmt.band_quads(det_r, det_c, band_rows)
        bands = int(band_first.size)
        unit_pixels = int(band_n_rows.max()) * det_c
    else:
        if band_rows is not None:
            raise ValueError("band_rows applies to version 2 only")
        band_rows, bands, unit_pixels = 0, 1, pixels
    if block_frames is None:
        # 2.0: entries of about 3 x 2^16 pixels (64 frames of a 16-row band of 192 x 192),
        # the entry size that decoded fastest on the GPU
        target = TARGET_BAND_ENTRY_PIXELS if version == fmt.VERSION_2 else None
        block_frames = default_block_frames(unit_pixels, n_frames, target)
        block_frames = max(1, min(block_frames, fmt.MAX_BLOCK_PIXELS // pixels))
    block_frames = int(block_frames)
    if block_frames < 1 or block_frames * pixels > fmt.MAX_BLOCK_PIXELS:
        raise ValueError(f"block_frames {block_frames} out of range")
    source_itemsize = max(1, dtype.itemsize)

    hashes = None
    if source_hashes:
        if not src.files:
            raise ValueError("source_hashes=True needs a source with files")
        hashes = {Path(f).name: _sha256(f) for f in src.files}

    # pass 1: maximum and model sample
    sample_index = qem_model.sample_frame_indices(n_frames, model_frames)
    sample = np.zeros((sample_index.size, det_r, det_c), dtype=dtype)
    maximum = 0
    batch = max(
        block_frames, BATCH_BYTES // (pixels * dtype.itemsize) // block_frames * block_frames
    )
    with frame_progress(progress, n_frames, "qem: scanning") as advance:
        for start, frames in _iter_aligned(src, batch):
            if frames.size:
                maximum = max(maximum, int(frames.max()))
            lo, hi = np.searchsorted(sample_index, [start, start + frames.shape[0]])
            sample[lo:hi] = frames[sample_index[lo:hi] - start].reshape(-1, det_r, det_c)
            advance(frames.shape[0])
    itemsize = source_itemsize if keep_source_dtype else _stored_itemsize(maximum)
    stored = np.dtype(fmt.ITEMSIZE_TO_DTYPE[itemsize])
    if version == fmt.VERSION_2:
        model = qem_model.build_band_model(sample.astype(stored), itemsize, band_rows, n_classes)
    else:
        model = qem_model.build_model(sample.astype(stored), itemsize, n_classes)
    freq = model.freq.astype(np.int64)
    cum = model.cum.astype(np.int64)

    # sections before the payload have known lengths
    pixel_mask = np.ascontiguousarray(src.pixel_mask, dtype=np.uint32)
    if pixel_mask.shape != (det_r, det_c):
        raise ValueError(f"pixel mask shape {pixel_mask.shape} != detector {(det_r, det_c)}")
    mask_bytes = pixel_mask.astype("<u4").tobytes() if pixel_mask.any() else b""
    metadata = _metadata(src, stored, dtype, pixel_mask, hashes, block_frames, model_frames, model)
    metadata_bytes = fmt.dump_metadata(metadata)
    if len(metadata_bytes) > fmt.MAX_METADATA_BYTES:
        raise ValueError("metadata exceeds 16 MiB")
    model_bytes = fmt.pack_model(model)
    n_blocks = -(-n_frames // block_frames) * bands
    lengths = [
        len(metadata_bytes),
        len(mask_bytes),
        len(model_bytes),
        fmt.BLOCK_ENTRY_SIZE * n_blocks,
        8 * n_blocks,
        0,
        0,
    ]
    offsets, _ = fmt.expected_section_layout(lengths)
    payload_offset = offsets[fmt.SECTION_PAYLOAD]

    index = np.zeros(n_blocks, dtype=fmt.BLOCK_INDEX_DTYPE)
    checksums = np.zeros(n_blocks, dtype="<u8")
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with open(temporary, "wb") as out:
            out.write(bytes(payload_offset))
            position = payload_offset
            block = 0
            batch = max(
                block_frames, BATCH_BYTES // (pixels * itemsize) // block_frames * block_frames
            )
            with frame_progress(progress, n_frames, "qem: encoding") as advance:
                for start, frames in _iter_aligned(src, batch):
                    frames = np.ascontiguousarray(frames, dtype=stored)
                    n_batch = -(-frames.shape[0] // block_frames)
                    if start != block // bands * block_frames or block + n_batch * bands > n_blocks:
                        raise ValueError(
                            f"source yielded frames beyond its {n_frames} frames "
                            f"(or out of order); not writing {path}"
                        )
                    if version == fmt.VERSION_2:
                        scratch = np.empty(
                            (n_batch * bands, block_frames * unit_pixels * itemsize + 1024),
                            dtype=np.uint8,
                        )
                        fields2 = np.zeros((n_batch * bands, 4), dtype=np.int64)
                        band_rans.encode_blocks(
                            frames, block_frames, band_first, band_n_rows, band_quad0, det_c,
                            model.group_class, freq, cum, itemsize, scratch, fields2,
                        )  # fmt: skip
                        fields = np.zeros((n_batch * bands, 5), dtype=np.int64)
                        fields[:, :3] = fields2[:, :3]
                        fields[:, 4] = fields2[:, 3]
                    else:
                        scratch = np.empty(
                            (n_batch, block_frames * pixels * itemsize + 256), dtype=np.uint8
                        )
                        fields = np.zeros((n_batch, 5), dtype=np.int64)
                        rans.encode_blocks(
                            frames,
                            block_frames,
                            model.group_class,
                            freq,
                            cum,
                            itemsize,
                            scratch,
                            fields,
                        )
                    for e in range(n_batch * bands):
                        k = e // bands
                        mode, length, n_words, n_nonzero, n_escapes = (int(v) for v in fields[e])
                        extent = fmt.align_up(length, fmt.BLOCK_ALIGN)
                        data = scratch[e, :extent]
                        data[length:] = 0
                        entry = index[block]
                        entry["band"] = e % bands
                        entry["frame_start"] = start + k * block_frames
                        entry["n_frames"] = min(block_frames, frames.shape[0] - k * block_frames)
                        entry["mode"] = mode
                        entry["offset"] = position
                        entry["length"] = length
                        entry["n_words"] = n_words
                        entry["n_nonzero"] = n_nonzero
                        entry["n_escapes"] = n_escapes
                        checksums[block] = xxh3(memoryview(data))
                        out.write(memoryview(data))
                        position += extent
                        block += 1
                    advance(frames.shape[0])
            written = int(index["n_frames"][::bands].astype(np.int64).sum())
            if block != n_blocks or written != n_frames:
                raise ValueError(
                    f"source yielded {written} frames in {block} blocks, expected {n_frames} "
                    f"frames in {n_blocks} blocks; not writing {path}"
                )
            payload_length = position - payload_offset
            lengths[fmt.SECTION_PAYLOAD] = payload_length
            offsets, footer_offset = fmt.expected_section_layout(lengths)
            file_size = footer_offset + fmt.FOOTER_SIZE
            bodies = [
                metadata_bytes,
                mask_bytes,
                model_bytes,
                index.tobytes(),
                checksums.tobytes(),
                b"",
                b"",
            ]
            sections = tuple(
                fmt.Section(
                    offsets[i],
                    lengths[i],
                    xxh3(bodies[i]) if lengths[i] and i != fmt.SECTION_PAYLOAD else 0,
                )
                for i in range(fmt.N_SECTIONS)
            )
            header = fmt.Header(
                version_major=version,
                version_minor=fmt.SUPPORTED_VERSIONS[version],
                file_size=file_size,
                n_frames=n_frames,
                scan_shape=tuple(src.scan_shape),
                detector_shape=(det_r, det_c),
                stored_itemsize=itemsize,
                source_itemsize=source_itemsize,
                block_frames=block_frames,
                n_blocks=n_blocks,
                sections=sections,
                header_xxh3=0,
                band_rows=band_rows,
            )
            header_bytes = fmt.pack_header(header)
            out.write(bytes(footer_offset - position))
            out.write(fmt.pack_footer(file_size, int.from_bytes(header_bytes[-8:], "little")))
            out.seek(0)
            out.write(header_bytes)
            for i, body in enumerate(bodies):
                if body:
                    out.seek(offsets[i])
                    out.write(body)
            out.flush()
            os.fsync(out.fileno())
        if verify:
            _verify_against_source(temporary, src, progress)
        os.replace(temporary, path)
        _fsync_directory(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        raise
    return path


def _metadata(
    src: FrameSource,
    stored: np.dtype,
    dtype: np.dtype,
    pixel_mask: np.ndarray,
    hashes: dict | None,
    block_frames: int,
    model_frames: int,
    model: fmt.Model,
) -> dict:
    calibration = {}
    detector = {}
    for key, value in sorted(src.metadata.items()):
        if key in _RESERVED_KEYS:
            continue
        safe = _json_safe(value)
        if safe is None:
            continue
        (calibration if key in CALIBRATION_KEYS else detector)[key] = safe
    n_masked = int(np.count_nonzero(pixel_mask))
    return {
        "scan_shape": list(src.scan_shape),
        "detector_shape": list(src.detector_shape),
        "n_frames": src.n_frames,
        "dtype": stored.name,
        "source_dtype": fmt.ITEMSIZE_TO_DTYPE[dtype.itemsize],
        "pixel_mask": {
            "dtype": "uint32",
            "encoding": "section" if n_masked else "all-zero",
            "n_masked": n_masked,
        },
        "calibration": calibration,
        "detector": detector,
        "source": {
            "kind": src.kind,
            "files": [Path(f).name for f in src.files],
            "identity": src.identity,
            "sha256": hashes,
        },
        "encoder": {
            "software": ENCODER_NAME,
            "policy": ENCODER_POLICY,
            "block_frames": block_frames,
            "model_frames": model_frames,
            "n_classes": model.n_classes,
        },
    }


def _verify_against_source(path: Path, src: FrameSource, progress: bool | None) -> None:
    from quantem.stem4d.io.qem.reader import QemFile

    with QemFile(path, verify=True) as qem:
        qem.verify_checksums()
        pixels = qem.header.frame_pixels
        batch = max(
            qem.block_frames,
            BATCH_BYTES
            // (pixels * qem.header.stored_itemsize)
            // qem.block_frames
            * qem.block_frames,
        )
        with frame_progress(progress, qem.n_frames, "qem: verifying") as advance:
            for start, frames in _iter_aligned(src, batch):
                decoded = qem.read_frames(start, start + frames.shape[0]).reshape(frames.shape)
                if not np.array_equal(decoded, frames):
                    bad = np.flatnonzero((decoded != frames).any(axis=1))[0]
                    raise VerificationError(
                        f"{path}: decoded frame {start + int(bad)} differs from the source"
                    )
                advance(frames.shape[0])


def _fsync_directory(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
