"""Loading and saving 4D-STEM acquisitions.

``load`` routes on the file type (ARINA HDF5 master or ``.qem``) and the backend
(``cpu`` reference, ``cuda`` CuPy kernels). It never falls back silently to another
backend: asking for ``cuda`` where it cannot run raises ``BackendUnavailableError``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.backends import require_backend
from quantem.stem4d.errors import SourceIsDirectoryError

QEM_SUFFIX = ".qem"


def is_qem(path: str | os.PathLike) -> bool:
    return Path(path).suffix.lower() == QEM_SUFFIX


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
        ``det_bin``, ``scan_shape``; HDF5 only: ``fresh_index``, ``index_dir``;
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
    from quantem.stem4d.interop import check_output, require_torch

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


def _load(path: str | os.PathLike, backend: str, options: dict) -> Acquisition:
    if Path(path).is_dir():
        raise SourceIsDirectoryError(
            Path(path).absolute(), "is a directory; expected an ARINA *_master.h5 or a .qem file"
        )
    if options.get("devices") is not None:
        if backend != "cuda":
            raise ValueError(f"devices= shards a load over GPUs; backend {backend!r} takes none")
        from quantem.stem4d.cuda import sharded

        return sharded.load(path, **options)
    options.pop("devices", None)
    if backend == "cuda":
        from quantem.stem4d.cuda import loaders as cuda_loaders

        if is_qem(path):
            return cuda_loaders.load_qem(path, **options)
        return cuda_loaders.load_hdf5(path, **options)
    if is_qem(path):
        from quantem.stem4d.io.qem.reader import load_qem

        return load_qem(path, **options)
    from quantem.stem4d.io.arina import load_arina

    return load_arina(path, **options)


def save(source: Any, path: str | os.PathLike, **options: Any) -> Path:
    """Write an acquisition (an ``Acquisition`` or a path to a loadable source) as ``.qem``.

    Options: ``verify`` (decode afterwards and compare exactly), ``source_hashes``
    (record the SHA-256 of every source file), encoder parameters.
    """
    from quantem.stem4d.io.qem.writer import save_qem

    return save_qem(source, path, **options)


__all__ = ["is_qem", "load", "save"]
