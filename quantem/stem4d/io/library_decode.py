"""The bitshuffle library's chunk decoder, called per frame without numba (engine ``"library"``).

A one-shot script pays numba's import and CPU-target start (most of a small load's
time) before :mod:`quantem.stem4d.io.cpu_decode` decodes its first frame. This engine
needs only numpy and ctypes: numpy checks every chunk's header, block table and tail
(:func:`check_chunks`, the same checks and error codes as the numba walk's, done for all
frames of a piece at once), then bitshuffle's ``bshuf_decompress_lz4`` (hdf5plugin's
build: the code h5py runs) decodes each checked chunk, one ctypes call a frame, the GIL
released. After the check every block lies inside its chunk, so the C decoder never
reads outside it; within a block ``LZ4_decompress_safe`` checks every literal run and
match against the block and the output (it rejects what the numba walk rejects, offset
0 included) and a block that decodes to the wrong size fails. A failed frame is decoded
again by the numba reference on the error path only, to name the exact check.

Chunk layout: see :mod:`quantem.stem4d.io.cpu_decode`.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np

from quantem.stem4d.io.chunk_errors import (
    DECODE_OK,
    ERR_BLOCK_HEADER_TRUNCATED,
    ERR_BLOCK_LENGTH,
    ERR_BLOCK_SIZE,
    ERR_CHUNK_TOO_SHORT,
    ERR_LZ4_MALFORMED,
    ERR_TAIL_TRUNCATED,
    ERR_TRAILING_BYTES,
    ERR_UNCOMPRESSED_SIZE,
)

#: Frames per task a decode thread takes with this engine: the numpy checks cost about
#: the same per piece whatever its size, so pieces are larger than the numba engines'.
FRAMES_PER_TASK = 512

ENGINES = ("library", "bitshuffle", "numba")

_INT32_MAX = 2**31 - 1


def default_threads() -> int:
    """Cores to decode on: ``NUMBA_NUM_THREADS`` when set, else the CPUs this process may
    run on (numba's own default), read without importing numba."""
    configured = os.environ.get("NUMBA_NUM_THREADS", "").strip()
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def bitshuffle_library_candidates() -> list[str]:
    """Shared libraries with bitshuffle's C decoder, in order of preference."""
    candidates = []
    try:
        import hdf5plugin

        suffix = hdf5plugin.get_config().build_config.filter_file_extension
        name = ("h5bshuf" if suffix == ".dll" else "libh5bshuf") + suffix
        candidates.append(os.path.join(hdf5plugin.PLUGIN_PATH, name))
    except (ImportError, AttributeError):
        pass
    try:
        import bitshuffle.ext

        candidates.append(bitshuffle.ext.__file__)
    except ImportError:
        pass
    return candidates


def load_bitshuffle_function(path: str):
    """``bshuf_decompress_lz4`` from the library at ``path`` as a ctypes function, or None."""
    try:
        function = ctypes.CDLL(path).bshuf_decompress_lz4
    except (OSError, AttributeError):
        return None
    # (const void* in, void* out, size_t size, size_t elem_size, size_t block_size)
    # -> int64 bytes consumed; addresses travel as size_t.
    function.argtypes = [ctypes.c_size_t] * 5
    function.restype = ctypes.c_int64
    return function


def bitshuffle_block_functions() -> tuple[object, int, int] | None:
    """``(library, LZ4_decompress_safe address, bshuf_untrans_bit_elem address)`` or None.

    First choice: hdf5plugin's build of the bitshuffle filter (the code h5py runs, SIMD,
    no OpenMP; on the development machine it also beat the ``bitshuffle`` package's AVX2
    build, whose ``bshuf_decompress_lz4`` opens an OpenMP region per call). We call the
    two block-level functions from numba without the GIL
    (:mod:`~quantem.stem4d.io.cpu_decode`'s ``"bitshuffle"`` engine), after its walk has
    checked the chunk: no Python or ctypes work per frame.
    """
    for path in bitshuffle_library_candidates():
        try:
            library = ctypes.CDLL(path)
            lz4 = ctypes.cast(library.LZ4_decompress_safe, ctypes.c_void_p).value
            untrans = ctypes.cast(library.bshuf_untrans_bit_elem, ctypes.c_void_p).value
        except (OSError, AttributeError):
            continue
        if lz4 and untrans:
            return library, int(lz4), int(untrans)
    return None


_FUNCTION = None
_LOOKED = False


def library_function():
    """hdf5plugin's ``bshuf_decompress_lz4`` (first choice: it has no OpenMP region per
    call), loaded once; None where no candidate exports it."""
    global _FUNCTION, _LOOKED
    if not _LOOKED:
        for path in bitshuffle_library_candidates():
            _FUNCTION = load_bitshuffle_function(path)
            if _FUNCTION is not None:
                break
        _LOOKED = True
    return _FUNCTION


def resolve_engine(engine: str) -> str:
    """``"library"``, ``"bitshuffle"`` or ``"numba"`` for an engine name.

    ``"auto"`` is ``"library"`` (no numba on the load path) when the bitshuffle library
    is there, else ``"numba"``. ``"bitshuffle"`` needs the library's block functions
    (:func:`bitshuffle_block_functions`).
    """
    if engine == "auto":
        return "library" if library_function() is not None else "numba"
    if engine not in ENGINES:
        raise ValueError(
            f"engine must be 'auto', 'library', 'bitshuffle' or 'numba', got {engine!r}"
        )
    if engine == "library" and library_function() is None:
        raise RuntimeError("no bitshuffle library exports bshuf_decompress_lz4")
    if engine == "bitshuffle" and bitshuffle_block_functions() is None:
        raise RuntimeError(
            "the bitshuffle library does not export LZ4_decompress_safe and bshuf_untrans_bit_elem"
        )
    return engine


def _read_be(buffer: np.ndarray, positions: np.ndarray, nbytes: int) -> np.ndarray:
    """Big-endian unsigned integers of ``nbytes`` at ``positions`` (uint64, wrapping as
    the numba walk's int64 does: only compared for equality)."""
    value = np.zeros(positions.shape, dtype=np.uint64)
    for k in range(nbytes):
        value = (value << np.uint64(8)) | buffer[positions + k].astype(np.uint64)
    return value


def check_chunks(
    buffer: np.ndarray, offsets: np.ndarray, frame_bytes: int, elem_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Check the header, block table and tail of chunks ``buffer[offsets[i]:offsets[i+1]]``.

    Returns ``(errors, block_elements)``: each chunk's error code (``DECODE_OK`` when its
    header gives ``frame_bytes``, a positive block size that is a multiple of 8 elements,
    every block's length field and bytes lie inside the chunk, and the raw tail ends it
    exactly) and its block size in elements. The LZ4 sequences inside the blocks are the
    C decoder's to check.
    """
    start = offsets[:-1]
    end = offsets[1:]
    n = start.shape[0]
    errors = np.zeros(n, dtype=np.int32)
    block_elements = np.zeros(n, dtype=np.int64)
    errors[end - start < 12] = ERR_CHUNK_TOO_SHORT
    live = np.flatnonzero(errors == DECODE_OK)
    if live.size == 0:
        return errors, block_elements
    head = start[live]
    bad = _read_be(buffer, head, 8) != np.uint64(frame_bytes)
    errors[live[bad]] = ERR_UNCOMPRESSED_SIZE
    live, head = live[~bad], head[~bad]
    block_bytes = _read_be(buffer, head + 8, 4).astype(np.int64)
    bad = (block_bytes <= 0) | (block_bytes % (8 * elem_size) != 0)
    errors[live[bad]] = ERR_BLOCK_SIZE
    live, head, block_bytes = live[~bad], head[~bad], block_bytes[~bad]
    if live.size == 0:
        return errors, block_elements
    per_block = block_bytes // elem_size
    block_elements[live] = per_block
    n_elements = frame_bytes // elem_size
    n_full = n_elements // per_block
    leftover = n_elements - n_full * per_block
    n_blocks = n_full + (leftover - leftover % 8 > 0)
    position = head + 12
    stop = end[live]
    ok = np.ones(live.size, dtype=bool)
    for block in range(int(n_blocks.max(initial=0))):
        active = np.flatnonzero(ok & (block < n_blocks))
        if active.size == 0:
            break
        at = position[active]
        truncated = stop[active] - at < 4
        errors[live[active[truncated]]] = ERR_BLOCK_HEADER_TRUNCATED
        ok[active[truncated]] = False
        active, at = active[~truncated], at[~truncated]
        length = _read_be(buffer, at, 4).astype(np.int64)
        at = at + 4
        overrun = length > stop[active] - at
        errors[live[active[overrun]]] = ERR_BLOCK_LENGTH
        ok[active[overrun]] = False
        position[active] = at + length
    done = np.flatnonzero(ok)
    tail = (leftover[done] % 8) * elem_size
    short = stop[done] - position[done] < tail
    errors[live[done[short]]] = ERR_TAIL_TRUNCATED
    trailing = ~short & (position[done] + tail != stop[done])
    errors[live[done[trailing]]] = ERR_TRAILING_BYTES
    return errors, block_elements


def decode_chunks(
    buffer: np.ndarray,
    offsets: np.ndarray,
    out: np.ndarray,
    frame_bytes: int,
    elem_size: int,
    errors: np.ndarray,
) -> None:
    """Check, then decode chunks into consecutive frames of the flat uint8 ``out``.

    Same contract as :func:`quantem.stem4d.io.cpu_decode.decode_chunks`: chunk ``i`` is
    ``buffer[offsets[i]:offsets[i+1]]`` and becomes ``out[i * frame_bytes:...]``,
    ``errors[i]`` its code. Each ctypes call releases the GIL, so threads decoding their
    own pieces run in parallel.
    """
    function = library_function()
    if function is None:
        raise RuntimeError("no bitshuffle library exports bshuf_decompress_lz4")
    n = offsets.shape[0] - 1
    if out.size < n * frame_bytes:
        raise ValueError(f"out holds {out.size} bytes, {n} frames need {n * frame_bytes}")
    codes, block_elements = check_chunks(buffer, offsets, frame_bytes, elem_size)
    errors[:] = codes
    source = buffer.ctypes.data
    target = out.ctypes.data
    n_elements = frame_bytes // elem_size
    starts = offsets[:-1].tolist()
    expected = (offsets[1:] - offsets[:-1] - 12).tolist()
    sizes = block_elements.tolist()
    if frame_bytes > _INT32_MAX:  # LZ4_decompress_safe takes int sizes
        codes[codes == DECODE_OK] = ERR_LZ4_MALFORMED
    codes[(codes == DECODE_OK) & (offsets[1:] - offsets[:-1] > _INT32_MAX)] = ERR_LZ4_MALFORMED
    errors[:] = codes
    for i in np.flatnonzero(codes == DECODE_OK).tolist():
        consumed = function(
            source + starts[i] + 12, target + i * frame_bytes, n_elements, elem_size, sizes[i]
        )
        if consumed != expected[i]:
            errors[i] = ERR_LZ4_MALFORMED


__all__ = [
    "ENGINES",
    "FRAMES_PER_TASK",
    "bitshuffle_block_functions",
    "bitshuffle_library_candidates",
    "check_chunks",
    "decode_chunks",
    "default_threads",
    "library_function",
    "load_bitshuffle_function",
    "resolve_engine",
]
