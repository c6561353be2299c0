"""Loading and saving 4D-STEM acquisitions.

``load`` finds the format of the path (:mod:`.formats`) and calls the loader registered
for (backend, format) in :mod:`.registry` (``cpu`` reference, ``cuda`` CuPy kernels, or a
third-party loader). It never falls back silently to another backend: asking for
``cuda`` where it cannot run raises ``BackendUnavailableError``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.backends import require_backend
from quantem.stem4d.interop import check_output, require_torch
from quantem.stem4d.io.formats import QEM_SUFFIX, detect_format, is_qem
from quantem.stem4d.io.registry import find_loader

#: ``dtype`` a ``.qem`` reader resolves per file (the acquisition's source dtype).
PER_FILE_DTYPES = ("source",)


def load(
    path: str | os.PathLike, backend: str = "cpu", *, output: str = "array", **options: Any
) -> Acquisition:
    """Load a 4D-STEM acquisition.

    Parameters
    ----------
    path
        An ARINA ``*_master.h5`` file or a ``.qem`` file.
    backend
        ``"cpu"`` (numpy result) or ``"cuda"`` (CuPy result on ``device``).
    **options
        ``dtype`` (``"native"``, ``"u8"``, ``"u16"``, ``"u32"``), ``apply_mask``,
        ``det_bin`` (parsed here into one :class:`LoadOptions` handed to the loader as
        ``load_options``; or pass ``load_options`` yourself), ``scan_shape``; HDF5 only: ``fresh_index``, ``index_dir``;
        ``.qem`` only: ``verify``, ``scan_region``, ``representation``; cuda only:
        ``device``, or ``devices`` (``"all"`` or a list of GPU ids): the scan rows split
        in contiguous blocks over those GPUs, ``data`` a
        :class:`~quantem.stem4d.cuda.sharded.ShardedData` (see ``docs/cuda-backend.md``).
        See each reader's documentation.
    output
        ``"array"`` (default: numpy or CuPy ``data``) or ``"torch"``: ``data`` is a
        ``torch.Tensor`` sharing the array's memory (DLPack, no copy; on the GPU for
        cuda) and detector sessions over the acquisition return tensors. Checked, with
        PyTorch's presence, before anything is read.
    """
    options = parse_options(options)
    require_backend(backend)
    check_output(output)
    if output == "torch":
        if options.get("devices") is not None:
            raise ValueError("output='torch' takes one GPU (device=), not devices=")
        require_torch()
    acq = _load(path, backend, options)
    try:
        return acq.set_output(output)
    except BaseException:
        acq.close()
        raise


def parse_options(options: dict[str, Any]) -> dict[str, Any]:
    """Parse the load options once, before any backend or file is touched, and hand the
    loader one :class:`LoadOptions` as ``load_options`` (bad values raise ``ValueError``
    or ``UnsupportedDtypeError`` naming the parameter). ``dtype="source"`` depends on
    the ``.qem`` file, so those keywords go to its reader as given, validated."""
    # transforms needs numpy: imported by the first load, not by ``import quantem.stem4d.io``
    from quantem.stem4d.io.transforms import LOAD_OPTION_NAMES, LoadOptions, parse_loader_options

    rest = {k: v for k, v in options.items() if k not in (*LOAD_OPTION_NAMES, "load_options")}
    given = {name: options[name] for name in LOAD_OPTION_NAMES if name in options}
    if given.get("dtype") in PER_FILE_DTYPES:
        if options.get("load_options") is not None:
            raise ValueError("give load_options or dtype/apply_mask/det_bin, not both")
        LoadOptions.from_keywords({**given, "dtype": "native"})
        return {**rest, **given}
    parsed = parse_loader_options(
        options.get("load_options"), **LoadOptions.parse(**given).as_dict()
    )
    return {**rest, "load_options": parsed}


def _load(path: str | os.PathLike, backend: str, options: dict) -> Acquisition:
    entry = find_loader(backend, detect_format(path))
    devices = options.pop("devices", None)
    if devices is not None:
        if entry.sharded is None:
            raise ValueError(f"devices= shards a load over GPUs; backend {backend!r} takes none")
        return entry.resolve(sharded=True)(path, devices=devices, **options)
    return entry.resolve()(path, **options)


def save(source: Any, path: str | os.PathLike, **options: Any) -> Path:
    """Write an acquisition (an ``Acquisition`` or a path to a loadable source) as ``.qem``.

    Options: ``verify`` (decode afterwards and compare exactly), ``source_hashes``
    (record the SHA-256 of every source file), encoder parameters.
    """
    from quantem.stem4d.io.qem.writer import save_qem

    return save_qem(source, path, **options)


__all__ = ["QEM_SUFFIX", "is_qem", "load", "save"]
