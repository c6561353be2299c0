"""CPU decoder of bitshuffle-LZ4 frame chunks (the HDF5 filter 32008 in LZ4 mode).

The bitshuffle library's own ``decompress_lz4`` holds the GIL (threads run it no faster
than one), so this module decodes with numba: one frame per ``prange`` iteration, the
GIL released, every length and offset checked against the chunk and the frame before
memory is touched. A corrupt chunk yields an error code for its frame, never a read or
write outside the buffers; :func:`decode_frames` turns the first one into a
:class:`~quantem.stem4d.errors.ChunkDecodeError` naming file and frame.

Three engines accept the same chunks with the same error codes (``"library"``, the
default, is :mod:`quantem.stem4d.io.library_decode`: numpy checks and the bitshuffle
library's own chunk decoder, no numba on the load path); two of them share the checks:

* ``"numba"``: LZ4 and bit-unshuffle written here (:func:`decode_chunk`). It is written
  to be read: it is also the CPU reference for the CUDA decoder.
* ``"bitshuffle"``: :func:`scan_chunk` first walks the chunk's
  header, block lengths and LZ4 sequences with the same checks (no copying), then the
  bitshuffle library's C block functions decode it (``LZ4_decompress_safe`` into a
  scratch block, ``bshuf_untrans_bit_elem`` with SIMD bit transposes into the frame),
  called from a numba function through their addresses: no GIL and no Python work per
  frame, so threads each decoding their own pieces scale with cores
  (:func:`decode_chunks`). After the walk every block lies inside the chunk, so the C
  decoder never reads outside it, and ``LZ4_decompress_safe`` never writes past the
  scratch block nor ``bshuf_untrans_bit_elem`` past the frame.

Chunk layout (see :mod:`quantem.stem4d.io.arina_layout` and ``docs/arina.md``)::

    u64 BE uncompressed bytes | u32 BE block bytes | { u32 BE length | LZ4 block }* | raw tail

Bit-shuffled block of ``m`` elements (``m`` a multiple of 8) of ``E`` bytes: ``8 * E``
rows of ``m / 8`` bytes; row ``8 * j + k`` holds bit ``k`` of byte ``j`` of every
element, element ``i`` at bit ``i % 8`` of byte ``i // 8`` of the row.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from quantem.stem4d.errors import ChunkDecodeError
from quantem.stem4d.io import library_decode
from quantem.stem4d.io.chunk_errors import (  # noqa: F401  (re-exported)
    CHUNK_ERROR_CLASSES,
    CPU_ERROR_CLASS,
    DECODE_OK,
    ERR_BLOCK_HEADER_TRUNCATED,
    ERR_BLOCK_LENGTH,
    ERR_BLOCK_SIZE,
    ERR_CHUNK_TOO_SHORT,
    ERR_LZ4_MALFORMED,
    ERR_LZ4_OUTPUT_SIZE,
    ERR_TAIL_TRUNCATED,
    ERR_TRAILING_BYTES,
    ERR_UNCOMPRESSED_SIZE,
    ERROR_MESSAGES,
    KERNEL_ERROR_CLASS,
)
from quantem.stem4d.io.library_decode import (  # noqa: F401  (re-exported)
    bitshuffle_library_candidates,
    load_bitshuffle_function,
    resolve_engine,
)

_M1 = np.uint64(0x00AA00AA00AA00AA)
_M2 = np.uint64(0x0000CCCC0000CCCC)
_M3 = np.uint64(0x00000000F0F0F0F0)
_S7 = np.uint64(7)
_S14 = np.uint64(14)
_S28 = np.uint64(28)
_S8 = np.uint64(8)
_BYTE = np.uint64(0xFF)


@numba.njit(cache=True, nogil=True, inline="always")
def _read_be(src: np.ndarray, pos: int, nbytes: int) -> int:
    value = 0
    for i in range(nbytes):
        value = (value << 8) | np.int64(src[pos + i])
    return value


@numba.njit(cache=True, nogil=True)
def _lz4_extend_length(src, ip, iend, length):
    """Add LZ4's 255-continued length bytes at ``src[ip]`` to ``length``; ``(-1, ip)`` on overrun."""
    while True:
        if ip >= iend:
            return -1, ip
        extra = np.int64(src[ip])
        ip += 1
        length += extra
        if extra != 255:
            return length, ip


@numba.njit(cache=True, nogil=True)
def _lz4_walk(src, ip, iend, dst, op_start, op_end, write) -> int:
    """Walk one LZ4 block's sequences, checking each one; copy into ``dst`` when ``write``.

    Every literal run, match length and match offset is checked before anything is copied;
    the decoder and the pre-check of the C path share this one walk so they accept and
    reject exactly the same blocks.
    """
    op = op_start
    while True:
        if ip >= iend:
            return ERR_LZ4_MALFORMED
        token = np.int64(src[ip])
        ip += 1
        literals = token >> 4
        if literals == 15:
            literals, ip = _lz4_extend_length(src, ip, iend, literals)
            if literals < 0:
                return ERR_LZ4_MALFORMED
        if literals > iend - ip:
            return ERR_LZ4_MALFORMED
        if literals > op_end - op:
            return ERR_LZ4_OUTPUT_SIZE
        if write:
            dst[op : op + literals] = src[ip : ip + literals]
        ip += literals
        op += literals
        if ip == iend:  # the last sequence carries literals only
            break
        if iend - ip < 2:
            return ERR_LZ4_MALFORMED
        offset = np.int64(src[ip]) | (np.int64(src[ip + 1]) << 8)
        ip += 2
        if offset == 0 or offset > op - op_start:
            return ERR_LZ4_MALFORMED
        length = token & 15
        if length == 15:
            length, ip = _lz4_extend_length(src, ip, iend, length)
            if length < 0:
                return ERR_LZ4_MALFORMED
        length += 4
        if length > op_end - op:
            return ERR_LZ4_OUTPUT_SIZE
        if write:
            match = op - offset
            if offset >= length:
                dst[op : op + length] = dst[match : match + length]
            else:  # overlapping copy repeats the last `offset` bytes
                for i in range(length):
                    dst[op + i] = dst[match + i]
        op += length
    if op != op_end:
        return ERR_LZ4_OUTPUT_SIZE
    return DECODE_OK


@numba.njit(cache=True, nogil=True)
def lz4_decode_block(src, ip, iend, dst, op_start, op_end) -> int:
    """Decode one LZ4 block ``src[ip:iend]`` into exactly ``dst[op_start:op_end]``.

    Returns ``DECODE_OK``, ``ERR_LZ4_MALFORMED`` or ``ERR_LZ4_OUTPUT_SIZE``. Every literal
    run, match length and match offset is checked before copying.
    """
    return _lz4_walk(src, ip, iend, dst, op_start, op_end, True)


@numba.njit(cache=True, nogil=True)
def bitunshuffle_block(src, src_start, dst, dst_start, n_elements, elem_size) -> None:
    """Undo bitshuffle of ``n_elements`` (a multiple of 8) from ``src`` into ``dst``.

    For each byte ``j`` of the element and each group of 8 elements, the 8 bit-rows give
    an 8x8 bit matrix (row = bit, column = element); transposing it in a 64-bit word
    yields byte ``j`` of the 8 elements.
    """
    row_bytes = n_elements // 8
    for j in range(elem_size):
        base = src_start + 8 * j * row_bytes
        for column in range(row_bytes):
            x = np.uint64(0)
            for k in range(8):
                x |= np.uint64(src[base + k * row_bytes + column]) << np.uint64(8 * k)
            # Hacker's Delight transpose of an 8x8 bit matrix held in a 64-bit word.
            t = (x ^ (x >> _S7)) & _M1
            x = x ^ t ^ (t << _S7)
            t = (x ^ (x >> _S14)) & _M2
            x = x ^ t ^ (t << _S14)
            t = (x ^ (x >> _S28)) & _M3
            x = x ^ t ^ (t << _S28)
            out = dst_start + column * 8 * elem_size + j
            for b in range(8):
                dst[out + b * elem_size] = np.uint8((x >> (_S8 * np.uint64(b))) & _BYTE)


@numba.njit(cache=True, nogil=True)
def _chunk_walk(src, start, end, frame_bytes, elem_size, dst, dst_start, scratch, write) -> int:
    """Walk one bitshuffle-LZ4 chunk ``src[start:end]``: header, every block, the raw tail.

    With ``write``, each block is decoded into ``scratch`` and un-shuffled into ``dst``
    from ``dst_start``; without, only checked (``dst`` and ``scratch`` are not touched).
    Decoding and the C path's pre-check share this walk, so they accept and reject
    exactly the same chunks with the same error codes.
    """
    if end - start < 12:
        return ERR_CHUNK_TOO_SHORT
    if _read_be(src, start, 8) != frame_bytes:
        return ERR_UNCOMPRESSED_SIZE
    block_bytes = _read_be(src, start + 8, 4)
    if block_bytes <= 0 or block_bytes % (8 * elem_size) != 0:
        return ERR_BLOCK_SIZE
    block_elements = block_bytes // elem_size
    n_elements = frame_bytes // elem_size
    n_full = n_elements // block_elements
    leftover = n_elements - n_full * block_elements
    last_elements = leftover - leftover % 8
    pos = start + 12
    out = dst_start
    for block in range(n_full + 1):
        elements = block_elements if block < n_full else last_elements
        if elements == 0:
            continue
        if end - pos < 4:
            return ERR_BLOCK_HEADER_TRUNCATED
        length = _read_be(src, pos, 4)
        pos += 4
        if length > end - pos:
            return ERR_BLOCK_LENGTH
        nbytes = elements * elem_size
        err = _lz4_walk(src, pos, pos + length, scratch, 0, nbytes, write)
        if err != DECODE_OK:
            return err
        if write:
            bitunshuffle_block(scratch, 0, dst, out, elements, elem_size)
        pos += length
        out += nbytes
    tail = (leftover % 8) * elem_size
    if end - pos < tail:
        return ERR_TAIL_TRUNCATED
    if write:
        dst[out : out + tail] = src[pos : pos + tail]
    pos += tail
    if pos != end:
        return ERR_TRAILING_BYTES
    return DECODE_OK


@numba.njit(cache=True, nogil=True)
def decode_chunk(src, start, end, dst, dst_start, frame_bytes, elem_size, scratch) -> int:
    """Decode the chunk ``src[start:end]`` into ``dst[dst_start:dst_start+frame_bytes]``.

    ``scratch`` holds one decompressed (still shuffled) block: at least ``frame_bytes``.
    Returns ``DECODE_OK`` or the first failed check's error code.
    """
    return _chunk_walk(src, start, end, frame_bytes, elem_size, dst, dst_start, scratch, True)


@numba.njit(cache=True, nogil=True)
def scan_chunk(src, start, end, frame_bytes, elem_size) -> int:
    """Check a chunk's header, blocks, LZ4 sequences and tail without decoding (no writes).

    Returns ``DECODE_OK`` exactly when :func:`decode_chunk` would decode the chunk, else
    the same error code: both engines accept and reject the same chunks.
    """
    no_output = np.empty(0, dtype=np.uint8)  # never written: ``write`` is False
    return _chunk_walk(src, start, end, frame_bytes, elem_size, no_output, 0, no_output, False)


def default_threads() -> int:
    """Cores to decode on: numba's configured thread count (``NUMBA_NUM_THREADS``), which
    defaults to the CPUs this process may run on. Reading the setting does not start
    numba's thread pool."""
    return max(1, int(numba.config.NUMBA_NUM_THREADS))


_I8_POINTER = ir.IntType(8).as_pointer()


def _c_pointer_call(result_bits: int, size_bits: int):
    """A numba intrinsic calling ``int<result_bits> f(const void*, void*, int<size_bits>,
    int<size_bits>)`` at a function address; every argument is passed as an int64
    (addresses, and sizes that are truncated to ``size_bits``)."""

    @intrinsic
    def call(typingctx, function, src, dst, first, second):
        signature = getattr(types, f"int{result_bits}")(
            types.int64, types.int64, types.int64, types.int64, types.int64
        )

        def codegen(context, builder, sig, args):
            result = ir.IntType(result_bits)
            size = ir.IntType(size_bits)
            function_type = ir.FunctionType(result, [_I8_POINTER, _I8_POINTER, size, size])
            pointer = builder.inttoptr(args[0], function_type.as_pointer())
            sizes = [a if size_bits == 64 else builder.trunc(a, size) for a in args[3:5]]
            return builder.call(
                pointer,
                [
                    builder.inttoptr(args[1], _I8_POINTER),
                    builder.inttoptr(args[2], _I8_POINTER),
                    *sizes,
                ],
            )

        return signature, codegen

    return call


#: ``int LZ4_decompress_safe(const char* src, char* dst, int src_size, int dst_capacity)``
_call_lz4_decompress_safe = _c_pointer_call(32, 32)
#: ``int64_t bshuf_untrans_bit_elem(const void* in, void* out, size_t size, size_t elem_size)``
_call_bshuf_untrans_bit_elem = _c_pointer_call(64, 64)


_BLOCK_FUNCTIONS = library_decode.bitshuffle_block_functions()
#: Frames per task handed to a decode thread (about 2 ms of work for 192x192 uint16).
FRAMES_PER_TASK = 64
BITSHUFFLE_C_AVAILABLE = _BLOCK_FUNCTIONS is not None
# LZ4_decompress_safe takes int sizes.
_INT32_MAX = 2**31 - 1


@numba.njit(cache=True, nogil=True)
def _decode_chunks_c(
    buffer, offsets, out, frame_bytes, elem_size, errors, scratch, lz4, untrans
) -> None:
    """Check then decode chunks ``buffer[offsets[i]:offsets[i+1]]`` into frame ``i`` of ``out``.

    Each chunk first passes :func:`scan_chunk` (no writes); only then do the C functions
    run, block by block: ``LZ4_decompress_safe`` into a scratch block of exactly the
    block's size, then ``bshuf_untrans_bit_elem`` into the frame. Every pointer handed to
    C lies inside the buffers, with the sizes the scan checked. ``scratch`` (at least
    ``frame_bytes``) is the caller's: an array allocated here could be released after
    its address is taken, while C still writes to it.
    """
    n_elements = frame_bytes // elem_size
    source_base = buffer.ctypes.data
    out_base = out.ctypes.data
    scratch_base = scratch.ctypes.data
    for i in range(offsets.shape[0] - 1):
        start = offsets[i]
        end = offsets[i + 1]
        err = scan_chunk(buffer, start, end, frame_bytes, elem_size)
        if err == DECODE_OK and (end - start > _INT32_MAX or frame_bytes > _INT32_MAX):
            err = ERR_LZ4_MALFORMED
        errors[i] = err
        if err != DECODE_OK:
            continue
        block_elements = _read_be(buffer, start + 8, 4) // elem_size
        n_full = n_elements // block_elements
        leftover = n_elements - n_full * block_elements
        last_elements = leftover - leftover % 8
        pos = start + 12
        at = i * frame_bytes
        for block in range(n_full + 1):
            elements = block_elements if block < n_full else last_elements
            if elements == 0:
                continue
            length = _read_be(buffer, pos, 4)
            pos += 4
            nbytes = elements * elem_size
            got = _call_lz4_decompress_safe(lz4, source_base + pos, scratch_base, length, nbytes)
            if got != nbytes:
                errors[i] = ERR_LZ4_MALFORMED
                break
            done = _call_bshuf_untrans_bit_elem(
                untrans, scratch_base, out_base + at, elements, elem_size
            )
            if done < 0:
                errors[i] = ERR_LZ4_MALFORMED
                break
            pos += length
            at += nbytes
        if errors[i] == DECODE_OK:
            tail = (leftover % 8) * elem_size
            out[at : at + tail] = buffer[pos : pos + tail]


def decode_chunks(
    buffer: np.ndarray,
    offsets: np.ndarray,
    out: np.ndarray,
    frame_bytes: int,
    elem_size: int,
    errors: np.ndarray,
    engine: str,
    scratch: np.ndarray | None = None,
) -> None:
    """Decode chunks into consecutive frames of the flat uint8 ``out``, in this thread.

    Chunk ``i`` is ``buffer[offsets[i]:offsets[i+1]]`` and becomes
    ``out[i * frame_bytes:(i + 1) * frame_bytes]``; ``errors[i]`` receives its error
    code (``DECODE_OK`` when it decoded). The GIL is released for the whole call, so
    several threads may each decode their own pieces. ``engine`` is ``"bitshuffle"`` or
    ``"numba"`` (already resolved, see :func:`decode_frames`). ``scratch``: a uint8
    array of at least ``frame_bytes`` to reuse across calls (allocated when None).
    """
    if engine == "library":
        library_decode.decode_chunks(buffer, offsets, out, frame_bytes, elem_size, errors)
    elif engine == "bitshuffle":
        assert _BLOCK_FUNCTIONS is not None
        _, lz4, untrans = _BLOCK_FUNCTIONS
        if scratch is None or scratch.size < frame_bytes:
            scratch = np.empty(max(frame_bytes, 1), dtype=np.uint8)
        _decode_chunks_c(
            buffer, offsets, out, frame_bytes, elem_size, errors, scratch, lz4, untrans
        )
    else:
        _decode_frames_serial(buffer, offsets, out, frame_bytes, elem_size, errors)


def _decode_frames_pieces(buffer, offsets, out, frame_bytes, elem_size, errors, threads, engine):
    """Decode on ``threads`` threads, each taking pieces of ``FRAMES_PER_TASK`` frames."""
    n = offsets.shape[0] - 1
    per_task = library_decode.FRAMES_PER_TASK if engine == "library" else FRAMES_PER_TASK
    workers = max(1, min(threads or default_threads(), n))
    if workers == 1:
        decode_chunks(buffer, offsets, out, frame_bytes, elem_size, errors, engine)
        return

    def run(first: int) -> None:
        last = min(first + per_task, n)
        decode_chunks(
            buffer,
            offsets[first : last + 1],
            out[first * frame_bytes : last * frame_bytes],
            frame_bytes,
            elem_size,
            errors[first:last],
            engine,
        )

    # Small pieces handed out on demand: a thread that loses its core to another process
    # does not hold up the batch, and uneven frame sizes balance out.
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(run, range(0, n, per_task)))


@numba.njit(cache=True, nogil=True, parallel=True)
def _decode_frames_parallel(buffer, offsets, out, frame_bytes, elem_size, errors) -> None:
    n = offsets.shape[0] - 1
    for i in numba.prange(n):
        scratch = np.empty(frame_bytes, dtype=np.uint8)
        errors[i] = decode_chunk(
            buffer,
            offsets[i],
            offsets[i + 1],
            out,
            i * frame_bytes,
            frame_bytes,
            elem_size,
            scratch,
        )


@numba.njit(cache=True, nogil=True)
def _decode_frames_serial(buffer, offsets, out, frame_bytes, elem_size, errors) -> None:
    scratch = np.empty(frame_bytes, dtype=np.uint8)
    for i in range(offsets.shape[0] - 1):
        errors[i] = decode_chunk(
            buffer,
            offsets[i],
            offsets[i + 1],
            out,
            i * frame_bytes,
            frame_bytes,
            elem_size,
            scratch,
        )


def decode_frames(
    buffer: np.ndarray,
    offsets: np.ndarray,
    frame_shape: tuple[int, int],
    dtype: np.dtype | str,
    *,
    out: np.ndarray | None = None,
    threads: int | None = None,
    frame_numbers: np.ndarray | None = None,
    frame_files: Sequence[str] | None = None,
    engine: str = "auto",
) -> np.ndarray:
    """Decode consecutive chunks ``buffer[offsets[i]:offsets[i+1]]`` into frames.

    Parameters
    ----------
    buffer, offsets
        Compressed chunks back to back (uint8) and their ``n + 1`` boundaries.
    frame_shape, dtype
        Shape and stored type of one frame.
    out
        Optional C-contiguous ``(n, *frame_shape)`` array of ``dtype`` to fill.
    threads
        Cores to use (default: numba's thread count); ``1`` decodes serially.
    frame_numbers, frame_files
        Acquisition frame number and file of each chunk, used in error messages.
    engine
        ``"library"`` (numpy checks, then the bitshuffle library's whole-chunk decoder:
        :mod:`quantem.stem4d.io.library_decode`), ``"bitshuffle"`` (the library's block
        functions after this module's checks), ``"numba"`` (the reference decoder of this
        module) or ``"auto"`` (library when available).

    Raises
    ------
    ChunkDecodeError
        The first corrupt chunk, naming its file and frame.
    """
    dtype = np.dtype(dtype)
    buffer = np.ascontiguousarray(buffer, dtype=np.uint8).reshape(-1)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    n = offsets.shape[0] - 1
    if n < 0 or offsets[0] < 0 or offsets[-1] > buffer.shape[0] or np.any(np.diff(offsets) < 0):
        raise ValueError("offsets must be non-decreasing and within the buffer")
    frame_bytes = int(np.prod(frame_shape)) * dtype.itemsize
    if out is None:
        out = np.empty((n, *frame_shape), dtype=dtype)
    elif out.dtype != dtype or out.shape != (n, *frame_shape) or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous {dtype} array of shape {(n, *frame_shape)}")
    flat = out.reshape(-1).view(np.uint8)
    engine = resolve_engine(engine)
    errors = np.zeros(n, dtype=np.int32)
    if n:
        if engine in ("bitshuffle", "library"):
            _decode_frames_pieces(
                buffer, offsets, flat, frame_bytes, dtype.itemsize, errors, threads, engine
            )
        elif threads == 1:
            _decode_frames_serial(buffer, offsets, flat, frame_bytes, dtype.itemsize, errors)
        else:
            with _numba_threads(threads):
                _decode_frames_parallel(buffer, offsets, flat, frame_bytes, dtype.itemsize, errors)
    failure = first_decode_error(
        errors,
        lambda i: buffer[offsets[i] : offsets[i + 1]],
        frame_bytes,
        dtype.itemsize,
        engine,
        frame_numbers=frame_numbers,
        frame_files=frame_files,
    )
    if failure is not None:
        raise failure
    return out


def first_decode_error(
    errors: np.ndarray,
    read_chunk: Callable[[int], np.ndarray],
    frame_bytes: int,
    elem_size: int,
    engine: str,
    *,
    frame_numbers: np.ndarray | None = None,
    frame_files: Sequence[str] | None = None,
) -> ChunkDecodeError | None:
    """The :class:`ChunkDecodeError` for the first nonzero code in ``errors``, or None.

    ``read_chunk(i)`` returns chunk ``i`` again (uint8): when the C decoder reported the
    failure it says only "failed", so the reference decoder reruns on that one chunk to
    name the exact check.
    """
    bad = np.flatnonzero(errors)
    if not bad.size:
        return None
    i = int(bad[0])
    code = int(errors[i])
    if engine == "library" or (engine == "bitshuffle" and code == ERR_LZ4_MALFORMED):
        chunk = np.ascontiguousarray(read_chunk(i), dtype=np.uint8).reshape(-1)
        scratch = np.empty(frame_bytes, dtype=np.uint8)
        probe = np.empty(frame_bytes, dtype=np.uint8)
        code = decode_chunk(chunk, 0, chunk.size, probe, 0, frame_bytes, elem_size, scratch)
        code = code or ERR_LZ4_MALFORMED
    frame = int(frame_numbers[i]) if frame_numbers is not None else i
    path = frame_files[i] if frame_files is not None else None
    return ChunkDecodeError(
        path,
        ERROR_MESSAGES.get(code, "corrupt chunk"),
        frame=frame,
        corrupt_frames=int(bad.size) if bad.size > 1 else None,
    )


@contextlib.contextmanager
def _numba_threads(threads: int | None):
    previous = numba.get_num_threads()
    if threads:
        numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    try:
        yield
    finally:
        numba.set_num_threads(previous)


def decode_chunk_bytes(
    chunk: bytes,
    frame_shape: tuple[int, int],
    dtype: np.dtype | str,
    *,
    path: str | os.PathLike | None = None,
    frame: int = 0,
    engine: str = "auto",
) -> np.ndarray:
    """Decode one chunk (e.g. from h5py ``read_direct_chunk``) into a frame."""
    buffer = np.frombuffer(chunk, dtype=np.uint8)
    frames = decode_frames(
        buffer,
        np.array([0, buffer.size], dtype=np.int64),
        frame_shape,
        dtype,
        threads=1,
        frame_numbers=np.array([frame]),
        frame_files=[os.fspath(path)] if path else None,
        engine=engine,
    )
    return frames[0]


__all__ = [
    "BITSHUFFLE_C_AVAILABLE",
    "ERROR_MESSAGES",
    "FRAMES_PER_TASK",
    "decode_chunk",
    "decode_chunk_bytes",
    "decode_chunks",
    "decode_frames",
    "first_decode_error",
    "lz4_decode_block",
    "resolve_engine",
    "scan_chunk",
]
