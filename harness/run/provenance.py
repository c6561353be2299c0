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

import importlib.metadata
import os
import platform
import sys
from collections.abc import Iterable
from pathlib import Path

from harness.errors import SourceStabilityError
from harness.run.fingerprint import (
    FINGERPRINT_EXCLUDED_PARTS,
    FINGERPRINT_PATHS,
    collect_source_hashes,
    compute_source_fingerprint,
    fingerprint_of,
    iter_source_files,
    sha256_file,
)
from harness.run.git_state import (
    collect_git_state,
    collect_revision_hashes,
    is_revision_verified,
    run_git,
)

SOURCE_PACKAGES = ("quantem", "harness")
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


def find_checkout(path: str | os.PathLike) -> Path | None:
    """Top level of the git work tree holding ``path``, or None."""
    start = Path(path)
    if start.is_file():
        start = start.parent
    out = run_git(start, "rev-parse", "--show-toplevel")
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


__all__ = [
    "FINGERPRINT_EXCLUDED_PARTS",
    "FINGERPRINT_PATHS",
    "SourceTracker",
    "check_code_origin",
    "collect_git_state",
    "collect_revision_hashes",
    "collect_source_hashes",
    "compute_source_fingerprint",
    "fingerprint_of",
    "is_revision_verified",
    "iter_source_files",
    "sha256_file",
]
