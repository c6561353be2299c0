"""The selection manifest: which acquisitions under ROOT a run measures.

Format: ``evidence_schema/selection-manifest.v1.json`` (JSON Schema 2020-12),
described in ``docs/io-scale.md``. Parsing validates the schema, then what a schema
cannot say: unique ids, filenames that stay inside ROOT after resolving ``..`` and
symbolic links, a reference header that exists, one sample hash per sample frame.
:func:`check_master_hashes` then proves each master file is the one the manifest
names before any measurement starts.
"""

from __future__ import annotations

import functools
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ManifestError
from harness.resources import data_folder
from harness.run.provenance import sha256_file
from harness.run.source_files import describe_change, link_label, source_shard_entries

SCHEMA_NAME = "quantem-harness/selection-manifest"
SCHEMA_VERSION = 1
SCHEMA_PATH = data_folder("evidence_schema") / "selection-manifest.v1.json"


@dataclass(frozen=True)
class SelectedAcquisition:
    """One manifest entry with its master path resolved inside ROOT."""

    id: str
    filename: str
    master_path: Path
    source_master_sha256: str
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    indexed_product_sha256: str | None = None
    qem_reference_header: Path | None = None
    sample_frames: tuple[int, ...] | None = None
    sample_hashes_u32_le: tuple[str, ...] | None = None
    #: ``source_shards`` entries (link, size, sha256, chunk_xxh3_64), or None
    source_shards: tuple[dict, ...] | None = None


@dataclass(frozen=True)
class SelectionManifest:
    """A parsed manifest: its own path, the data ROOT and the selected acquisitions."""

    path: Path
    root: Path
    acquisitions: tuple[SelectedAcquisition, ...]


@functools.cache
def _validator():
    from jsonschema import Draft202012Validator

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


class _DuplicateKey(ValueError):
    pass


def _refuse_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object without repeated keys (the last one would win silently)."""
    doc: dict = {}
    for key, value in pairs:
        if key in doc:
            raise _DuplicateKey(f"duplicate key {key!r} in a JSON object")
        doc[key] = value
    return doc


def _json_path(parts) -> str:
    path = "$"
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def resolve_under_root(root: Path, filename: str, *, label: str) -> Path:
    """``ROOT/filename`` resolved; refuse absolute names and anything escaping ROOT.

    Symbolic links are resolved before the check, so a link pointing outside ROOT is
    refused like a ``..`` path.
    """
    if "\x00" in filename:
        raise ManifestError(f"{label}: filename {filename!r} holds a NUL byte")
    if os.path.isabs(filename):
        raise ManifestError(
            f"{label}: filename {filename!r} is absolute; it must be relative to ROOT"
        )
    real_root = root.resolve()
    candidate = (real_root / filename).resolve()
    if not candidate.is_relative_to(real_root):
        raise ManifestError(
            f"{label}: filename {filename!r} escapes ROOT {real_root} (resolves to {candidate})"
        )
    return candidate


def parse_manifest(path: str | os.PathLike, root: str | os.PathLike) -> SelectionManifest:
    """Read and validate a selection manifest for data under ``root``.

    Raises
    ------
    ManifestError
        Naming the manifest file and the JSON path of the first problem.
    """
    path = Path(path)
    root = Path(root)
    if not root.is_dir():
        raise ManifestError(f"ROOT {root} is not a folder")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ManifestError(f"{path}: no such manifest file") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: cannot read the manifest: {exc}") from exc
    try:
        doc = json.loads(text, object_pairs_hook=_refuse_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno}") from exc
    except _DuplicateKey as exc:
        raise ManifestError(f"{path}: not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise ManifestError(f"{path}: not a manifest: JSON nested too deeply") from exc
    if not isinstance(doc, dict):
        raise ManifestError(f"{path}: $: a manifest is a JSON object, not {type(doc).__name__}")
    from jsonschema.exceptions import best_match

    error = best_match(_validator().iter_errors(doc))
    if error is not None:
        raise ManifestError(f"{path}: {_json_path(error.absolute_path)}: {error.message}")
    if doc.get("schema_version", SCHEMA_VERSION) > SCHEMA_VERSION:
        raise ManifestError(
            f"{path}: schema_version {doc['schema_version']} is newer than this harness reads "
            f"({SCHEMA_VERSION}); upgrade quantem-harness"
        )
    acquisitions = []
    seen: set[str] = set()
    for i, entry in enumerate(doc["selected_acquisitions"]):
        label = f"{path}: $.selected_acquisitions[{i}]"
        if entry["id"] in seen:
            raise ManifestError(f"{label}.id: duplicate acquisition id {entry['id']!r}")
        seen.add(entry["id"])
        master = resolve_under_root(root, entry["filename"], label=f"{label}.filename")
        header = None
        if "qem_reference_header" in entry:
            if "\x00" in entry["qem_reference_header"]:
                raise ManifestError(f"{label}.qem_reference_header: the name holds a NUL byte")
            header = Path(entry["qem_reference_header"])
            if not header.is_absolute():
                header = path.parent / header
            if not header.is_file():
                raise ManifestError(f"{label}.qem_reference_header: no such file {header}")
        frames = tuple(entry["sample_frames"]) if "sample_frames" in entry else None
        hashes = tuple(entry["sample_hashes_u32_le"]) if "sample_hashes_u32_le" in entry else None
        if hashes is not None and len(hashes) != len(frames or ()):
            raise ManifestError(
                f"{label}.sample_hashes_u32_le: {len(hashes)} hashes for "
                f"{len(frames or ())} sample frames"
            )
        shape = tuple(entry["shape"]) if "shape" in entry else None
        if frames is not None and shape is not None and max(frames) >= shape[0] * shape[1]:
            raise ManifestError(
                f"{label}.sample_frames: frame {max(frames)} is outside the "
                f"{shape[0] * shape[1]} frames of shape {list(shape)}"
            )
        links = [shard["link"] for shard in entry.get("source_shards", ())]
        if len(set(links)) != len(links):
            raise ManifestError(f"{label}.source_shards: a link is listed twice")
        acquisitions.append(
            SelectedAcquisition(
                id=entry["id"],
                filename=entry["filename"],
                master_path=master,
                source_master_sha256=entry["source_master_sha256"],
                shape=shape,
                dtype=entry.get("dtype"),
                indexed_product_sha256=entry.get("indexed_product_sha256"),
                qem_reference_header=header,
                sample_frames=frames,
                sample_hashes_u32_le=hashes,
                source_shards=tuple(entry["source_shards"]) if "source_shards" in entry else None,
            )
        )
    return SelectionManifest(path=path, root=root, acquisitions=tuple(acquisitions))


def check_master_hashes(manifest: SelectionManifest) -> None:
    """Raise ManifestError unless every master file exists with the SHA-256 the manifest names."""
    problems = []
    for acq in manifest.acquisitions:
        if not acq.master_path.is_file():
            problems.append(f"{acq.id}: master file {acq.master_path} does not exist")
            continue
        actual = sha256_file(acq.master_path)
        if actual != acq.source_master_sha256:
            problems.append(
                f"{acq.id}: master file {acq.master_path} has SHA-256 {actual}, "
                f"the manifest expects {acq.source_master_sha256}"
            )
    if problems:
        raise ManifestError(f"{manifest.path}: " + "; ".join(problems))


def check_source_files(manifest: SelectionManifest) -> dict:
    """Check every file of the acquisitions whose entry lists ``source_shards``.

    Each file is hashed once (shared files once in all), before any measurement; a file
    whose size or SHA-256 differs from the manifest's, a missing file, or links that are
    not the manifest's raise ManifestError naming the acquisition, the file, the link and
    (from the chunk checksums) the first changed frame. Returns what was checked, for the
    report's ``source_check.manifest_files``.
    """
    from quantem.stem4d.errors import QuantemError
    from quantem.stem4d.io.arina import read_shard_links

    start = time.perf_counter()
    seen: dict[str, tuple[int, str]] = {}
    problems, listed = [], 0
    for acq in manifest.acquisitions:
        if acq.source_shards is None:
            continue
        listed += 1
        try:
            links = read_shard_links(acq.master_path)
        except QuantemError as exc:
            problems.append(f"{acq.id}: {exc}")
            continue
        recorded = {shard["link"]: shard for shard in acq.source_shards}
        if [link.name for link in links] != [shard["link"] for shard in acq.source_shards]:
            problems.append(
                f"{acq.id}: the master links {[link.name for link in links]}, the manifest "
                f"lists {list(recorded)}"
            )
            continue
        for link in links:
            entry, real = recorded[link.name], os.path.realpath(link.path)
            if real not in seen:
                try:
                    seen[real] = (os.stat(real).st_size, sha256_file(real))
                except FileNotFoundError:
                    problems.append(f"{acq.id}: {link.path} ({link_label(link)}) is missing")
                    continue
            size, digest = seen[real]
            if (size, digest) != (entry["size"], entry["sha256"]):
                problems.append(
                    f"{acq.id}: {link.path} ({link_label(link)}) is not the file the manifest "
                    f"names (size {size}, SHA-256 {digest}; the manifest has {entry['size']}, "
                    f"{entry['sha256']}): {describe_change(acq.master_path, link, entry)}"
                )
    if problems:
        raise ManifestError(f"{manifest.path}: " + "; ".join(problems))
    return {
        "state": "checked"
        if listed == len(manifest.acquisitions)
        else ("partly" if listed else "not in manifest"),
        "acquisitions": listed,
        "files": len(seen),
        "bytes": sum(size for size, _ in seen.values()),
        "seconds": round(time.perf_counter() - start, 6),
    }


def manifest_entry(
    acquisition_id: str,
    master: str | os.PathLike,
    root: str | os.PathLike,
    scan_shape: tuple[int, int],
    detector_shape: tuple[int, int],
    dtype: str,
    *,
    source_shards: bool = True,
) -> dict:
    """One ``selected_acquisitions`` entry for a master under ``root``: the master hashed
    and, with ``source_shards``, each linked file's size, SHA-256 and chunk checksums."""
    entry = {
        "id": acquisition_id,
        "filename": str(Path(master).relative_to(root)),
        "source_master_sha256": sha256_file(master),
        "shape": [*scan_shape, *detector_shape],
        "dtype": dtype,
    }
    if source_shards:
        entry["source_shards"] = source_shard_entries(master)
    return entry


def dump_manifest(entries: list[dict], *, description: str | None = None) -> bytes:
    """Serialise a manifest deterministically (used by the demo and by tests)."""
    doc: dict = {
        "schema": SCHEMA_NAME,
        "schema_version": SCHEMA_VERSION,
        "selected_acquisitions": entries,
    }
    if description:
        doc["description"] = description
    _validator().validate(doc)
    return json.dumps(doc, sort_keys=True, indent=2).encode() + b"\n"
