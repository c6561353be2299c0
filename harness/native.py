"""The native C++ reader (``native/``, program ``qem-native-load``): build, find, run.

The native reader is a second, independent implementation of ``docs/qem-format.md``.
The harness runs it as a separate process per load, so every native trial pays a
process launch; :func:`run_native_load` measures that launch apart from the stage
times the program reports about itself (open, read, verify, decode, total), and the
program's ``/proc/self/io`` counters are its own, not the harness's.

See ``docs/native.md`` for the program's command line and JSON output.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import NativeError

#: The CMake project of the native reader, beside the ``harness`` package.
NATIVE_SOURCE_DIR = Path(__file__).resolve().parents[1] / "native"
#: Where ``harness native build`` puts the build when no folder is given (git-ignored).
DEFAULT_BUILD_DIR = NATIVE_SOURCE_DIR / "build"
#: The program's file name inside a build folder.
BINARY_NAME = "qem-native-load"
#: Environment variable naming a prebuilt binary; consulted by :func:`find_native_binary`.
BINARY_ENV = "QEM_NATIVE_BINARY"
#: pkg-config modules the build needs, with the Debian package that provides each.
PKG_CONFIG_MODULES = {"libxxhash": "libxxhash-dev", "libcrypto": "libssl-dev"}
#: Exit status of qem-native-load for a usage error (an unreadable/corrupt file exits 1).
EXIT_NATIVE_USAGE = 64


class NativeLoadError(NativeError):
    """``qem-native-load`` exited non-zero; the fields say why.

    ``returncode`` is 1 for an unreadable or corrupt file and 64 for a usage error;
    ``message`` is the program's one-line message; ``kind`` (``"format"``,
    ``"unsupported_version"``, ``"io"``, ``"resource"``, ``"usage"``), ``section``
    (``"header"``, ``"footer"``, ``"METADATA"``, ..., ``"PAYLOAD"`` for a block's
    bytes) and ``block`` come from the JSON error document the program prints with
    ``--json`` (None when it printed none).
    """

    def __init__(
        self,
        path: str | os.PathLike,
        returncode: int,
        message: str,
        *,
        kind: str | None = None,
        section: str | None = None,
        block: int | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.returncode = returncode
        self.message = message
        self.kind = kind
        self.section = section
        self.block = block
        super().__init__(f"{BINARY_NAME} failed on {self.path} (exit {returncode}): {message}")


def native_unavailable_reason() -> str | None:
    """Why the native reader cannot be built here, or None when the tools are present.

    Checks for cmake, a C++ compiler, pkg-config and the pkg-config modules of the
    libraries (libxxhash, libcrypto); names the Debian packages that provide them.
    """
    missing = []
    if shutil.which("cmake") is None:
        missing.append("cmake (Debian package cmake)")
    if not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        missing.append("a C++17 compiler (Debian package g++)")
    if shutil.which("pkg-config") is None:
        missing.append("pkg-config (Debian package pkg-config)")
    else:
        for module, package in PKG_CONFIG_MODULES.items():
            found = subprocess.run(
                ["pkg-config", "--exists", module], capture_output=True, check=False
            )
            if found.returncode != 0:
                missing.append(f"{module} (Debian package {package})")
    if not NATIVE_SOURCE_DIR.joinpath("CMakeLists.txt").is_file():
        missing.append(f"the native sources ({NATIVE_SOURCE_DIR}/CMakeLists.txt)")
    if missing:
        return "missing " + ", ".join(missing) + "; native/ci-deps.sh installs them"
    return None


def _run_step(argv: Sequence[str], what: str, *, quiet: bool) -> None:
    """Run one build step; on failure raise NativeError with the end of its output."""
    proc = subprocess.run(
        list(argv),
        stdout=subprocess.PIPE if quiet else None,
        stderr=subprocess.STDOUT if quiet else None,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout or "").strip().splitlines()[-30:])
        detail = f":\n{tail}" if tail else ""
        raise NativeError(
            f"native {what} failed (exit {proc.returncode}): {' '.join(argv)}{detail}"
        )


def build_native(
    build_dir: str | os.PathLike | None = None,
    *,
    build_type: str = "Release",
    jobs: int | None = None,
    run_tests: bool = False,
    quiet: bool = True,
) -> Path:
    """Configure and build ``native/`` with CMake; return the path of ``qem-native-load``.

    Parameters
    ----------
    build_dir
        The build folder (created if missing); default ``native/build``.
    build_type
        CMake build type (``Release`` measures; ``Debug`` keeps assertions).
    jobs
        Parallel compile jobs (default: the CPU count).
    run_tests
        Also run the unit and command-line tests with ``ctest``.
    quiet
        Capture the tools' output and show it only when a step fails.

    Raises
    ------
    NativeError
        The tools are missing (with the reason) or a step failed (with its output).
    """
    reason = native_unavailable_reason()
    if reason is not None:
        raise NativeError(f"cannot build the native reader: {reason}")
    build = Path(build_dir) if build_dir is not None else DEFAULT_BUILD_DIR
    build.mkdir(parents=True, exist_ok=True)
    configure = ["cmake", "-S", str(NATIVE_SOURCE_DIR), "-B", str(build)]
    configure.append(f"-DCMAKE_BUILD_TYPE={build_type}")
    if shutil.which("ninja") and not (build / "CMakeCache.txt").exists():
        configure += ["-G", "Ninja"]
    _run_step(configure, "configure", quiet=quiet)
    jobs = jobs or os.cpu_count() or 1
    _run_step(["cmake", "--build", str(build), "--parallel", str(jobs)], "build", quiet=quiet)
    if run_tests:
        _run_step(
            ["ctest", "--test-dir", str(build), "--output-on-failure", "-j", str(jobs)],
            "tests (ctest)",
            quiet=quiet,
        )
    binary = build / BINARY_NAME
    if not os.access(binary, os.X_OK):
        raise NativeError(f"native build finished but {binary} is missing")
    return binary


def find_native_binary(explicit: str | os.PathLike | None = None) -> Path:
    """Locate ``qem-native-load``: the explicit path, else ``$QEM_NATIVE_BINARY``,
    else the default build folder; raise NativeError saying how to build it."""
    if explicit is not None:
        origin, path = "the given path", Path(explicit)
    elif os.environ.get(BINARY_ENV):
        origin, path = f"${BINARY_ENV}", Path(os.environ[BINARY_ENV])
    else:
        origin, path = "the default build folder", DEFAULT_BUILD_DIR / BINARY_NAME
    if path.is_file() and os.access(path, os.X_OK):
        return path.resolve()
    raise NativeError(
        f"no executable {BINARY_NAME} at {path} ({origin}); build it with `harness native build`"
    )


def native_source_digest() -> str:
    """SHA-256 over the native sources (paths and bytes, build folders excluded), so a
    cached build is reused exactly while the sources are unchanged."""
    digest = hashlib.sha256()
    for path in sorted(NATIVE_SOURCE_DIR.rglob("*")):
        relative = path.relative_to(NATIVE_SOURCE_DIR)
        if not path.is_file() or relative.parts[0] == "build" or "__pycache__" in relative.parts:
            continue
        digest.update(relative.as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def native_cache_root() -> Path:
    """Where :func:`ensure_native_binary` keeps its builds: ``$QEM_NATIVE_CACHE``, else
    ``$XDG_CACHE_HOME/quantem-harness``, else ``~/.cache/quantem-harness``."""
    if os.environ.get("QEM_NATIVE_CACHE"):
        return Path(os.environ["QEM_NATIVE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "quantem-harness"


def native_build_dir(root: Path, build_type: str = "Release") -> Path:
    """``<root>/native-<source digest>-<source folder digest>-<build type>``.

    CMake's build folder names its source folder (ctest runs the tests from there), so
    a build made from another checkout with equal sources is not reused: the key holds
    where the sources are as well as what they are.
    """
    where = hashlib.sha256(str(NATIVE_SOURCE_DIR.resolve()).encode()).hexdigest()[:8]
    return root / f"native-{native_source_digest()[:16]}-{where}-{build_type}"


def ensure_native_binary(
    cache_root: str | os.PathLike | None = None, *, build_type: str = "Release"
) -> Path:
    """A ``qem-native-load`` built from the current sources, building it when needed.

    ``$QEM_NATIVE_BINARY`` wins when set. Otherwise the build lives outside the
    checkout in :func:`native_build_dir` and is reused while the sources (and their
    folder) are unchanged (a file lock keeps concurrent builds apart). Used by the tests
    and the benchmark, which must not write into the checkout.
    """
    if os.environ.get(BINARY_ENV):
        return find_native_binary()
    from filelock import FileLock

    root = Path(cache_root) if cache_root is not None else native_cache_root()
    root.mkdir(parents=True, exist_ok=True)
    build_dir = native_build_dir(root, build_type)
    done = build_dir / "build-complete"
    with FileLock(str(build_dir) + ".lock"):
        binary = build_dir / BINARY_NAME
        if done.is_file() and os.access(binary, os.X_OK):
            return binary
        binary = build_native(build_dir, build_type=build_type)
        done.write_text(native_source_digest() + "\n")
    return binary


def _frames_argument(sample_frames: Sequence[int | str]) -> str:
    items = []
    for frame in sample_frames:
        if isinstance(frame, str):
            if frame not in ("FIRST", "MID", "LAST"):
                raise ValueError(f"sample frame {frame!r} is not a number or FIRST, MID, LAST")
            items.append(frame)
        else:
            index = int(frame)
            if index < 0:
                raise ValueError(f"sample frame {index} is negative")
            items.append(str(index))
    if not items:
        raise ValueError("sample_frames is empty")
    return ",".join(items)


def run_native_load(
    binary: str | os.PathLike,
    qem_path: str | os.PathLike,
    sample_frames: Sequence[int | str] | None = None,
    threads: int | None = None,
    *,
    verify: bool = True,
    io: str | None = None,
    dump_path: str | os.PathLike | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Load ``qem_path`` with the native reader in a new process; return its report.

    The returned dict is the program's JSON (see ``docs/native.md``: shape, dtypes,
    ``stages`` in seconds, ``io_before``/``io_after`` from its own ``/proc/self/io``,
    ``peak_rss_bytes``, ``resident_bytes``, ``sample_frames`` and
    ``sample_hashes_u32_le``) plus, measured here:

    - ``wall_seconds``: from just before the process is spawned to its exit;
    - ``launch_seconds``: ``wall_seconds`` minus the program's own
      ``stages["total"]``, i.e. process creation, loading the executable and its
      libraries, start-up and exit, and reading its output.

    Raises
    ------
    NativeLoadError
        The program exited non-zero (corrupt file: exit 1; usage: exit 64).
    NativeError
        The program could not be started, timed out, or printed no valid JSON.
    """
    argv = [os.fspath(binary), "--json"]
    if sample_frames is not None:
        argv += ["--sample-frames", _frames_argument(sample_frames)]
    if threads is not None:
        if int(threads) < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        argv += ["--threads", str(int(threads))]
    if not verify:
        argv.append("--no-verify")
    if io is not None:
        argv += ["--io", io]
    if dump_path is not None:
        argv += ["--dump", os.fspath(dump_path)]
    argv += ["--", os.fspath(qem_path)]
    start = time.perf_counter()
    try:
        # errors="replace": a message with bytes that are not UTF-8 (a file name, say)
        # is still reported, never a UnicodeDecodeError.
        proc = subprocess.run(
            argv,
            capture_output=True,
            encoding="utf-8",
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as exc:
        raise NativeError(f"cannot start {binary}: {exc.strerror}") from exc
    except subprocess.TimeoutExpired as exc:
        raise NativeError(f"{BINARY_NAME} did not finish within {timeout} s on {qem_path}") from exc
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise _load_error(qem_path, proc)
    try:
        doc = json.loads(proc.stdout)
        total = float(doc["stages"]["total"])
    except (ValueError, KeyError, TypeError) as exc:
        raise NativeError(f"{BINARY_NAME} printed no valid report for {qem_path}: {exc}") from exc
    doc["wall_seconds"] = wall
    doc["launch_seconds"] = max(wall - total, 0.0)
    return doc


def _load_error(qem_path: str | os.PathLike, proc: subprocess.CompletedProcess) -> NativeLoadError:
    """The NativeLoadError of a failed run, with the fields of its JSON error line."""
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    if lines:
        message = lines[-1]
    elif proc.returncode < 0:
        message = f"killed by signal {-proc.returncode}"
    else:
        message = "no message"
    fields: dict[str, Any] = {}
    for line in reversed(proc.stdout.strip().splitlines()):
        try:
            error = json.loads(line).get("error")
        except (ValueError, AttributeError):
            continue
        if isinstance(error, dict):
            fields = {key: error.get(key) for key in ("kind", "section", "block")}
            break
    return NativeLoadError(qem_path, proc.returncode, message, **fields)


def hash_frame_u32_le(frame: np.ndarray) -> str:
    """SHA-256 of a frame's pixels as little-endian uint32 values, in C order.

    The same definition as the native program's ``sample_hashes_u32_le``, so Python
    and native loads of one file can be compared frame by frame.
    """
    values = np.ascontiguousarray(frame)
    if values.dtype.kind not in "ub" or values.dtype.itemsize > 4:
        raise TypeError(f"frames must be unsigned integers of at most 32 bits, got {values.dtype}")
    return hashlib.sha256(values.astype("<u4", copy=False).tobytes()).hexdigest()


def io_read_bytes(report: dict[str, Any]) -> int | None:
    """Bytes the native process read from storage during its load (``read_bytes``
    after minus before), or None when its kernel has no ``/proc/self/io``."""
    before = report.get("io_before") or {}
    after = report.get("io_after") or {}
    if "read_bytes" not in before or "read_bytes" not in after:
        return None
    return int(after["read_bytes"]) - int(before["read_bytes"])
