"""Error codes of a bitshuffle-LZ4 chunk's checks, shared by every CPU decode engine.

One code per check (:mod:`quantem.stem4d.io.cpu_decode` and
:mod:`quantem.stem4d.io.library_decode` return the same ones), their messages, and the
classes that map them and the GPU kernel's codes onto one another. No numba here: the
numba-free engine imports these.
"""

# Error codes, one per check; 0 means the frame decoded.
DECODE_OK = 0
ERR_CHUNK_TOO_SHORT = 1
ERR_UNCOMPRESSED_SIZE = 2
ERR_BLOCK_SIZE = 3
ERR_BLOCK_HEADER_TRUNCATED = 4
ERR_BLOCK_LENGTH = 5
ERR_LZ4_MALFORMED = 6
ERR_LZ4_OUTPUT_SIZE = 7
ERR_TAIL_TRUNCATED = 8
ERR_TRAILING_BYTES = 9

ERROR_MESSAGES = {
    ERR_CHUNK_TOO_SHORT: "chunk shorter than its 12-byte header",
    ERR_UNCOMPRESSED_SIZE: "chunk header's uncompressed size differs from the frame size",
    ERR_BLOCK_SIZE: "chunk header's block size is not a positive multiple of 8 elements",
    ERR_BLOCK_HEADER_TRUNCATED: "chunk ends inside a block length field",
    ERR_BLOCK_LENGTH: "a block's compressed length runs past the end of the chunk",
    ERR_LZ4_MALFORMED: "malformed LZ4 block (length or match offset out of range)",
    ERR_LZ4_OUTPUT_SIZE: "an LZ4 block decodes to the wrong number of bytes",
    ERR_TAIL_TRUNCATED: "chunk ends before the frame's raw tail bytes",
    ERR_TRAILING_BYTES: "unexpected bytes after the frame's last block",
}

#: What a chunk error means, the same for this decoder and the GPU kernel
#: (``quantem/stem4d/cuda/lz4_bitshuffle.cu``), whose numbering differs and which splits or
#: merges some checks: both map every code to one of these classes, and a corrupt chunk
#: gets the same class from both (``tests/test_cuda_routing.py`` runs the kernel source
#: on the host against this decoder).
CHUNK_ERROR_CLASSES = ("header", "block table", "lz4 block", "chunk length", "staging bounds")
#: This decoder's codes -> class.
CPU_ERROR_CLASS = {
    ERR_CHUNK_TOO_SHORT: "header",
    ERR_UNCOMPRESSED_SIZE: "header",
    ERR_BLOCK_SIZE: "header",
    ERR_BLOCK_HEADER_TRUNCATED: "block table",
    ERR_BLOCK_LENGTH: "block table",
    ERR_LZ4_MALFORMED: "lz4 block",
    ERR_LZ4_OUTPUT_SIZE: "lz4 block",
    ERR_TAIL_TRUNCATED: "chunk length",
    ERR_TRAILING_BYTES: "chunk length",
}
#: The GPU kernel's ``ERR_*`` codes (``lz4_bitshuffle.cu``, mirrored in
#: ``quantem.stem4d.cuda.lz4_bitshuffle.CHUNK_ERRORS``) -> class. Its 11 (a chunk outside the
#: bytes staged for it) is a staging fault with no CPU counterpart.
KERNEL_ERROR_CLASS = {
    1: "header",  # ERR_CHUNK_TOO_SHORT
    2: "header",  # ERR_HEADER_SIZE
    3: "header",  # ERR_HEADER_BLOCK_SIZE
    4: "block table",  # ERR_BLOCK_LENGTH (also a truncated length field)
    5: "chunk length",  # ERR_CHUNK_LENGTH (raw tail missing or trailing bytes)
    6: "lz4 block",  # ERR_LZ4_LITERAL
    7: "lz4 block",  # ERR_LZ4_OFFSET
    8: "lz4 block",  # ERR_LZ4_MATCH
    9: "lz4 block",  # ERR_LZ4_OUTPUT_SIZE
    10: "lz4 block",  # ERR_LZ4_TRUNCATED
    11: "staging bounds",  # ERR_CHUNK_BOUNDS
}
