"""Load the CUDA sources shipped with quantem: ahead-of-time fatbins first, NVRTC otherwise.

Kernels live in real ``.cu`` files next to this module (package data). A module is a
(file, constants) pair: the caller's compile-time constants are injected as ``#define``
lines in front of the source. For the common specialisations (``quantem.stem4d.cuda.aot``) the
package ships fatbins built by ``nvcc`` for sm_80, sm_90 and sm_100 with compute_100 PTX;
a fatbin's name is the SHA-256 of everything that determines its code (the rendered
source and the compile options), so an edited source can never load a stale binary.
Where no fatbin matches, the module is compiled by CuPy's ``RawModule`` (NVRTC) for the
current device's architecture, which CuPy's on-disk cache keeps for later processes.

Either way the module is cached per (file, constants, device) for the life of the process,
and :func:`kernel_provenance` says which path each loaded module took (with the fatbin's
SHA-256), for run reports.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
from importlib import resources
from pathlib import Path
from typing import Any

COMPILE_OPTIONS = ("-std=c++17",)
#: Folder of the shipped fatbins (package data).
FATBIN_DIR = Path(__file__).with_name("fatbin")
#: Set to ``1`` to ignore the shipped fatbins (every module through NVRTC).
DISABLE_AOT_ENV = "QUANTEM_CUDA_NO_AOT"
#: Compute capabilities the fatbins carry machine code for; newer ones JIT the PTX.
AOT_ARCHES = (80, 90, 100)

_provenance_lock = threading.Lock()
_provenance: dict[tuple[str, str, int], dict[str, Any]] = {}


@functools.cache
def read_source(filename: str) -> str:
    """The text of a ``.cu`` file shipped in the ``quantem.stem4d.cuda`` package."""
    return resources.files("quantem.stem4d.cuda").joinpath(filename).read_text(encoding="utf-8")


def render_defines(defines: dict[str, int | str]) -> str:
    """``#define`` lines for the constants, in a fixed order so the cache key is stable."""
    return "".join(f"#define {name} {value}\n" for name, value in sorted(defines.items()))


def render_module_source(filename: str, defines: dict[str, int | str]) -> str:
    """The exact text compiled for ``filename`` with ``defines`` (both paths compile this)."""
    return render_defines(defines) + read_source(filename)


def module_key(filename: str, defines: dict[str, int | str]) -> str:
    """SHA-256 naming the code of a module: rendered source and compile options."""
    digest = hashlib.sha256()
    digest.update(render_module_source(filename, defines).encode("utf-8"))
    digest.update(b"\0" + " ".join(COMPILE_OPTIONS).encode("utf-8"))
    return digest.hexdigest()


def fatbin_path(filename: str, defines: dict[str, int | str]) -> Path:
    """Where the shipped fatbin of this module would be."""
    stem = filename.rsplit(".", 1)[0]
    return FATBIN_DIR / f"{stem}-{module_key(filename, defines)[:24]}.fatbin"


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _aot_covers(capability: int) -> bool:
    """A fatbin runs on this device: exact machine code, or the PTX for a newer chip."""
    return capability in AOT_ARCHES or capability > max(AOT_ARCHES)


@functools.cache
def _compile(filename: str, define_items: tuple[tuple[str, int | str], ...], device_id: int) -> Any:
    import cupy

    defines = dict(define_items)
    record: dict[str, Any] = {"file": filename, "key": module_key(filename, defines)}
    with cupy.cuda.Device(device_id) as device:
        capability = int(device.compute_capability)
        path = fatbin_path(filename, defines)
        module = None
        if os.environ.get(DISABLE_AOT_ENV) != "1" and _aot_covers(capability) and path.is_file():
            module = cupy.RawModule(path=str(path))
            record.update(path="fatbin", binary=path.name, binary_sha256=_sha256_file(path))
        else:
            code = render_module_source(filename, defines)
            module = cupy.RawModule(code=code, options=COMPILE_OPTIONS)
            module.compile()
            record.update(
                path="nvrtc",
                reason=(
                    "disabled by " + DISABLE_AOT_ENV
                    if os.environ.get(DISABLE_AOT_ENV) == "1"
                    else ("no fatbin for this specialisation" if _aot_covers(capability)
                          else f"no fatbin code for sm_{capability}")
                ),
            )  # fmt: skip
        record["device_capability"] = capability
    with _provenance_lock:
        _provenance[(filename, record["key"], device_id)] = record
    return module


def load_module(filename: str, defines: dict[str, int | str]) -> Any:
    """Compiled ``cupy.RawModule`` of ``filename`` with ``defines``, for the current device."""
    import cupy

    device_id = cupy.cuda.Device().id
    return _compile(filename, tuple(sorted(defines.items())), device_id)


def kernel_provenance() -> list[dict[str, Any]]:
    """One record per module loaded in this process: file, key, ``path`` (``"fatbin"`` or
    ``"nvrtc"``), the fatbin's name and SHA-256 (fatbin) or why NVRTC ran, and the device's
    compute capability. Sorted, so equal processes give equal lists."""
    with _provenance_lock:
        records = [dict(r) for r in _provenance.values()]
    return sorted(records, key=lambda r: (r["file"], r["key"], r["device_capability"]))


def forget_modules() -> None:
    """Drop every loaded module and its provenance record (the next load compiles or loads
    again; tests use it to exercise both paths in one process)."""
    _compile.cache_clear()
    with _provenance_lock:
        _provenance.clear()
