"""A software prefetch for the numba CPU kernels: ``prefetch(array, index)``.

Why: a loop that narrows uint16 frames at vector speed but reads only what it needs now
keeps fewer cache lines in flight than a plain uint64 read of the same bytes, and streams
them from memory more slowly; asking for the lines a few kilobytes ahead closes most of
the gap.

``prefetch`` is a hint (LLVM's ``llvm.prefetch``: read, high locality, data cache); it
never faults, never changes a result, and compiles to nothing on targets without one.
The index must lie inside the array's data (callers clamp it); no bounds check is made.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

#: At least how many bytes of reads ahead the kernels ask for data.
PREFETCH_DISTANCE_BYTES = 8192

#: The cache line size the kernels step their prefetches by, in bytes.
CACHE_LINE_BYTES = 64

#: Pixels summed between two rounds of prefetches (a long span is cut into blocks).
PREFETCH_BLOCK_BYTES = 2048


@intrinsic
def prefetch(typingctx, array, index):  # pragma: no cover - compiled
    """Hint that ``array[index]`` (a 1D array) will be read soon."""
    if not (isinstance(array, types.Array) and array.ndim == 1):
        return None
    if not isinstance(index, types.Integer):
        return None
    sig = types.void(array, index)

    def codegen(context, builder, signature, args):
        array_type, _ = signature.args
        data = context.make_array(array_type)(context, builder, args[0])
        pointer = cgutils.get_item_pointer(
            context, builder, array_type, data, [args[1]], wraparound=False, boundscheck=False
        )
        i32 = ir.IntType(32)
        function_type = ir.FunctionType(ir.VoidType(), [pointer.type, i32, i32, i32])
        # Overloaded on the pointer type; llvmlite spells the suffix for this LLVM.
        function = builder.module.declare_intrinsic("llvm.prefetch", [pointer.type], function_type)
        # (address, rw = 0 read, locality = 3 keep in all levels, cache type = 1 data)
        builder.call(
            function, [pointer, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)]
        )
        return context.get_dummy_value()

    return sig, codegen


@nb.njit(nogil=True, cache=True, inline="always")
def prefetch_pixels(frames, g, start, stop, line):  # pragma: no cover - compiled
    """Prefetch pixels ``[start, stop)`` of frame ``g`` (row-major frame number) of
    ``frames`` ``(scan_r, scan_c, pixels)``, one request per ``line`` pixels; nothing when
    ``g`` is past the last frame."""
    scan_c = frames.shape[1]
    if g < frames.shape[0] * scan_c:
        row = g // scan_c
        frame = frames[row, g - row * scan_c]
        for p in range(start, stop, line):
            prefetch(frame, p)


def frames_ahead(n_pixels_read: int, dtype: np.dtype) -> int:
    """How many frames ahead the kernels prefetch: the same pixels of the frame at least
    :data:`PREFETCH_DISTANCE_BYTES` of reads later (a mask reads the same pixels of every
    frame, so only pixels that will be read are requested)."""
    per_frame = max(1, int(n_pixels_read) * np.dtype(dtype).itemsize)
    return max(1, -(-PREFETCH_DISTANCE_BYTES // per_frame))


def prefetch_steps(dtype: np.dtype) -> tuple[int, int]:
    """``(line, block)`` in pixels of ``dtype``: the prefetch step and the block length."""
    size = np.dtype(dtype).itemsize
    return max(1, CACHE_LINE_BYTES // size), max(1, PREFETCH_BLOCK_BYTES // size)


__all__ = [
    "CACHE_LINE_BYTES",
    "PREFETCH_BLOCK_BYTES",
    "PREFETCH_DISTANCE_BYTES",
    "frames_ahead",
    "prefetch",
    "prefetch_pixels",
    "prefetch_steps",
]
