"""Load the CUDA sources shipped with quantem, compiled once per set of constants.

Kernels live in real ``.cu`` files next to this module (package data). A module is
compiled by CuPy's ``RawModule`` (NVRTC) for the architecture of the current device, with
the caller's compile-time constants injected as ``#define`` lines in front of the source,
and cached per (file, constants, device) for the life of the process; CuPy's own on-disk
kernel cache makes a later process skip the compilation too.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

COMPILE_OPTIONS = ("-std=c++17",)


@functools.cache
def read_source(filename: str) -> str:
    """The text of a ``.cu`` file shipped in the ``quantem.cuda`` package."""
    return resources.files("quantem.cuda").joinpath(filename).read_text(encoding="utf-8")


def render_defines(defines: dict[str, int | str]) -> str:
    """``#define`` lines for the constants, in a fixed order so the cache key is stable."""
    return "".join(f"#define {name} {value}\n" for name, value in sorted(defines.items()))


@functools.cache
def _compile(filename: str, define_items: tuple[tuple[str, int | str], ...], device_id: int) -> Any:
    import cupy

    code = render_defines(dict(define_items)) + read_source(filename)
    with cupy.cuda.Device(device_id):
        module = cupy.RawModule(code=code, options=COMPILE_OPTIONS)
        module.compile()
    return module


def load_module(filename: str, defines: dict[str, int | str]) -> Any:
    """Compiled ``cupy.RawModule`` of ``filename`` with ``defines``, for the current device."""
    import cupy

    device_id = cupy.cuda.Device().id
    return _compile(filename, tuple(sorted(defines.items())), device_id)
