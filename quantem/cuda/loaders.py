"""``backend="cuda"`` loaders: ARINA HDF5 and ``.qem`` straight into GPU memory.

Both return an :class:`~quantem.acquisition.Acquisition` with ``backend="cuda"`` whose
``data`` is a CuPy array on ``device`` (or, for ``.qem`` with ``representation="encoded"``,
no dense array but a resident :class:`~quantem.cuda.encoded.EncodedPayload`). The load
options (``dtype``, ``apply_mask``, ``det_bin``) go through the one implementation of
their semantics, :func:`quantem.io.transforms.finish_frames`, run with ``xp=cupy`` per
batch of decoded frames, so results equal the cpu backend's bit for bit.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from quantem.acquisition import Acquisition
from quantem.backends import require_backend
from quantem.cuda.hdf5_pipeline import DEFAULT_BATCH_BYTES, decode_source_to_device

IDENTITY_OPTIONS = {"dtype": "native", "apply_mask": False, "det_bin": 1}


def is_identity(dtype: str, apply_mask: bool, det_bin: int) -> bool:
    """True when the load options leave the decoded frames unchanged."""
    return dtype == "native" and not apply_mask and int(det_bin) == 1


class FrameFinisher:
    """Applies ``finish_frames`` batch by batch into one preallocated device array.

    ``finish_frames`` acts on each frame independently (mask, narrowing, binning), so
    finishing per batch equals finishing the whole stack; integer fields of its ``info``
    (such as ``clipped_pixels``) are summed over the batches.
    """

    def __init__(self, n_frames: int, sample: Any, validity: Any, options: dict[str, Any]) -> None:
        import cupy

        from quantem.io.transforms import finish_frames

        self._finish = finish_frames
        self.validity = validity
        self.options = options
        probe, _ = finish_frames(sample, validity, xp=cupy, **options)
        self.out = cupy.empty((n_frames, *probe.shape[1:]), dtype=probe.dtype)
        self.info: dict[str, Any] = {}

    def __call__(self, start: int, stop: int, frames: Any) -> None:
        import cupy

        result, info = self._finish(frames, self.validity, xp=cupy, **self.options)
        self.out[start:stop] = result
        for key, value in info.items():
            if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
                self.info[key] = int(self.info.get(key, 0)) + int(value)
            else:
                self.info.setdefault(key, value)


def build_metadata(base: dict, data_shape: tuple[int, ...], dtype: Any, info: dict) -> dict:
    """The acquisition metadata after the load options: shapes and dtype as loaded."""
    metadata = dict(base)
    metadata["detector_shape"] = [int(v) for v in data_shape[-2:]]
    metadata["dtype"] = str(np.dtype(dtype))
    metadata.update(info)
    return metadata


def load_hdf5(
    path: str | os.PathLike,
    *,
    device: int = 0,
    dtype: str = "native",
    apply_mask: bool = False,
    det_bin: int = 1,
    scan_shape: tuple[int, int] | None = None,
    fresh_index: bool = False,
    index_dir: str | os.PathLike | None = None,
    threads: int | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
) -> Acquisition:
    """Load an ARINA acquisition onto GPU ``device``.

    The compressed chunks (located by the frame index) are read in parallel into reused
    pinned buffers, copied asynchronously to the device and decoded there (bitshuffle-LZ4,
    every chunk validated); options as :func:`quantem.io.arina.load_arina`.

    Raises
    ------
    ChunkDecodeError
        A chunk is corrupt; the error names the shard file and the frame.
    BackendUnavailableError
        CuPy or a CUDA device is missing.
    """
    require_backend("cuda")
    import cupy

    from quantem.io.arina import open_arina
    from quantem.io.transforms import parse_load_options

    parse_load_options(dtype, apply_mask, det_bin)
    source = open_arina(path, scan_shape=scan_shape, index_dir=index_dir, fresh_index=fresh_index)
    options = {"dtype": dtype, "apply_mask": apply_mask, "det_bin": det_bin}
    scan = tuple(int(v) for v in source.scan_shape)
    with cupy.cuda.Device(device):
        if is_identity(**options):
            frames, stats = decode_source_to_device(
                source, threads=threads, batch_bytes=batch_bytes
            )
            info: dict[str, Any] = {}
        else:
            validity = cupy.asarray(source.validity)
            det = tuple(int(v) for v in source.detector_shape)
            sample = cupy.zeros((1, *det), dtype=np.dtype(source.dtype))
            finisher = FrameFinisher(int(source.n_frames), sample, validity, options)
            _, stats = decode_source_to_device(
                source, consume=finisher, threads=threads, batch_bytes=batch_bytes
            )
            frames, info = finisher.out, finisher.info
        data = frames.reshape(*scan, *frames.shape[1:])
    metadata = build_metadata(source.metadata, data.shape, data.dtype, info)
    metadata["load_stats"] = {
        "compressed_bytes": stats.compressed_bytes,
        "batches": stats.batches,
        "read_seconds": stats.read_seconds,
        "pipeline_seconds": stats.wall_seconds,
    }
    validity = _finished_validity(source.validity, options)
    return Acquisition(data, metadata, validity, backend="cuda")


def _finished_validity(validity: np.ndarray, options: dict[str, Any]) -> np.ndarray:
    """The validity mask matching the loaded detector shape (as the cpu loader defines it)."""
    from quantem.io import transforms

    finish_validity = getattr(transforms, "finish_validity", None)
    if finish_validity is not None:
        return finish_validity(validity, det_bin=options["det_bin"])
    return validity
