"""Write a selection manifest for the ARINA acquisitions under a folder (``harness manifest make``).

Real data otherwise needs a hand-written manifest: this finds every ``*_master.h5``
under ROOT, hashes it, reads its shape and dtype, and optionally records the indexed
product of a trusted CPU load, which every later run must then reproduce exactly.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from harness.errors import UsageError
from harness.run.manifest import dump_manifest, manifest_entry
from harness.run.trials import indexed_product

MASTER_GLOB = "*_master.h5"
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def acquisition_id(master: Path, root: Path) -> str:
    """A manifest id from the master's path under ROOT (``a/b/scan_master.h5`` -> ``a-b-scan``)."""
    relative = master.relative_to(root)
    stem = relative.name[: -len("_master.h5")] or "acquisition"
    parts = [*relative.parent.parts, stem]
    text = _ID_UNSAFE.sub("-", "-".join(parts)).strip("-._") or "acquisition"
    return text[:128]


def find_masters(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob(MASTER_GLOB) if p.is_file())


def build_manifest(
    root: str | Path,
    *,
    products: bool = False,
    progress: Callable[[str], None] | None = None,
) -> bytes:
    """The manifest's bytes for every master under ``root`` (ids unique, in path order)."""
    from quantem.stem4d.io.arina import open_arina

    root = Path(root)
    if not root.is_dir():
        raise UsageError(f"{root}: not a folder (manifest make needs the data ROOT)")
    masters = find_masters(root)
    if not masters:
        raise UsageError(f"{root}: no ARINA master files ({MASTER_GLOB}) under it")
    entries, used = [], set()
    for master in masters:
        if progress:
            progress(str(master))
        source = open_arina(master)
        name = acquisition_id(master, root)
        base, n = name, 1
        while name in used:
            n += 1
            name = f"{base[:120]}-{n}"
        used.add(name)
        entry = manifest_entry(
            name, master, root, source.scan_shape, source.detector_shape, source.dtype.name
        )
        if products:
            entry["indexed_product_sha256"] = trusted_product(master)
        entries.append(entry)
    return dump_manifest(entries, description=f"made by harness manifest make from {root}")


def trusted_product(master: Path) -> str:
    """The indexed product of a CPU load of ``master`` (the reference decoder)."""
    from quantem.stem4d import io

    acquisition = io.load(master, "cpu")
    try:
        return indexed_product(acquisition)[0]
    finally:
        acquisition.close()
