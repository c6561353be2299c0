"""What code a run measured: git state, imported module files, a source fingerprint.

A timing is evidence only if one can say exactly which code produced it. The runner
records the git revision, whether the tree was dirty and a SHA-256 of the diff plus
untracked files, and the path and SHA-256 of every imported ``quantem``/``harness``
module. The revision is trusted only when the source fingerprint of that commit's
files equals the fingerprint of the files that ran (``git_revision_verified``): a copy
of a tree can carry a ``.git`` from another time (a device copy, an rsync), and its
HEAD then names code that did not run. The runner refuses to start when those modules
come from another checkout than the one it measures (an installed copy shadowing the working tree is the classic way to
benchmark the wrong code). The source fingerprint is computed at the start and again
at the end; any difference means the source changed during the run, and the run
fails its source-stability check whatever its timings say.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from harness.errors import SourceStabilityError

SOURCE_PACKAGES = ("quantem", "harness")
#: Paths (relative to the checkout) whose content is the measured source.
FINGERPRINT_PATHS = ("quantem", "harness", "native", "evidence_schema", "pyproject.toml")
#: Never part of the fingerprint: build products and caches.
FINGERPRINT_EXCLUDED_PARTS = ("__pycache__", "build", ".pytest_cache", ".ruff_cache")
#: Third-party packages whose versions the report records.
RECORDED_PACKAGES = (
    "quantem-harness",
    "numpy",
    "h5py",
    "hdf5plugin",
    "bitshuffle",
    "numba",
    "xxhash",
    "jsonschema",
    "psutil",
    "cupy-cuda12x",
    "cupy-cuda13x",
)
_CHUNK = 1 << 20


def sha256_file(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _git(checkout: Path, *args: str) -> bytes | None:
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


def find_checkout(path: str | os.PathLike) -> Path | None:
    """Top level of the git work tree holding ``path``, or None."""
    start = Path(path)
    if start.is_file():
        start = start.parent
    out = _git(start, "rev-parse", "--show-toplevel")
    return Path(out.decode().strip()).resolve() if out else None


def _package_root() -> Path:
    """The folder holding the imported ``harness`` package (its would-be checkout)."""
    import harness

    return Path(harness.__file__).resolve().parent.parent


def collect_modules(packages: Iterable[str] = SOURCE_PACKAGES) -> list[dict]:
    """Name, file path and SHA-256 of every imported module of ``packages``, sorted by name."""
    prefixes = tuple(packages)
    records = []
    for name, module in sorted(sys.modules.items()):
        if module is None or not (
            name in prefixes or name.startswith(tuple(p + "." for p in prefixes))
        ):
            continue
        file = getattr(module, "__file__", None)
        if not file:  # namespace packages have no file
            continue
        path = Path(file).resolve()
        records.append({"name": name, "path": str(path), "sha256": sha256_file(path)})
    return records


def parse_measured_checkout(cwd: str | os.PathLike | None = None) -> Path:
    """The checkout this run measures; refuse when imported code comes from elsewhere.

    The measured checkout is the one holding the imported ``harness`` package. When
    the working directory lies in a *different* checkout that contains its own
    ``quantem`` or ``harness`` package, the user is almost certainly measuring the
    wrong copy, and the run is refused.
    """
    root = _package_root()
    measured = find_checkout(root) or root
    here = find_checkout(Path(cwd) if cwd is not None else Path.cwd())
    foreign = here is not None and here != measured
    if foreign and any((here / pkg / "__init__.py").exists() for pkg in SOURCE_PACKAGES):
        raise SourceStabilityError(
            f"refusing to run: the working directory is in checkout {here}, but the imported "
            f"quantem/harness code comes from {measured}; run from that checkout or install "
            f"this one (pip install -e {here})"
        )
    return measured


def check_module_origins(modules: list[dict], checkout: Path) -> None:
    """Raise when any recorded module file lies outside ``checkout``."""
    outside = [m for m in modules if not Path(m["path"]).is_relative_to(checkout)]
    if outside:
        listing = ", ".join(f"{m['name']} ({m['path']})" for m in outside[:5])
        raise SourceStabilityError(
            f"refusing to run: {len(outside)} imported module(s) come from outside the measured "
            f"checkout {checkout}: {listing}"
        )


def check_code_origin() -> Path:
    """Refuse early (before any data is written) when the code would not be measurable;
    return the measured checkout."""
    checkout = parse_measured_checkout()
    check_module_origins(collect_modules(), checkout)
    return checkout


def collect_git_state(checkout: Path) -> dict:
    """``git_revision``, ``git_dirty`` and ``diff_sha256`` (diff against HEAD plus untracked files).

    Outside a git checkout all three are unknown: revision and hash are None and the
    tree counts as dirty (nothing proves it clean).
    """
    revision = _git(checkout, "rev-parse", "HEAD")
    if revision is None:
        return {"git_revision": None, "git_dirty": True, "diff_sha256": None}
    status = _git(checkout, "status", "--porcelain", "--untracked-files=normal") or b""
    diff = _git(checkout, "diff", "HEAD", "--binary", "--no-color", "--no-ext-diff") or b""
    untracked = _git(checkout, "ls-files", "--others", "--exclude-standard", "-z") or b""
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
    listing = _git(checkout, "ls-tree", "-r", "-z", "--full-tree", revision, "--", *FINGERPRINT_PATHS)
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
        size = int(done.stdout[pos:end].split()[2])
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


def collect_packages() -> dict[str, str]:
    """Installed versions of the packages that shape the measurement."""
    versions = {}
    for name in RECORDED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


class SourceTracker:
    """Start-of-run provenance plus the end-of-run stability check.

    ``start()`` locates the measured checkout, refuses foreign modules and fingerprints
    the source tree plus the files of the modules imported so far. ``finish()``
    fingerprints the same files again, checks that modules imported during the run
    (lazy imports) also come from the checkout, and returns the report's
    ``provenance`` section (listing every module imported by the end) and whether the
    source was stable.
    """

    def __init__(self, checkout: Path | None = None) -> None:
        self.checkout = checkout
        self.start_fingerprint: str | None = None
        self.start_hashes: dict[str, str] = {}
        self.start_modules: list[dict] = []
        #: Files whose content changed (or appeared, or vanished) during the run.
        self.changed_files: list[str] = []
        self.git_state: dict | None = None

    def start(self) -> SourceTracker:
        if self.checkout is None:
            self.checkout = parse_measured_checkout()
        self.start_modules = collect_modules()
        check_module_origins(self.start_modules, self.checkout)
        self.git_state = collect_git_state(self.checkout)
        self.start_hashes = collect_source_hashes(self.checkout, self.start_modules)
        self.start_fingerprint = fingerprint_of(self.start_hashes)
        self.git_state["git_revision_verified"] = is_revision_verified(
            self.checkout, self.git_state["git_revision"], self.start_hashes
        )
        return self

    def finish(self) -> tuple[dict, bool]:
        if self.checkout is None or self.start_fingerprint is None or self.git_state is None:
            raise RuntimeError("SourceTracker.finish() before start()")
        end_hashes = collect_source_hashes(self.checkout, self.start_modules)
        end = fingerprint_of(end_hashes)
        self.changed_files = sorted(
            label
            for label in set(self.start_hashes) | set(end_hashes)
            if self.start_hashes.get(label) != end_hashes.get(label)
        )
        modules = collect_modules()
        foreign = [m for m in modules if not Path(m["path"]).is_relative_to(self.checkout)]
        stable = end == self.start_fingerprint and not foreign
        provenance = {
            **self.git_state,
            "source_fingerprint_start": self.start_fingerprint,
            "source_fingerprint_end": end,
            "modules": modules,
            "python": f"{platform.python_implementation()} {platform.python_version()}",
            "packages": collect_packages(),
            "cuda_kernels": collect_cuda_kernels(),
            "quantem_environment": collect_quantem_environment(),
        }
        return provenance, stable


def collect_quantem_environment() -> dict[str, str]:
    """The ``QUANTEM_*`` variables set; some choose what runs (``QUANTEM_RANS_KERNEL``)."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("QUANTEM_")}


def collect_cuda_kernels() -> list[dict]:
    """Which compiled GPU code this process ran (``quantem.stem4d.cuda.kernel_provenance``): per
    loaded kernel module its source key, ``fatbin`` (with the binary's SHA-256) or
    ``nvrtc`` (with why), and the device's compute capability. Empty when no GPU code
    was loaded; read without importing CuPy (a CPU run never loads the module loader)."""
    loader = sys.modules.get("quantem.stem4d.cuda.module_loader")
    if loader is None:
        return []
    return [dict(record) for record in loader.kernel_provenance()]
