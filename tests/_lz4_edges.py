"""Crafted LZ4 blocks for the kernel tests: sequences at every bound of the one-pass copies
of ``quantem/stem4d/cuda/lz4_bitshuffle.cu``, written and decoded by the plain rules of the format."""

from __future__ import annotations

import struct


def lz4_length(n):
    """The bytes that carry an LZ4 length past its token nibble's 15."""
    more = bytearray()
    n -= 15
    while n >= 255:
        more.append(255)
        n -= 255
    more.append(n)
    return bytes(more)


def lz4_block(sequences):
    """An LZ4 block of (literals, offset, match length) sequences; offset None: literals only."""
    block = bytearray()
    for literals, offset, mlen in sequences:
        lit = len(literals)
        block.append(min(lit, 15) << 4 | (0 if offset is None else min(mlen - 4, 15)))
        block += lz4_length(lit) if lit >= 15 else b""
        block += literals
        if offset is not None:
            block += struct.pack("<H", offset)
            block += lz4_length(mlen - 4) if mlen - 4 >= 15 else b""
    return bytes(block)


def lz4_reference(sequences, out_len):
    """The block's bytes, decoded one byte at a time; None where any decoder must refuse it."""
    out = bytearray()
    for literals, offset, mlen in sequences:
        out += literals
        if offset is None:
            break
        if offset == 0 or offset > len(out):
            return None
        for _ in range(mlen):
            out.append(out[-offset])
    if len(out) != out_len or sequences[-1][1] is not None:
        return None
    return bytes(out)


def edge_sequences(rng, out_len):
    """Sequences around every bound of the kernel's one-pass copies: literal and match
    lengths at their nibbles' limits, straight matches just clear of (or overlapping) their
    literals, runs of every short period, offsets at the window's edge, matches to the
    block's end or one past it, and now and then a sequence no decoder may accept."""
    sequences, op = [], 0
    while True:
        room = out_len - op
        if room < 24:
            if room >= 4 and rng.random() < 0.4:  # a last match up to the end, or past it
                lit = int(rng.integers(0, min(3, room - 4) + 1))
                mlen = room - lit + int(rng.choice([0, 0, 1, 2]))
                sequences.append((rng.bytes(lit), int(rng.integers(1, op + lit + 1)), mlen))
                op += lit + mlen
            if rng.random() > 0.03:  # else the block ends on a match: truncated
                n = max(out_len - op, 0) + int(rng.choice([0] * 14 + [-1, 1]))
                sequences.append((rng.bytes(max(n, 0)), None, 0))
            return sequences
        lit = int(rng.choice([0, 0, 0, 0, 1, 2, 3, 7, 13, 14, 15, 16, 20]))
        lit = max(lit, 1) if op == 0 else lit
        mlen = max(
            4, min(int(rng.choice([4, 5, 7, 8, 12, 16, 17, 18, 19, 20, 24, 33])), room - lit)
        )
        window = op + lit
        picks = [1, 2, 3, 4, 5, 8, 16, lit + mlen - 1, lit + mlen, lit + mlen + 1, mlen - 1, mlen,
                 window, window - 1]  # fmt: skip
        offset = min(max(int(rng.choice(picks)), 1), window)
        roll = rng.random()
        offset = window + 1 if roll < 0.004 else 0 if roll < 0.006 else offset
        sequences.append((rng.bytes(lit), offset, mlen))
        op += lit + mlen


def edge_chunks(rng, block_bytes, n):
    """n one-block bitshuffle-LZ4 chunks of crafted blocks, with their reference decodes
    (the block's bytes before the bit transpose; None: the chunk must be refused)."""
    chunks, decoded = [], []
    for _ in range(n):
        sequences = edge_sequences(rng, block_bytes)
        body = lz4_block(sequences)
        chunks.append(struct.pack(">QII", block_bytes, block_bytes, len(body)) + body)
        decoded.append(lz4_reference(sequences, block_bytes))
    return chunks, decoded
