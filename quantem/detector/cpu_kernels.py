"""CPU detector kernels (numba): per-frame masked sums, the sum over frames, first moments.

This module is the CPU half of the backend kernel interface of ``docs/detector.md``
(the CUDA half is ``quantem.cuda.detector_kernels``). Every function takes the dense 4D
array ``(scan_r, scan_c, det_r, det_c)`` and, where it applies, a boolean detector mask
that the caller has already intersected with the acquisition's validity.

Exactness rules
---------------
* Unsigned integer data (uint8, uint16, uint32, including ``det_bin``'d uint32) is
  accumulated in uint64, so every result is the exact integer sum.
* Float data (float32, float64) is accumulated in float64 in a fixed order that does not
  depend on the number of threads, so results are bit-for-bit reproducible (but rounded).

The kernels parallelise over scan positions (masked sums, moments) or over a fixed number
of frame chunks (the frame sum) and release the GIL.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from quantem.errors import UnsupportedDtypeError

#: Element types the CPU kernels accept.
SUPPORTED_DTYPES = tuple(
    np.dtype(name) for name in ("uint8", "uint16", "uint32", "float32", "float64")
)

#: The frame sum splits the frames into at most this many chunks, one partial sum each.
#: The number is fixed (not the thread count) so float results never depend on threads.
SUM_FRAMES_MAX_CHUNKS = 64

#: Upper bound on the memory the frame sum's partial sums may take.
SUM_FRAMES_PARTIAL_BYTES = 256 * 1024 * 1024


def accumulator_dtype(dtype: np.dtype | str) -> np.dtype:
    """The dtype products of ``dtype`` data are accumulated in: uint64 or float64.

    Raises
    ------
    UnsupportedDtypeError
        For signed integers, booleans, float16, complex, non-native byte order, or any
        other type the kernels do not support.
    """
    dtype = np.dtype(dtype)
    if not dtype.isnative:
        raise UnsupportedDtypeError(
            f"detector products need native byte order data, got {dtype.str}; "
            "convert with data.astype(data.dtype.newbyteorder('='))"
        )
    if dtype not in SUPPORTED_DTYPES:
        names = ", ".join(str(d) for d in SUPPORTED_DTYPES)
        raise UnsupportedDtypeError(f"detector products support {names} data, got {dtype}")
    return np.dtype(np.uint64) if dtype.kind == "u" else np.dtype(np.float64)


def mask_runs(mask: np.ndarray) -> np.ndarray:
    """Encode a boolean 2D mask as runs ``(row, start_col, stop_col)`` (int64, shape (n, 3)).

    Disk and annulus masks are one or two runs per detector row, so summing contiguous
    runs lets the inner loop stream (and vectorise) instead of gathering pixel by pixel.
    """
    mask = np.asarray(mask, dtype=bool)
    padded = np.zeros((mask.shape[0], mask.shape[1] + 2), dtype=np.int8)
    padded[:, 1:-1] = mask
    edges = np.diff(padded, axis=1)
    start_rows, start_cols = np.nonzero(edges == 1)
    _, stop_cols = np.nonzero(edges == -1)
    # np.nonzero walks row-major, so starts and stops pair up in order.
    return np.ascontiguousarray(
        np.stack([start_rows, start_cols, stop_cols], axis=1).astype(np.int64)
    ).reshape(-1, 3)


def _check_data(data4d: np.ndarray) -> np.dtype:
    if not isinstance(data4d, np.ndarray):
        raise TypeError(f"cpu detector kernels need a numpy array, got {type(data4d).__name__}")
    if data4d.ndim != 4:
        raise ValueError(
            f"detector kernels need 4D data (scan_r, scan_c, det_r, det_c), got shape {data4d.shape}"
        )
    return accumulator_dtype(data4d.dtype)


def _check_mask(data4d: np.ndarray, mask2d: np.ndarray) -> np.ndarray:
    mask2d = np.asarray(mask2d)
    if mask2d.dtype != np.bool_:
        raise TypeError(f"kernel masks must be boolean, got {mask2d.dtype}")
    if mask2d.shape != data4d.shape[2:]:
        raise ValueError(
            f"mask shape {mask2d.shape} does not match the detector shape {data4d.shape[2:]}"
        )
    return mask2d


@nb.njit(parallel=True, nogil=True, cache=True)
def _masked_sum_runs(data, runs, zero, out):  # pragma: no cover - compiled
    scan_c = data.shape[1]
    n_frames = data.shape[0] * scan_c
    n_runs = runs.shape[0]
    for f in nb.prange(n_frames):
        i = f // scan_c
        j = f - i * scan_c
        frame = data[i, j]
        acc = zero
        for k in range(n_runs):
            r = runs[k, 0]
            for c in range(runs[k, 1], runs[k, 2]):
                acc += frame[r, c]
        out[i, j] = acc


@nb.njit(parallel=True, nogil=True, cache=True)
def _moments_runs(
    data, runs, row_weight, col_weight, zero, total, sum_r, sum_c
):  # pragma: no cover
    scan_c = data.shape[1]
    n_frames = data.shape[0] * scan_c
    n_runs = runs.shape[0]
    for f in nb.prange(n_frames):
        i = f // scan_c
        j = f - i * scan_c
        frame = data[i, j]
        acc_t = zero
        acc_r = zero
        acc_c = zero
        for k in range(n_runs):
            r = runs[k, 0]
            row_acc = zero
            for c in range(runs[k, 1], runs[k, 2]):
                value = frame[r, c]
                row_acc += value
                acc_c += value * col_weight[c]
            acc_t += row_acc
            acc_r += row_acc * row_weight[r]
        total[i, j] = acc_t
        sum_r[i, j] = acc_r
        sum_c[i, j] = acc_c


@nb.njit(parallel=True, nogil=True, cache=True)
def _sum_frame_chunks(data, partial):  # pragma: no cover - compiled
    scan_c = data.shape[1]
    n_frames = data.shape[0] * scan_c
    n_chunks = partial.shape[0]
    det_r = data.shape[2]
    det_c = data.shape[3]
    for k in nb.prange(n_chunks):
        start = k * n_frames // n_chunks
        stop = (k + 1) * n_frames // n_chunks
        acc = partial[k]
        for f in range(start, stop):
            i = f // scan_c
            j = f - i * scan_c
            frame = data[i, j]
            for r in range(det_r):
                for c in range(det_c):
                    acc[r, c] += frame[r, c]


@nb.njit(parallel=True, nogil=True, cache=True)
def _reduce_chunks(partial, out):  # pragma: no cover - compiled
    # Parallel over detector rows, sequential (fixed order) over chunks.
    for r in nb.prange(partial.shape[1]):
        for k in range(partial.shape[0]):
            for c in range(partial.shape[2]):
                out[r, c] += partial[k, r, c]


def masked_sum(data4d: np.ndarray, mask2d_bool: np.ndarray) -> np.ndarray:
    """Sum of each frame over the pixels where ``mask2d_bool`` is True.

    Returns
    -------
    numpy.ndarray
        ``(scan_r, scan_c)``, uint64 for integer data (exact), float64 for float data.
    """
    acc = _check_data(data4d)
    mask = _check_mask(data4d, mask2d_bool)
    out = np.empty(data4d.shape[:2], dtype=acc)
    _masked_sum_runs(data4d, mask_runs(mask), acc.type(0), out)
    return out


def moments(
    data4d: np.ndarray, mask2d_bool: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Zeroth and first moments of each frame over the masked pixels.

    Returns ``(total, sum_r, sum_c)``, each ``(scan_r, scan_c)``: ``total`` is the masked
    sum, ``sum_r = sum(row * value)`` and ``sum_c = sum(col * value)`` with row and column
    indices counted from pixel (0, 0). uint64 for integer data (exact), float64 for floats.
    """
    acc = _check_data(data4d)
    mask = _check_mask(data4d, mask2d_bool)
    det_r, det_c = data4d.shape[2:]
    total = np.empty(data4d.shape[:2], dtype=acc)
    sum_r = np.empty_like(total)
    sum_c = np.empty_like(total)
    _moments_runs(
        data4d,
        mask_runs(mask),
        np.arange(det_r, dtype=acc),
        np.arange(det_c, dtype=acc),
        acc.type(0),
        total,
        sum_r,
        sum_c,
    )
    return total, sum_r, sum_c


def sum_frames(data4d: np.ndarray) -> np.ndarray:
    """Sum over all frames, per detector pixel (``(det_r, det_c)``, uint64 or float64)."""
    acc = _check_data(data4d)
    det_r, det_c = data4d.shape[2:]
    n_frames = data4d.shape[0] * data4d.shape[1]
    out = np.zeros((det_r, det_c), dtype=acc)
    if n_frames == 0 or det_r * det_c == 0:
        return out
    per_chunk = det_r * det_c * acc.itemsize
    n_chunks = max(1, min(SUM_FRAMES_MAX_CHUNKS, n_frames, SUM_FRAMES_PARTIAL_BYTES // per_chunk))
    partial = np.zeros((n_chunks, det_r, det_c), dtype=acc)
    _sum_frame_chunks(data4d, partial)
    _reduce_chunks(partial, out)
    return out


def frame(data4d: np.ndarray, i: int) -> np.ndarray:
    """Frame ``i`` (row-major scan index) as a view, raw values in the data's dtype."""
    if data4d.ndim != 4:
        raise ValueError(f"detector kernels need 4D data, got shape {data4d.shape}")
    scan_r, scan_c = data4d.shape[:2]
    n_frames = scan_r * scan_c
    if not 0 <= i < n_frames:
        raise IndexError(f"frame index {i} is out of range for {n_frames} frames")
    return data4d[i // scan_c, i % scan_c]


__all__ = [
    "SUPPORTED_DTYPES",
    "accumulator_dtype",
    "frame",
    "mask_runs",
    "masked_sum",
    "moments",
    "sum_frames",
]
