"""The git state of a measured checkout, and whether its revision is the code that ran.

A copy of a tree can carry a ``.git`` from another time (a device copy, an rsync): its
HEAD then names code that did not run, even where ``git status`` calls the tree clean
(a stat cache that still matches). :func:`is_revision_verified` reads the commit's files
from git's objects and compares their fingerprint with that of the files that ran.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from harness.run.fingerprint import (
    FINGERPRINT_EXCLUDED_PARTS,
    FINGERPRINT_PATHS,
    fingerprint_of,
    sha256_file,
)


def run_git(checkout: Path, *args: str) -> bytes | None:
    """stdout of ``git -C checkout ARGS``, or None when git fails or is missing."""
    try:
        done = subprocess.run(
            ["git", "-C", str(checkout), *args],
            capture_output=True,
            check=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout


def collect_git_state(checkout: Path) -> dict:
    """``git_revision``, ``git_dirty`` and ``diff_sha256`` (diff against HEAD plus untracked files).

    Outside a git checkout all three are unknown: revision and hash are None and the
    tree counts as dirty (nothing proves it clean).
    """
    revision = run_git(checkout, "rev-parse", "HEAD")
    if revision is None:
        return {"git_revision": None, "git_dirty": True, "diff_sha256": None}
    status = run_git(checkout, "status", "--porcelain", "--untracked-files=normal") or b""
    diff = run_git(checkout, "diff", "HEAD", "--binary", "--no-color", "--no-ext-diff") or b""
    untracked = run_git(checkout, "ls-files", "--others", "--exclude-standard", "-z") or b""
    digest = hashlib.sha256()
    digest.update(b"diff\0")
    digest.update(diff)
    for rel in sorted(p for p in untracked.decode(errors="surrogateescape").split("\0") if p):
        path = checkout / rel
        digest.update(b"untracked\0" + rel.encode(errors="surrogateescape") + b"\0")
        if path.is_file() and not path.is_symlink():
            digest.update(sha256_file(path).encode())
    return {
        "git_revision": revision.decode().strip(),
        "git_dirty": bool(status.strip()),
        "diff_sha256": digest.hexdigest(),
    }


def collect_revision_hashes(checkout: Path, revision: str) -> dict[str, str] | None:
    """Content hash of every fingerprinted file of commit ``revision`` (read from git's
    objects, not the working tree), keyed like :func:`collect_source_hashes`; None when
    git cannot say."""
    listing = run_git(
        checkout, "ls-tree", "-r", "-z", "--full-tree", revision, "--", *FINGERPRINT_PATHS
    )
    if listing is None:
        return None
    blobs: list[tuple[str, str]] = []
    for entry in listing.decode(errors="surrogateescape").split("\0"):
        if not entry:
            continue
        meta, _, rel = entry.partition("\t")
        mode, kind, obj = meta.split()
        parts = Path(rel).parts
        if kind != "blob" or mode == "120000" or rel.endswith((".pyc", ".so", ".o")):
            continue
        if any(p in FINGERPRINT_EXCLUDED_PARTS or p.startswith(".") for p in parts[:-1]):
            continue
        blobs.append((rel, obj))
    try:
        done = subprocess.run(
            ["git", "-C", str(checkout), "cat-file", "--batch"],
            input="".join(f"{obj}\n" for _, obj in blobs).encode(),
            capture_output=True,
            check=True,
            timeout=120,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    out = memoryview(done.stdout)
    hashes = {}
    pos = 0
    for rel, _ in blobs:
        end = done.stdout.index(b"\n", pos)
        header = done.stdout[pos:end].split()
        if len(header) != 3:  # "<object> missing": a clone without that content
            return None
        size = int(header[2])
        hashes[rel] = hashlib.sha256(out[end + 1 : end + 1 + size]).hexdigest()
        pos = end + 1 + size + 1
    return hashes


def is_revision_verified(checkout: Path, revision: str | None, hashes: dict[str, str]) -> bool:
    """Whether commit ``revision`` holds exactly the fingerprinted files that ran
    (``hashes`` from :func:`collect_source_hashes`)."""
    if revision is None:
        return False
    committed = collect_revision_hashes(checkout, revision)
    return committed is not None and fingerprint_of(committed) == fingerprint_of(hashes)
