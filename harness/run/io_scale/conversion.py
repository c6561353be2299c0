"""The disposable ``.qem`` of a run: preparation, the timed conversion, reference headers.

The timed conversion is the user's workflow, streamed as ``quantem.stem4d.io.save`` streams
it: ``hdf5_read`` opens the ARINA source (frame index lookup; its frames are read
and decoded batch by batch inside the next stage), ``encode_write`` encodes and
writes (temporary name, fsync, rename), then ``--reloads`` ``reopen_verify`` stages
reopen the new file with checksum verification and compare it, batch by batch, with
the HDF5 source. Host memory therefore grows with one batch of frames, never with
the acquisition (docs/io-scale.md, "Memory").
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import quantem.stem4d.io
from harness.run.checks import FailureLog
from harness.run.io_scale.qem_reference import (
    compare_reference_header,
    header_document,
    write_header_document,
)
from harness.run.manifest import SelectedAcquisition
from harness.run.qem_copy import write_qem_untimed
from harness.run.timers import WallTimer
from quantem.stem4d.io.arina import iter_frame_batches, open_arina
from quantem.stem4d.io.qem import format as qem_format
from quantem.stem4d.io.qem.reader import QemFile

#: Folder of the output directory that keeps the prepared files' header documents.
REFERENCE_HEADER_DIR = "qem-reference-headers"
#: Frames compared at a time by ``reopen_verify`` (as many as the ARINA reader decodes).
VERIFY_BATCH_FRAMES = 1024


@dataclass(frozen=True)
class ConversionSettings:
    """``--no-verify``, ``--no-source-hashes`` and ``--reloads``."""

    verify: bool = True
    source_hashes: bool = True
    reloads: int = 1
    version: int = qem_format.VERSION_MAJOR

    @property
    def verified(self) -> bool:
        return self.verify and self.source_hashes and self.reloads > 0


def prepare_untimed(
    selected: SelectedAcquisition,
    qem_path: Path,
    index_dir: Path,
    version: int = qem_format.VERSION_MAJOR,
) -> None:
    """Write the QEM without timing or verification (``--load-only``)."""
    write_qem_untimed(selected.master_path, qem_path, index_dir, version)


def timed_conversion(
    selected: SelectedAcquisition,
    qem_path: Path,
    index_dir: Path,
    settings: ConversionSettings,
    log: FailureLog,
    barrier: Callable[[], None],
) -> dict:
    """HDF5 read, encode+write (fsync, rename), N verified reopens: the conversion record."""
    timer = WallTimer(barrier).start()
    with timer.stage("hdf5_read"):
        source = open_arina(selected.master_path, index_dir=str(index_dir))
    with timer.stage("encode_write"):
        quantem.stem4d.io.save(
            source,
            qem_path,
            verify=settings.verify,
            source_hashes=settings.source_hashes,
            version=settings.version,
        )
    for _ in range(settings.reloads):
        with timer.stage("reopen_verify"):
            identical = reopened_equals_source(qem_path, source)
        if not identical:
            log.correctness(f"{selected.id}: reopened QEM differs from the HDF5 source")
    seconds = timer.stop()
    record = {
        "acquisition": selected.id,
        "stages": dict(timer.stages),
        "verify": settings.verify,
        "source_hashes": settings.source_hashes,
        "reloads": settings.reloads,
        "qem_bytes": qem_path.stat().st_size,
        "cache_state": "as left by the first observation (source mostly cached)",
    }
    record["verified_conversion_seconds" if settings.verified else "conversion_seconds"] = seconds
    return record


def reopened_equals_source(qem_path: Path, source, batch_frames: int | None = None) -> bool:
    """Reopen ``qem_path`` with checksum verification; compare every frame with ``source``.

    Both sides are read one batch at a time (the QEM decodes only the blocks of the
    batch), so the comparison holds two batches in memory, not two acquisitions. Counts
    are compared by value: the QEM may store a narrower dtype than the source.
    """
    with QemFile(qem_path, verify=True) as qem:
        if (
            tuple(qem.scan_shape) != tuple(source.scan_shape)
            or tuple(qem.detector_shape) != tuple(source.detector_shape)
            or qem.n_frames > source.n_frames
        ):
            return False
        batch = batch_frames or VERIFY_BATCH_FRAMES
        for first, frames in iter_frame_batches(source, batch, stop=qem.n_frames):
            if not np.array_equal(qem.read_frames(first, first + len(frames)), frames):
                return False
    return True


def qem_stored_dtype(path: Path) -> str:
    """The dtype a ``.qem`` file stores (its loads expose it), from its header."""
    with open(path, "rb") as f:
        header = qem_format.parse_header(
            f.read(qem_format.HEADER_SIZE + qem_format.FOOTER_SIZE), str(path)
        )
    return str(header.stored_dtype)


def check_reference_header(log: FailureLog, selected: SelectedAcquisition, qem_path: Path) -> bool:
    """False (and a correctness failure) when the QEM differs from the manifest's header."""
    if selected.qem_reference_header is None:
        return True
    written = header_document(qem_path)["version"][0]
    archived = json.loads(Path(selected.qem_reference_header).read_bytes())["version"][0]
    if written != archived:
        # A reference archived for another format checks nothing about this file.
        warnings.warn(
            f"{selected.id}: the reference header {selected.qem_reference_header} is of .qem "
            f"format {archived}, this run writes format {written}: not compared",
            stacklevel=2,
        )
        return True
    differences = compare_reference_header(qem_path, selected.qem_reference_header)
    if differences:
        log.correctness(
            f"{selected.id}: prepared QEM differs from reference header "
            f"{selected.qem_reference_header}: " + "; ".join(differences[:5])
        )
        return False
    return True


def collect_reference_headers(qem_paths: dict[str, Path | None]) -> dict[str, dict]:
    """Header documents of the prepared QEM files, by acquisition id (before they go)."""
    return {
        acquisition_id: header_document(path)
        for acquisition_id, path in qem_paths.items()
        if path is not None and path.exists()
    }


def write_reference_headers(output_dir: Path, headers: dict[str, dict]) -> None:
    """Archive the header documents beside the report (existing ones are kept)."""
    folder = output_dir / REFERENCE_HEADER_DIR
    for acquisition_id, document in headers.items():
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{acquisition_id}.qem-header.json"
        if not target.exists():
            write_header_document(document, target)
