"""The source fingerprint: a SHA-256 over the content of every file of the measured source.

Two trees with the same fingerprint hold the same ``quantem``/``harness`` code (and the
files named in :data:`FINGERPRINT_PATHS`), whatever their git state says.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

#: Paths (relative to the checkout) whose content is the measured source.
FINGERPRINT_PATHS = ("quantem", "harness", "native", "evidence_schema", "pyproject.toml")
#: Never part of the fingerprint: build products and caches.
FINGERPRINT_EXCLUDED_PARTS = ("__pycache__", "build", ".pytest_cache", ".ruff_cache")
_CHUNK = 1 << 20


def sha256_file(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def iter_source_files(checkout: Path, roots: Iterable[str] = FINGERPRINT_PATHS):
    """Regular files under the fingerprinted paths, sorted, without build products."""
    found = []
    for rel in roots:
        top = checkout / rel
        if top.is_file():
            found.append(top)
            continue
        if not top.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(
                d for d in dirnames if d not in FINGERPRINT_EXCLUDED_PARTS and not d.startswith(".")
            )
            for name in filenames:
                if name.endswith((".pyc", ".so", ".o")):
                    continue
                found.append(Path(dirpath) / name)
    return sorted(found)


def collect_source_hashes(checkout: Path, modules: list[dict] | None = None) -> dict[str, str]:
    """Content hash of every fingerprinted file, keyed by its path relative to the checkout
    (absolute when outside); ``"missing"`` for a file that cannot be read."""
    paths = set(iter_source_files(checkout))
    for record in modules or ():
        paths.add(Path(record["path"]))
    hashes = {}
    for path in sorted(paths):
        label = str(path.relative_to(checkout)) if path.is_relative_to(checkout) else str(path)
        try:
            hashes[label] = sha256_file(path)
        except OSError:
            hashes[label] = "missing"
    return hashes


def fingerprint_of(hashes: dict[str, str]) -> str:
    """SHA-256 over sorted ``path NUL content-hash`` lines: a rename, edit or new file changes it."""
    digest = hashlib.sha256()
    for label in sorted(hashes):
        digest.update(f"{label}\0{hashes[label]}\n".encode(errors="surrogateescape"))
    return digest.hexdigest()


def compute_source_fingerprint(checkout: Path, modules: list[dict] | None = None) -> str:
    """SHA-256 over the measured source tree and the given module files."""
    return fingerprint_of(collect_source_hashes(checkout, modules))
