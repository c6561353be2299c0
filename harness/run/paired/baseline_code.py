"""The baseline's code for a paired recheck: given, this checkout, or exported; checked.

The baseline's code is, in this order: ``--baseline-tree DIR``; this checkout itself,
when its source fingerprint equals the baseline's recorded
``provenance.source_fingerprint_end`` (the same code: nothing to export, and the only
source for a baseline measured from a tree with local changes that this tree still
is); or the baseline's git revision exported with ``git archive`` from the repository
of this checkout (only when the baseline ran from a clean tree, :func:`check_pairable`).
A given or exported tree's source fingerprint must equal the baseline's recorded one,
and the tree must have the worker (:data:`WORKER_FILE`; code from before paired
rechecks cannot be paired): otherwise :class:`IncomparableError` (exit 2) before
anything is measured. :class:`Scratch` is the private folder the export and the
workers' files live in. Whether a recheck pairs at all is :mod:`harness.run.paired.pairing`.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.errors import IncomparableError
from harness.run.provenance import compute_source_fingerprint, find_checkout

WORKER_FILE = Path("harness") / "run" / "paired_worker.py"


@dataclass(frozen=True)
class BaselineCode:
    """The baseline's code tree and how it was obtained (recorded in the report)."""

    tree: Path
    origin: str


def _export_revision(repository: Path, revision: str, dest: Path) -> None:
    """``git archive REVISION`` of ``repository`` unpacked into ``dest``."""
    archive = dest.parent / "baseline.tar"
    with open(archive, "wb") as out:
        done = subprocess.run(
            ["git", "-C", str(repository), "archive", "--format=tar", revision],
            stdout=out,
            stderr=subprocess.PIPE,
        )
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip().splitlines()
        raise IncomparableError(
            f"paired recheck: cannot export the baseline's revision {revision[:12]} from "
            f"{repository}: {message[-1] if message else 'git archive failed'}; give its code "
            "with --baseline-tree DIR"
        )
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    archive.unlink()


def baseline_code(
    baseline_doc: dict,
    baseline_sha256: str,
    *,
    tree: Path | None,
    repository: Path | None,
    scratch: Path,
) -> BaselineCode:
    """The baseline's code tree, checked against its recorded source fingerprint."""
    provenance = baseline_doc["provenance"]
    expected = provenance["source_fingerprint_end"]
    check_pairable(baseline_doc, baseline_sha256, tree)
    if tree is not None:
        found, origin = tree.resolve(), f"tree {tree.resolve()}"
    else:
        revision = provenance["git_revision"]
        if repository is None:
            raise IncomparableError(
                "paired recheck: this checkout is not in a git repository, so the baseline's "
                f"revision {revision[:12]} cannot be exported; give its code with --baseline-tree"
            )
        found = scratch / "baseline-code"
        found.mkdir(parents=True)
        _export_revision(repository, revision, found)
        origin = f"git archive {revision}"
    if not (found / WORKER_FILE).is_file():
        raise IncomparableError(
            f"paired recheck: the baseline's code ({origin}) has no {WORKER_FILE.as_posix()}: it "
            "predates paired rechecks; recheck without --paired"
        )
    fingerprint = compute_source_fingerprint(found)
    if fingerprint != expected:
        raise IncomparableError(
            f"paired recheck: the code of {origin} (fingerprint {fingerprint[:12]}) is not the "
            f"code baseline {baseline_sha256[:12]} measured (fingerprint {expected[:12]})"
        )
    return BaselineCode(found, origin)


def same_code(baseline_doc: dict, fingerprint: str | None) -> bool:
    """Whether code of source fingerprint ``fingerprint`` is the code the baseline measured."""
    recorded = baseline_doc["provenance"].get("source_fingerprint_end")
    return fingerprint is not None and recorded is not None and fingerprint == recorded


def check_pairable(
    baseline_doc: dict, baseline_sha256: str, tree: Path | None, fingerprint: str | None = None
) -> None:
    """Refuse at once (before any trial) a baseline whose code cannot be had back.

    ``fingerprint`` is this checkout's: when it is the baseline's, this checkout is its code.
    """
    provenance = baseline_doc["provenance"]
    if tree is None and same_code(baseline_doc, fingerprint):
        return
    if tree is None and (not provenance.get("git_revision") or provenance.get("git_dirty")):
        raise IncomparableError(
            f"paired recheck: baseline {baseline_sha256[:12]} was measured from "
            + (
                "a tree with local changes"
                if provenance.get("git_revision")
                else "code outside git"
            )
            + ", which git cannot give back; give its code with --baseline-tree DIR"
        )


@contextlib.contextmanager
def baseline_checked_out(
    baseline_doc: dict,
    baseline_sha256: str,
    *,
    tree: Path | None,
    checkout: Path,
    fingerprint: str | None = None,
) -> Iterator[BaselineCode]:
    """The baseline's code (given, this checkout, or exported and checked), while needed.

    ``fingerprint`` is the source fingerprint of ``checkout`` (the code running now): when
    it equals the baseline's recorded one and no tree is given, ``checkout`` is the
    baseline's code, and both workers run from it (each in its own process). Used before
    anything is measured, so that a baseline whose code cannot be had back refuses the
    run or recheck at once (IncomparableError), not after the trials.
    """
    if tree is None and same_code(baseline_doc, fingerprint):
        if not (checkout / WORKER_FILE).is_file():  # not this code's layout: refuse, not guess
            raise IncomparableError(
                f"paired recheck: this checkout {checkout} has no {WORKER_FILE.as_posix()}"
            )
        yield BaselineCode(checkout, f"this checkout {checkout} (same fingerprint)")
        return
    # outside any git checkout: a tree inside one would be taken for that checkout
    scratch = Scratch.create(Path(tempfile.gettempdir()))
    try:
        yield baseline_code(
            baseline_doc,
            baseline_sha256,
            tree=tree,
            repository=find_checkout(checkout),
            scratch=scratch.path,
        )
    finally:
        scratch.remove()


@dataclass
class Scratch:
    """A private folder for the baseline's exported code and the workers' files."""

    path: Path

    @classmethod
    def create(cls, parent: Path) -> Scratch:
        parent.mkdir(parents=True, exist_ok=True)
        return cls(Path(tempfile.mkdtemp(prefix=".harness-paired-", dir=parent)))

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
