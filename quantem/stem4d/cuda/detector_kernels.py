"""Exact detector reductions on CuPy arrays (the ``cuda`` twin of ``quantem.stem4d.detector.cpu_kernels``).

Contract B: ``masked_sum``, ``sum_frames``, ``moments`` and ``frame`` take a contiguous
``(*scan, det_r, det_c)`` CuPy array of unsigned integers and return CuPy results that stay
on the device. Sums accumulate in ``uint64``, so they are exact and equal, bit for bit, to
any exact CPU reference. Masks are taken as given (the detector session intersects them with
the acquisition's validity first).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from quantem.stem4d.errors import UnsupportedDtypeError

SOURCE_FILE = "detector_kernels.cu"
ELEMENT_TYPES = {
    np.dtype(np.uint8): "unsigned char",
    np.dtype(np.uint16): "unsigned short",
    np.dtype(np.uint32): "unsigned int",
}
WARPS_PER_CTA = 8
SUM_THREADS = 256
FRAMES_PER_GROUP = 512
VECTOR_BYTES = 16


def module_defines(dtype: np.dtype, det_shape: tuple[int, int]) -> dict[str, int | str]:
    """The compile-time constants of ``detector_kernels.cu`` (also what the ahead-of-time
    build of :mod:`quantem.stem4d.cuda.aot` specialises)."""
    dtype = np.dtype(dtype)
    if dtype not in ELEMENT_TYPES:
        raise UnsupportedDtypeError(
            f"GPU detector products support uint8, uint16 and uint32 data, not {dtype}"
        )
    return {
        "ELEM_T": ELEMENT_TYPES[dtype],
        "FRAME_ELEMS": int(det_shape[0]) * int(det_shape[1]),
        "DET_C": int(det_shape[1]),
        "WARPS_PER_CTA": WARPS_PER_CTA,
    }


def _module(dtype: np.dtype, det_shape: tuple[int, int]) -> Any:
    from quantem.stem4d.cuda.module_loader import load_module

    defines = module_defines(dtype, det_shape)
    return load_module(SOURCE_FILE, defines)


def _frames(data4d: Any) -> tuple[Any, tuple[int, ...], tuple[int, int]]:
    import cupy

    if data4d.ndim < 3:
        raise ValueError(f"expected (*scan, det_r, det_c) data, got shape {data4d.shape}")
    scan = tuple(data4d.shape[:-2])
    det = (int(data4d.shape[-2]), int(data4d.shape[-1]))
    flat = cupy.ascontiguousarray(data4d).reshape(-1, det[0] * det[1])
    return flat, scan, det


def _host_mask(mask2d: Any, det: tuple[int, int]) -> np.ndarray:
    mask = mask2d.get() if hasattr(mask2d, "get") else np.asarray(mask2d)
    if mask.shape != det:
        raise ValueError(f"mask shape {mask.shape} does not match the detector shape {det}")
    if mask.dtype != np.bool_:
        raise TypeError(f"mask must be boolean, got {mask.dtype}")
    return mask


def _rows_are_vectors(flat: Any, det: tuple[int, int]) -> bool:
    """Every detector row is whole 16-byte vectors and the data is 16-byte aligned."""
    row_bytes = det[1] * flat.dtype.itemsize
    return row_bytes % VECTOR_BYTES == 0 and flat.data.ptr % VECTOR_BYTES == 0


def mask_vectors(mask: np.ndarray, itemsize: int) -> tuple[np.ndarray, np.ndarray]:
    """The 16-byte vectors of a frame that a mask touches: (vector index, element bits)."""
    per_vec = VECTOR_BYTES // itemsize
    flat = np.asarray(mask, dtype=bool).reshape(-1, per_vec)
    touched = np.flatnonzero(flat.any(axis=1))
    weights = (np.uint32(1) << np.arange(per_vec, dtype=np.uint32)).astype(np.uint32)
    bits = (flat[touched].astype(np.uint32) * weights).sum(axis=1, dtype=np.uint32)
    return touched.astype(np.uint32), bits.astype(np.uint32)


def masked_sum(data4d: Any, mask2d_bool: Any) -> Any:
    """Sum of each frame over the mask's pixels: ``uint64`` array of the scan shape."""
    import cupy

    flat, scan, det = _frames(data4d)
    mask = _host_mask(mask2d_bool, det)
    n = flat.shape[0]
    out = cupy.zeros(n, dtype=cupy.uint64)
    itemsize = flat.dtype.itemsize
    vector = (det[0] * det[1] * itemsize) % VECTOR_BYTES == 0 and flat.data.ptr % VECTOR_BYTES == 0
    if not n or not mask.any():
        return out.reshape(scan)
    if vector:
        index, bits = mask_vectors(mask, itemsize)
        kernel = _module(flat.dtype, det).get_function("masked_sum_vec")
        grid = (n + WARPS_PER_CTA - 1) // WARPS_PER_CTA
        args = (
            flat,
            np.int64(n),
            cupy.asarray(index),
            cupy.asarray(bits),
            np.int32(index.size),
            out,
        )
        kernel((grid,), (32 * WARPS_PER_CTA,), args)
    else:
        pixels = cupy.asarray(np.flatnonzero(mask).astype(np.int32))
        kernel = _module(flat.dtype, det).get_function("masked_sum")
        grid = (n + WARPS_PER_CTA - 1) // WARPS_PER_CTA
        kernel(
            (grid,), (32 * WARPS_PER_CTA,), (flat, np.int64(n), pixels, np.int32(pixels.size), out)
        )
    return out.reshape(scan)


def moments(data4d: Any, mask2d_bool: Any) -> tuple[Any, Any, Any]:
    """Per frame, over the mask: total, sum of value*row and of value*column (all ``uint64``)."""
    import cupy

    flat, scan, det = _frames(data4d)
    mask = _host_mask(mask2d_bool, det)
    n = flat.shape[0]
    outs = [cupy.zeros(n, dtype=cupy.uint64) for _ in range(3)]
    grid = (n + WARPS_PER_CTA - 1) // WARPS_PER_CTA
    if not n or not mask.any():
        pass
    elif _rows_are_vectors(flat, det):
        index, bits = mask_vectors(mask, flat.dtype.itemsize)
        kernel = _module(flat.dtype, det).get_function("moments_vec")
        args = (flat, np.int64(n), cupy.asarray(index), cupy.asarray(bits), np.int32(index.size))
        kernel((grid,), (32 * WARPS_PER_CTA,), (*args, *outs))
    else:
        pixels = cupy.asarray(np.flatnonzero(mask).astype(np.int32))
        kernel = _module(flat.dtype, det).get_function("moments")
        args = (flat, np.int64(n), pixels, np.int32(pixels.size))
        kernel((grid,), (32 * WARPS_PER_CTA,), (*args, *outs))
    total, rows, cols = (o.reshape(scan) for o in outs)
    return total, rows, cols


def sum_frames(data4d: Any) -> Any:
    """Sum over every frame, per pixel: ``uint64`` array of the detector shape."""
    import cupy

    flat, _scan, det = _frames(data4d)
    n = flat.shape[0]
    out = cupy.zeros(det[0] * det[1], dtype=cupy.uint64)
    if n:
        kernel = _module(flat.dtype, det).get_function("sum_frames")
        groups = (n + FRAMES_PER_GROUP - 1) // FRAMES_PER_GROUP
        grid = ((det[0] * det[1] + SUM_THREADS - 1) // SUM_THREADS, groups)
        kernel(grid, (SUM_THREADS,), (flat, np.int64(n), np.int64(FRAMES_PER_GROUP), out))
    return out.reshape(det)


def zero_invalid_pixels(frames: Any, validity: Any) -> None:
    """Zero, in place, the pixels of every frame where ``validity`` (boolean
    ``(det_r, det_c)``, host or device) is False.

    ``frames`` is a C-contiguous ``(..., det_r, det_c)`` CuPy array of unsigned integers.
    One kernel of this module (ahead-of-time built for the common detectors), so a load's
    mask runs no CuPy built-in kernel (those compile at a fresh machine's first use).
    """
    import cupy

    if frames.ndim < 2:
        raise ValueError(f"expected (..., det_r, det_c) frames, got shape {frames.shape}")
    if not frames.flags.c_contiguous:
        raise ValueError("zero_invalid_pixels needs C-contiguous frames (it works in place)")
    det = (int(frames.shape[-2]), int(frames.shape[-1]))
    defines = module_defines(frames.dtype, det)  # refuses an unsupported dtype at once
    valid = validity.get() if hasattr(validity, "get") else np.asarray(validity)
    valid = np.asarray(valid, dtype=bool)  # as LoadOptions.finish takes it
    if valid.shape != det:
        raise ValueError(f"validity shape {valid.shape} does not match the detector shape {det}")
    invalid = np.flatnonzero(~valid).astype(np.int32)
    n = int(frames.size) // (det[0] * det[1]) if det[0] * det[1] else 0
    if not n or not invalid.size:
        return
    from quantem.stem4d.cuda.module_loader import load_module

    kernel = load_module(SOURCE_FILE, defines).get_function("zero_pixels")
    grid = (n + WARPS_PER_CTA - 1) // WARPS_PER_CTA
    args = (frames, np.int64(n), cupy.asarray(invalid), np.int32(invalid.size))
    kernel((grid,), (32 * WARPS_PER_CTA,), args)


def frame(data4d: Any, i: int) -> Any:
    """Frame ``i`` (flat scan index) as a ``(det_r, det_c)`` device view."""
    flat_shape = (-1, data4d.shape[-2], data4d.shape[-1])
    frames = data4d.reshape(flat_shape)
    n = frames.shape[0]
    index = int(i)
    if not -n <= index < n:
        raise IndexError(f"frame {i} is out of range for {n} frames")
    return frames[index]
