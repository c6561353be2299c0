"""The ``.qem`` block codec in numba: 32-lane interleaved rANS (``docs/qem-format.md``
§10-§12).

Encoding and decoding run in parallel over blocks (``prange``); inside a block the
symbols are coded in the exact order of §12 (phase A masks, then phase B values,
symbol ``i`` of a phase on lane ``i mod 32``), so the words are emitted in the
decoder's read order. All arithmetic is in int64 so no unsigned/signed mixing can
silently turn into floating point.

Decode status codes (one per block) name what is wrong; :data:`~quantem.stem4d.io.qem.tables.STATUS_MESSAGES`
turns them into the error text.
"""

from __future__ import annotations

import numba
import numpy as np

from quantem.stem4d.io.qem.format import (
    ESCAPE_MIN_VALUE,
    ESCAPE_SYMBOL,
    LANE_STATES_SIZE,
    LANES,
    MODE_RANS,
    MODE_RAW,
    MODE_ZERO,
    PROB_BITS,
    RANS_L,
)

# The status codes live in quantem.stem4d.io.qem.tables (numpy only: the CUDA loader and the reader
# use them without importing numba).
from quantem.stem4d.io.qem.tables import (
    ERR_ESCAPE_VALUE,
    ERR_ESCAPES_EXHAUSTED,
    ERR_FINAL_STATE,
    ERR_MASK_PADDING,
    ERR_MODE,
    ERR_NONZERO_COUNT,
    ERR_PADDING,
    ERR_STATE_RANGE,
    ERR_UNUSED_ESCAPES,
    ERR_UNUSED_WORDS,
    ERR_WORDS_EXHAUSTED,
    OK,
)

_MASK_PROB = (1 << PROB_BITS) - 1
_u = np.uint64  # index conversion only; arithmetic stays int64
_LOWBIT = np.array([(i & -i).bit_length() - 1 if i else 0 for i in range(256)], dtype=np.int64)


@numba.njit(cache=True, nogil=True)
def _read_uint(buffer, position, nbytes):
    value = np.int64(0)
    for k in range(nbytes):
        value |= np.int64(buffer[position + k]) << (8 * k)
    return value


@numba.njit(cache=True, nogil=True)
def _decode_symbol(x, lane, table, context, words16, position, safe_position, words_end):
    """Decode one symbol on ``x[lane]`` with the packed ``table``; branch-free
    renormalisation (a word is always loaded, from a safe address when none is left).

    Returns ``(symbol, new position)``; a position past ``words_end`` means the word
    stream was exhausted (checked by the caller at the end of the block).
    """
    # unsigned indices: numba then skips its negative-index wraparound (~20 % faster)
    state = x[_u(lane)]
    entry = np.int64(table[_u(context), _u(state & _MASK_PROB)])
    state = (((entry >> 8) & 0xFFF) + 1) * (state >> PROB_BITS) + (entry >> 20)
    need = np.int64(state < RANS_L)
    at = position if position < words_end else safe_position
    word = np.int64(words16[_u(at >> 1)])
    shift = need << 4
    x[_u(lane)] = (state << shift) | (word & -need)
    return entry & 0xFF, position + (need << 1)


@numba.njit(cache=True, nogil=True)
def _decode_rans_block(
    buffer,
    buffer16,
    start,
    n_frames,
    n_words,
    n_nonzero,
    n_escapes,
    itemsize,
    frame_pixels,
    mask_context,
    table,
    lowbit,
    out,
    row0,
):
    groups = mask_context.size
    words16 = buffer16
    x = np.empty(LANES, dtype=np.int64)
    for lane in range(LANES):
        x[lane] = _read_uint(buffer, start + 4 * lane, 4)
        if x[lane] < RANS_L:
            return ERR_STATE_RANGE
    position = start + LANE_STATES_SIZE
    words_end = position + 2 * n_words
    safe_position = start  # always 128 readable bytes at a RANS block's start
    tail_bits = frame_pixels % 8
    masks = np.empty(n_frames * groups, dtype=np.uint8)
    a = 0
    # phase A: group masks
    for _t in range(n_frames):
        for j in range(groups):
            s, position = _decode_symbol(
                x, a & 31, table, mask_context[_u(j)], words16, position, safe_position, words_end
            )
            masks[_u(a)] = s
            a += 1
        if tail_bits and (masks[a - 1] >> tail_bits) != 0:
            return ERR_MASK_PADDING
    if position > words_end:
        return ERR_WORDS_EXHAUSTED
    escape_position = start + ((LANE_STATES_SIZE + 2 * n_words + 3) // 4) * 4
    for k in range(words_end, escape_position):
        if buffer[k] != 0:
            return ERR_PADDING
    escape_end = escape_position + n_escapes * itemsize
    # phase B: values of nonzero pixels, visiting only the set bits of each mask
    v = 0
    a = 0
    for t in range(n_frames):
        frame = out[row0 + t]
        frame[:] = 0
        for j in range(groups):
            m = np.int64(masks[_u(a)])
            a += 1
            if m == 0:
                continue
            context = mask_context[_u(j)] + 1
            base = 8 * j
            while m:
                i = lowbit[_u(m)]
                m &= m - 1
                s, position = _decode_symbol(
                    x, v & 31, table, context, words16, position, safe_position, words_end
                )
                v += 1
                if s != ESCAPE_SYMBOL:
                    frame[_u(base + i)] = s + 1
                else:
                    if escape_position >= escape_end:
                        return ERR_ESCAPES_EXHAUSTED
                    value = _read_uint(buffer, escape_position, itemsize)
                    escape_position += itemsize
                    if value < ESCAPE_MIN_VALUE:
                        return ERR_ESCAPE_VALUE
                    frame[base + i] = value
    if v != n_nonzero:  # phase B decoded one value per set mask bit
        return ERR_NONZERO_COUNT
    if position > words_end:
        return ERR_WORDS_EXHAUSTED
    if escape_position != escape_end:
        return ERR_UNUSED_ESCAPES
    if position != words_end:
        return ERR_UNUSED_WORDS
    for lane in range(LANES):
        if x[lane] != RANS_L:
            return ERR_FINAL_STATE
    return OK


@numba.njit(cache=True, nogil=True)
def _decode_raw_block(buffer, start, n_frames, itemsize, frame_pixels, out, row0):
    position = start
    for t in range(n_frames):
        frame = out[row0 + t]
        for q in range(frame_pixels):
            frame[q] = _read_uint(buffer, position, itemsize)
            position += itemsize
    return OK


@numba.njit(cache=True, nogil=True)
def decode_blocks(
    buffer,
    buffer16,
    offsets,
    modes,
    n_frames,
    n_words,
    n_nonzero,
    n_escapes,
    rows,
    itemsize,
    frame_pixels,
    group_class,
    table,
    out,
    status,
    first,
    stop,
):
    """Decode blocks ``k`` in ``[first, stop)`` (index fields given as arrays) into
    ``out[rows[k]:]``.

    ``buffer`` is the whole file (uint8), ``out`` a 2D (frames, P) array of the stored
    dtype; ``status[k]`` receives 0 or an error code. Releases the GIL, so callers run
    disjoint ranges on several threads (a thread pool pulls ranges as threads free up,
    which copes with busy machines better than a static split).
    """
    lowbit = _LOWBIT
    mask_context = 2 * group_class.astype(np.int64)
    for k in range(first, stop):
        mode = modes[k]
        if mode == MODE_RANS:
            status[k] = _decode_rans_block(
                buffer,
                buffer16,
                offsets[k],
                n_frames[k],
                n_words[k],
                n_nonzero[k],
                n_escapes[k],
                itemsize,
                frame_pixels,
                mask_context,
                table,
                lowbit,
                out,
                rows[k],
            )
        elif mode == MODE_RAW:
            status[k] = _decode_raw_block(
                buffer, offsets[k], n_frames[k], itemsize, frame_pixels, out, rows[k]
            )
        elif mode == MODE_ZERO:
            for t in range(n_frames[k]):
                out[rows[k] + t, :] = 0
            status[k] = OK
        else:
            status[k] = ERR_MODE


@numba.njit(cache=True, nogil=True)
def finish_words(scratch, x, states_size, n_words):
    """Finish an encoded entry in ``scratch``: reverse its ``n_words`` 2-byte words (written
    after the ``states_size`` bytes of states, last symbol first) into decoder read order,
    write the final states ``x`` (4 bytes each, little-endian) in front, and zero the
    padding to the next multiple of 4 bytes. Returns where the escapes start (shared by
    formats 1.0 and 2.0)."""
    lo = 0
    hi = n_words - 1
    while lo < hi:
        p = states_size + 2 * lo
        r = states_size + 2 * hi
        b0 = scratch[p]
        b1 = scratch[p + 1]
        scratch[p] = scratch[r]
        scratch[p + 1] = scratch[r + 1]
        scratch[r] = b0
        scratch[r + 1] = b1
        lo += 1
        hi -= 1
    for i in range(x.shape[0]):
        for k in range(4):
            scratch[4 * i + k] = (x[i] >> (8 * k)) & 0xFF
    position = states_size + 2 * n_words
    escapes_at = ((position + 3) // 4) * 4
    for k in range(position, escapes_at):
        scratch[k] = 0
    return escapes_at


@numba.njit(cache=True, nogil=True)
def _encode_block(frames, group_class, freq, cum, itemsize, scratch):
    """Encode ``frames`` (n, P) into ``scratch`` as a RANS block (§10).

    Returns ``(mode, length, n_words, n_nonzero, n_escapes)``; mode is ZERO when the
    block is all zero and RAW when the RANS bytes would not be smaller than the raw
    counts (``scratch`` then holds the raw bytes).
    """
    n_frames, frame_pixels = frames.shape
    groups = group_class.size
    raw_length = n_frames * frame_pixels * itemsize
    n_masks = n_frames * groups
    masks = np.zeros(n_masks, dtype=np.uint8)
    n_nonzero = 0
    n_escapes = 0
    # branch-free passes: about half the pixels are nonzero at typical doses, so a branch
    # on "nonzero" would mispredict constantly
    for t in range(n_frames):
        row = frames[t]
        base = t * groups
        for j in range(groups):
            bits = 0
            for i in range(min(8, frame_pixels - 8 * j)):
                value = np.int64(row[_u(8 * j + i)])
                nonzero = np.int64(value != 0)
                bits |= nonzero << i
                n_nonzero += nonzero
                n_escapes += np.int64(value >= ESCAPE_MIN_VALUE)
            masks[_u(base + j)] = bits
    if n_nonzero == 0:
        return MODE_ZERO, 0, 0, 0, 0
    # one spare slot: every pixel is written at the cursor, which advances only when nonzero
    symbols = np.empty(n_nonzero + 1, dtype=np.uint8)
    contexts = np.empty(n_nonzero + 1, dtype=np.uint8)
    escapes = np.empty(n_escapes + 1, dtype=np.int64)
    v = 0
    e = 0
    for t in range(n_frames):
        row = frames[t]
        for q in range(frame_pixels):
            value = np.int64(row[_u(q)])
            escape = np.int64(value >= ESCAPE_MIN_VALUE)
            contexts[_u(v)] = 2 * group_class[_u(q >> 3)] + 1
            symbols[_u(v)] = ESCAPE_SYMBOL if escape else value - 1
            escapes[_u(e)] = value
            e += escape
            v += np.int64(value != 0)
    # words go to scratch[128:] in emission order and are reversed at the end; give up
    # (RAW) as soon as the RANS block could no longer be smaller than the raw bytes.
    max_words = (raw_length - LANE_STATES_SIZE - n_escapes * itemsize) // 2
    x = np.full(LANES, RANS_L, dtype=np.int64)
    n_words = 0
    # division by the frequency through a float64 reciprocal: state < 2^32 and f <= 4096,
    # so the float quotient is within 2^-32 of the true one and its floor is exact or one
    # too small (when the true quotient is an integer), which the integer check corrects
    reciprocal = 1.0 / freq.astype(np.float64)
    for v in range(n_nonzero - 1, -1, -1):
        lane = v & 31
        context = np.int64(contexts[v])
        s = np.int64(symbols[v])
        f = freq[context, s]
        state = x[lane]
        if state >= (f << 20):
            if n_words >= max_words:
                return _encode_raw(frames, itemsize, scratch)
            position = LANE_STATES_SIZE + 2 * n_words
            scratch[position] = state & 0xFF
            scratch[position + 1] = (state >> 8) & 0xFF
            n_words += 1
            state >>= 16
        quotient = np.int64(state * reciprocal[_u(context), _u(s)])
        remainder = state - quotient * f
        fix = np.int64(remainder >= f)  # the float quotient's floor may be one too small
        x[lane] = ((quotient + fix) << PROB_BITS) + remainder - fix * f + cum[context, s]
    # The symbol step above is written out again for the masks on purpose: factoring it into
    # a shared numba function (inlined or not) made conversion 15-70% slower, byte-identical.
    j = groups - 1  # a % groups, counted down
    for a in range(n_masks - 1, -1, -1):
        lane = a & 31
        context = 2 * np.int64(group_class[_u(j)])
        j = j - 1 if j > 0 else groups - 1
        s = np.int64(masks[a])
        f = freq[context, s]
        state = x[lane]
        if state >= (f << 20):
            if n_words >= max_words:
                return _encode_raw(frames, itemsize, scratch)
            position = LANE_STATES_SIZE + 2 * n_words
            scratch[position] = state & 0xFF
            scratch[position + 1] = (state >> 8) & 0xFF
            n_words += 1
            state >>= 16
        quotient = np.int64(state * reciprocal[_u(context), _u(s)])
        remainder = state - quotient * f
        fix = np.int64(remainder >= f)  # the float quotient's floor may be one too small
        x[lane] = ((quotient + fix) << PROB_BITS) + remainder - fix * f + cum[context, s]
    escape_position = finish_words(scratch, x, LANE_STATES_SIZE, n_words)
    for e in range(n_escapes):
        for k in range(itemsize):
            scratch[escape_position + e * itemsize + k] = (escapes[e] >> (8 * k)) & 0xFF
    length = escape_position + n_escapes * itemsize
    if length >= raw_length:
        return _encode_raw(frames, itemsize, scratch)
    return MODE_RANS, length, n_words, n_nonzero, n_escapes


@numba.njit(cache=True, nogil=True)
def _encode_raw(frames, itemsize, scratch):
    n_frames, frame_pixels = frames.shape
    position = 0
    for t in range(n_frames):
        for q in range(frame_pixels):
            value = np.int64(frames[t, q])
            for k in range(itemsize):
                scratch[position + k] = (value >> (8 * k)) & 0xFF
            position += itemsize
    return MODE_RAW, position, 0, 0, 0


@numba.njit(cache=True, parallel=True, nogil=True)
def encode_blocks(frames, block_frames, group_class, freq, cum, itemsize, scratch, fields):
    """Encode consecutive blocks of ``frames`` (n, P), each into its own scratch row.

    ``scratch`` is uint8 [n_blocks, block_frames * P * itemsize + 256]; ``fields`` int64
    [n_blocks, 5] receives ``(mode, length, n_words, n_nonzero, n_escapes)``.
    """
    n_total = frames.shape[0]
    n_blocks = fields.shape[0]
    for b in numba.prange(n_blocks):
        start = b * block_frames
        stop = min(start + block_frames, n_total)
        mode, length, n_words, n_nonzero, n_escapes = _encode_block(
            frames[start:stop], group_class, freq, cum, itemsize, scratch[b]
        )
        fields[b, 0] = mode
        fields[b, 1] = length
        fields[b, 2] = n_words
        fields[b, 3] = n_nonzero
        fields[b, 4] = n_escapes
