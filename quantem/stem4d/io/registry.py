"""Loaders by (backend, format): the table ``quantem.stem4d.io.load`` dispatches on.

An entry names its loader as ``"module:function"``, imported the first time a load of
that (backend, format) runs. That is the plugin mechanism: ``io`` depends on no loader
module, so the CUDA loaders (which import ``io``) and third-party loaders plug in the
same way and ``import quantem.stem4d.io`` pulls in neither h5py nor CuPy. A loader is
called as ``loader(path, load_options=LoadOptions(...), **other_options)``: ``io.load``
parses ``dtype``, ``apply_mask`` and ``det_bin`` once (``docs/architecture.md``,
"Adding a loader").

Third-party packages register without being imported first, through an entry point in
the group :data:`ENTRY_POINT_GROUP`, named ``"backend:format"``, valued
``"module:function"``; or at run time with :func:`register_loader`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, NamedTuple

ENTRY_POINT_GROUP = "quantem.stem4d.loaders"


class LoaderEntry(NamedTuple):
    """One registered loader: ``target`` (``"module:function"``) loads one GPU or the
    host; ``sharded`` (same form, optional) loads over several GPUs (``devices=``).
    (A NamedTuple, not a dataclass: ``dataclasses`` would double the import time of io.)"""

    backend: str
    format: str
    target: str
    sharded: str | None = None

    def resolve(self, *, sharded: bool = False) -> Callable[..., Any]:
        """Import and return the loader function (looked up on every call, so a test
        that replaces the module attribute is honoured)."""
        target = self.sharded if sharded else self.target
        if target is None:
            raise ValueError(f"backend {self.backend!r} has no sharded loader")
        return _resolve(target)


def _resolve(target: str) -> Callable[..., Any]:
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"a loader target is 'module:function', got {target!r}")
    return getattr(importlib.import_module(module_name), attribute)


_LOADERS: dict[tuple[str, str], LoaderEntry] = {}
_entry_points_read = False


def register_loader(
    backend: str, fmt: str, target: str, *, sharded: str | None = None, replace: bool = False
) -> LoaderEntry:
    """Register the loader ``target`` (``"module:function"``) for ``(backend, fmt)``.

    ``replace=False`` refuses to shadow an existing entry, so two plugins cannot
    silently fight over one key.
    """
    for name, value in (("target", target), ("sharded", sharded)):
        if value is not None and (not isinstance(value, str) or value.count(":") != 1):
            raise ValueError(f"loader {name} must be 'module:function', got {value!r}")
    key = (backend, fmt)
    if key in _LOADERS and not replace and _LOADERS[key].target != target:
        raise ValueError(
            f"a loader for backend {backend!r}, format {fmt!r} is already registered "
            f"({_LOADERS[key].target}); pass replace=True to override it"
        )
    entry = LoaderEntry(backend, fmt, target, sharded)
    _LOADERS[key] = entry
    return entry


def unregister_loader(backend: str, fmt: str) -> None:
    """Remove the entry for ``(backend, fmt)`` (for tests and plugins that unload)."""
    _LOADERS.pop((backend, fmt), None)


def entry_points(group: str) -> Any:
    """The installed entry points of ``group`` (importlib.metadata is imported here: it
    costs more than the rest of ``import quantem.stem4d.io``, and only a miss needs it)."""
    import importlib.metadata

    return importlib.metadata.entry_points(group=group)


def _read_entry_points() -> None:
    global _entry_points_read
    _entry_points_read = True
    for point in entry_points(group=ENTRY_POINT_GROUP):
        backend, sep, fmt = point.name.partition(":")
        if not sep:
            raise ValueError(
                f"entry point {point.name!r} in {ENTRY_POINT_GROUP} must be named 'backend:format'"
            )
        if (backend, fmt) not in _LOADERS:  # built-in and run-time entries win
            register_loader(backend, fmt, point.value)


def find_loader(backend: str, fmt: str) -> LoaderEntry:
    """The entry for ``(backend, fmt)``; reads the installed entry points on the first
    miss. Raises ``ValueError`` naming what is registered when there is none."""
    entry = _LOADERS.get((backend, fmt))
    if entry is None and not _entry_points_read:
        _read_entry_points()
        entry = _LOADERS.get((backend, fmt))
    if entry is None:
        known = ", ".join(f"{b}/{f}" for b, f in sorted(_LOADERS))
        raise ValueError(
            f"no loader for format {fmt!r} on backend {backend!r}; registered: {known}"
        )
    return entry


def registered_loaders() -> list[LoaderEntry]:
    """Every entry, sorted by (backend, format)."""
    return [_LOADERS[key] for key in sorted(_LOADERS)]


register_loader("cpu", "hdf5", "quantem.stem4d.io.arina:load_arina")
register_loader("cpu", "qem", "quantem.stem4d.io.qem.reader:load_qem")
register_loader(
    "cuda",
    "hdf5",
    "quantem.stem4d.cuda.loaders:load_hdf5",
    sharded="quantem.stem4d.cuda.sharded:load",
)
register_loader(
    "cuda",
    "qem",
    "quantem.stem4d.cuda.loaders:load_qem",
    sharded="quantem.stem4d.cuda.sharded:load",
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "LoaderEntry",
    "find_loader",
    "register_loader",
    "registered_loaders",
    "unregister_loader",
]
