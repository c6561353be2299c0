"""GPU decoding of bitshuffle-LZ4 chunks (the HDF5 filter 32008 layout), one chunk per frame.

The kernels are in ``lz4_bitshuffle.cu``; this module mirrors the chunk format's constants,
validates what the host can check cheaply (the first chunk's header, chunk lengths against
the largest chunk a frame can produce) and turns the kernels' per-frame error codes into
:class:`~quantem.stem4d.errors.ChunkDecodeError` naming the file and the frame.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from quantem.stem4d.errors import ChunkDecodeError, UnsupportedDtypeError

SOURCE_FILE = "lz4_bitshuffle.cu"
HEADER_BYTES = 12
HEADER_STRUCT = struct.Struct(">QI")  # uncompressed bytes, block size in bytes
BLOCK_LENGTH_BYTES = 4
ELEMENTS_PER_GROUP = 8  # bitshuffle transposes groups of 8 elements
MAX_BLOCK_BYTES = 1 << 16
SUPPORTED_ELEM_SIZES = (1, 2, 4)
WALK_THREADS = 128

# Mirrors the ERR_* codes of lz4_bitshuffle.cu.
CHUNK_ERRORS = {
    1: "chunk is shorter than its 12-byte header",
    2: "chunk header's uncompressed size is not the frame size",
    3: "chunk header's block size differs from the first chunk's",
    4: "a block length runs past the chunk end or exceeds the LZ4 bound",
    5: "chunk length does not match its blocks plus the raw tail",
    6: "LZ4 literal run runs past the block's input or output",
    7: "LZ4 match offset is zero or points before the block start",
    8: "LZ4 match runs past the block's output",
    9: "LZ4 block decodes to the wrong size",
    10: "LZ4 block ends in the middle of a sequence",
    11: "chunk lies outside the bytes staged for it",
}


def lz4_bound(nbytes: int) -> int:
    """Largest LZ4 block that ``nbytes`` of input can compress to (LZ4_COMPRESSBOUND)."""
    return nbytes + nbytes // 255 + 16


def max_chunk_bytes(frame_bytes: int, elem_size: int) -> int:
    """An upper bound on any valid chunk of a frame, whatever its block size."""
    blocks = frame_bytes // (ELEMENTS_PER_GROUP * elem_size) + 1
    return HEADER_BYTES + frame_bytes + frame_bytes // 255 + blocks * (16 + BLOCK_LENGTH_BYTES)


def parse_chunk_header(chunk: bytes | np.ndarray, frame_bytes: int, elem_size: int) -> int:
    """Validate a chunk header and return its block size in bytes; raise ``ValueError``."""
    raw = bytes(chunk[:HEADER_BYTES])
    if len(raw) < HEADER_BYTES:
        raise ValueError(CHUNK_ERRORS[1])
    uncompressed, block_bytes = HEADER_STRUCT.unpack(raw)
    if uncompressed != frame_bytes:
        raise ValueError(
            f"{CHUNK_ERRORS[2]} (header {uncompressed} bytes, frame {frame_bytes} bytes)"
        )
    if (
        block_bytes == 0
        or block_bytes % (ELEMENTS_PER_GROUP * elem_size)
        or block_bytes > MAX_BLOCK_BYTES
    ):
        raise ValueError(
            f"chunk header's block size {block_bytes} bytes is not a positive multiple of "
            f"{ELEMENTS_PER_GROUP * elem_size} up to {MAX_BLOCK_BYTES}"
        )
    return block_bytes


def decoder_defines(
    elem_size: int, frame_elems: int, block_bytes: int, stage_compressed: bool = False
) -> dict[str, int]:
    """The compile-time constants of ``lz4_bitshuffle.cu`` for one chunk geometry (also
    what the ahead-of-time build of :mod:`quantem.stem4d.cuda.aot` specialises)."""
    cbound = (lz4_bound(block_bytes) + 15) // 16 * 16
    per_warp = block_bytes + (cbound if stage_compressed else 0)
    # One warp a thread block for blocks of 4 KB and more: one-warp blocks fill an SM's
    # shared memory better than four-warp ones, whose allocation rounds down per block; smaller
    # blocks keep up to 4 warps, so that the 32 blocks an SM can hold still fill it.
    if per_warp >= 4096:
        warps_per_cta = 1
    else:
        warps_per_cta = max(1, min(4, (96 * 1024) // per_warp))
    vector = (frame_elems * elem_size) % (ELEMENTS_PER_GROUP * elem_size) == 0
    return {
        "ELEM_SIZE": elem_size,
        "FRAME_ELEMS": frame_elems,
        "BLOCK_BYTES": block_bytes,
        "CBOUND": cbound,
        "WARPS_PER_CTA": warps_per_cta,
        "VECTOR_STORES": int(vector),
        "STAGE_COMPRESSED": int(stage_compressed),
    }


class ChunkDecoder:
    """Compiled kernels for one (element size, frame size, block size) combination.

    Parameters
    ----------
    elem_size
        Bytes per element: 1, 2 or 4.
    frame_elems
        Elements per frame (one chunk).
    block_bytes
        The chunks' bitshuffle block size in bytes (from the first chunk's header).
    stage_compressed
        Stage each compressed block in shared memory before parsing it. The default,
        ``False``, parses straight from global memory (L1-cached): on an H200 that ran at
        406 GB/s of decoded output against 282 GB/s staged, because staging halves the
        warps per multiprocessor; the staged variant is kept for benchmarking.
    extra_defines
        More kernel constants, compiled by NVRTC (benchmarks and tests: ``LZ4_SCHEDULE``,
        ``LZ4_WIDE_MIN``, ``LZ4_TRANSPOSE``, ``WARPS_PER_CTA``).
    """

    def __init__(
        self,
        elem_size: int,
        frame_elems: int,
        block_bytes: int,
        *,
        stage_compressed: bool = False,
        extra_defines: dict[str, int] | None = None,
    ) -> None:
        if elem_size not in SUPPORTED_ELEM_SIZES:
            raise UnsupportedDtypeError(
                f"bitshuffle-LZ4 decoding on the GPU supports 1, 2 or 4-byte elements, not {elem_size}"
            )
        from quantem.stem4d.cuda.module_loader import load_module

        self.elem_size = elem_size
        self.frame_elems = frame_elems
        self.frame_bytes = frame_elems * elem_size
        self.block_bytes = block_bytes
        block_elems = block_bytes // elem_size
        leftover = frame_elems % block_elems
        self.blocks_per_frame = frame_elems // block_elems + (1 if leftover >= 8 else 0)
        defines = decoder_defines(elem_size, frame_elems, block_bytes, stage_compressed)
        defines.update(extra_defines or {})  # no fatbin names these: NVRTC compiles them
        self.warps_per_cta = int(defines["WARPS_PER_CTA"])
        per_warp = block_bytes + (int(defines["CBOUND"]) if stage_compressed else 0)
        self.shared_bytes = self.warps_per_cta * per_warp
        module = load_module(SOURCE_FILE, defines)
        self._walk = module.get_function("walk_chunks")
        self._decode = module.get_function("decode_blocks")
        self._decode.max_dynamic_shared_size_bytes = self.shared_bytes

    def decode(
        self,
        buffer: Any,
        offsets: Any,
        n_frames: int,
        out: Any,
        errors: Any,
        scratch: tuple[Any, Any],
        stream: Any = None,
        ends: Any = None,
    ) -> None:
        """Enqueue decoding of ``n_frames`` chunks of device ``buffer`` into device ``out``.

        ``offsets`` (device int64, ``n_frames + 1``) delimit chunks packed one after the
        other in ``buffer``; with ``ends`` (device int64, ``n_frames``), chunk ``i`` is
        ``buffer[offsets[i]:ends[i]]`` instead (chunks with gaps between them). The kernel
        checks every chunk lies inside ``buffer`` before reading it;
        ``out`` is a contiguous device array of at least ``n_frames`` frames; ``errors``
        (device int32, ``n_frames``, zeroed) receives a nonzero code for each bad chunk;
        ``scratch`` is (int64, uint32) device arrays of ``n_frames * blocks_per_frame``.
        """
        import cupy

        if n_frames == 0:
            return
        block_src, block_len = scratch
        n = np.int64(n_frames)
        with stream if stream is not None else cupy.cuda.Stream.null:
            grid = (n_frames + WALK_THREADS - 1) // WALK_THREADS
            starts = offsets[:n_frames]
            stops = offsets[1 : n_frames + 1] if ends is None else ends[:n_frames]
            size = np.int64(buffer.size)
            self._walk(
                (grid,),
                (WALK_THREADS,),
                (buffer, starts, stops, size, n, block_src, block_len, out, errors),
            )
            items = n_frames * self.blocks_per_frame
            if items:
                ctas = (items + self.warps_per_cta - 1) // self.warps_per_cta
                self._decode(
                    (ctas,),
                    (32 * self.warps_per_cta,),
                    (buffer, n, block_src, block_len, out, errors),
                    shared_mem=self.shared_bytes,
                )


def raise_first_error(
    errors_host: np.ndarray, frame_start: int, describe_frame: Callable[[int], tuple[str, dict]]
) -> None:
    """Raise :class:`ChunkDecodeError` for the first nonzero code in ``errors_host``, if any.

    ``describe_frame(frame)`` returns the file path and extra fields naming the frame.
    """
    bad = np.flatnonzero(errors_host)
    if bad.size == 0:
        return
    frame = frame_start + int(bad[0])
    code = int(errors_host[bad[0]])
    path, fields = describe_frame(frame)
    detail = CHUNK_ERRORS.get(code, f"unknown chunk error code {code}")
    more = f"; {bad.size - 1} more corrupt chunk(s)" if bad.size > 1 else ""
    raise ChunkDecodeError(path, f"corrupt chunk: {detail}{more}", frame=frame, **fields)
