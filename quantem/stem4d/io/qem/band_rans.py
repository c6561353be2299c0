"""The ``.qem`` 2.0 block codec in numba: per-pixel rANS symbols in row bands
(``docs/qem-format.md`` §19).

A 2.0 block is one row band of ``block_frames`` frames. Every pixel is one symbol of its
band quad's class context (value ``v < 255`` with a slot is symbol ``v``, anything else is
ESCAPE 255 with the value in the escape array); the block's 128 rANS states are
interleaved per frame: pixel ``j`` of a frame's band is coded on state ``j mod 128`` in
round ``j div 128``, and renormalisation reads happen in symbol order. The decoder here
is the reference the CUDA kernel is compared with bit for bit; it checks a round the way
the kernel does (the words of the whole round first, then its escapes), so both return
the same status for the same damage.

Status codes are those of :mod:`quantem.stem4d.io.qem.rans` (same messages).
"""

from __future__ import annotations

import numba
import numpy as np

from quantem.stem4d.io.qem.format import (
    BAND_STATES,
    BAND_STATES_SIZE,
    ESCAPE_SYMBOL,
    MODE_RANS,
    MODE_RAW,
    MODE_ZERO,
    PROB_BITS,
    RANS_L,
)
from quantem.stem4d.io.qem.rans import finish_words
from quantem.stem4d.io.qem.tables import (
    ERR_ESCAPE_VALUE,
    ERR_ESCAPES_EXHAUSTED,
    ERR_FINAL_STATE,
    ERR_MODE,
    ERR_PADDING,
    ERR_STATE_RANGE,
    ERR_UNUSED_ESCAPES,
    ERR_UNUSED_WORDS,
    ERR_WORDS_EXHAUSTED,
    OK,
)

_MASK_PROB = (1 << PROB_BITS) - 1
_u = np.uint64


@numba.njit(cache=True, nogil=True)
def _read_uint(buffer, position, nbytes):
    value = np.int64(0)
    for k in range(nbytes):
        value |= np.int64(buffer[position + k]) << (8 * k)
    return value


@numba.njit(cache=True, nogil=True)
def _decode_block(
    buffer,
    start,
    n_frames,
    n_words,
    n_escapes,
    itemsize,
    band_pixels,
    quad_class,
    quad0,
    coded,
    table,
    out,
    row0,
    pixel0,
):
    x = np.empty(BAND_STATES, dtype=np.int64)
    for i in range(BAND_STATES):
        x[i] = _read_uint(buffer, start + 4 * i, 4)
        if x[i] < RANS_L:
            return ERR_STATE_RANGE
    position = start + BAND_STATES_SIZE
    words_end = position + 2 * n_words
    escape_position = start + ((BAND_STATES_SIZE + 2 * n_words + 3) // 4) * 4
    for k in range(words_end, escape_position):
        if buffer[k] != 0:
            return ERR_PADDING
    escape_end = escape_position + n_escapes * itemsize
    symbols = np.empty(BAND_STATES, dtype=np.int64)
    contexts = np.empty(BAND_STATES, dtype=np.int64)
    for t in range(n_frames):
        frame = out[row0 + t]
        for j0 in range(0, band_pixels, BAND_STATES):
            count = min(BAND_STATES, band_pixels - j0)
            escapes = 0
            # the round's symbols and word reads (symbol order)
            for i in range(count):
                j = j0 + i
                c = np.int64(quad_class[_u(quad0 + (j >> 2))])
                state = x[i]
                entry = np.int64(table[_u(c), _u(state & _MASK_PROB)])
                state = (((entry >> 8) & 0xFFF) + 1) * (state >> PROB_BITS) + (entry >> 20)
                if state < RANS_L:
                    if position >= words_end:
                        return ERR_WORDS_EXHAUSTED
                    word = np.int64(buffer[position]) | (np.int64(buffer[position + 1]) << 8)
                    state = (state << 16) | word
                    position += 2
                x[i] = state
                s = entry & 0xFF
                symbols[i] = s
                contexts[i] = c
                escapes += np.int64(s == ESCAPE_SYMBOL)
            if escape_position + escapes * itemsize > escape_end:
                return ERR_ESCAPES_EXHAUSTED
            for i in range(count):
                s = symbols[i]
                if s == ESCAPE_SYMBOL:
                    value = _read_uint(buffer, escape_position, itemsize)
                    escape_position += itemsize
                    if value < ESCAPE_SYMBOL and coded[_u(contexts[i]), _u(value)]:
                        return ERR_ESCAPE_VALUE
                    s = value
                frame[_u(pixel0 + j0 + i)] = s
    if escape_position != escape_end:
        return ERR_UNUSED_ESCAPES
    if position != words_end:
        return ERR_UNUSED_WORDS
    for i in range(BAND_STATES):
        if x[i] != RANS_L:
            return ERR_FINAL_STATE
    return OK


@numba.njit(cache=True, nogil=True)
def decode_blocks(
    buffer,
    offsets,
    modes,
    n_frames,
    n_words,
    n_escapes,
    rows,
    bands,
    band_first_row,
    band_n_rows,
    band_quad0,
    det_c,
    itemsize,
    quad_class,
    coded,
    table,
    out,
    status,
    first,
    stop,
):
    """Decode 2.0 entries ``k`` in ``[first, stop)`` into rows ``out[rows[k]:]`` (2D
    (frames, P) of the stored dtype), the band's pixels only; ``status[k]`` gets 0 or an
    error code."""
    for k in range(first, stop):
        band = bands[k]
        pixel0 = band_first_row[band] * det_c
        band_pixels = band_n_rows[band] * det_c
        mode = modes[k]
        if mode == MODE_RANS:
            status[k] = _decode_block(
                buffer,
                offsets[k],
                n_frames[k],
                n_words[k],
                n_escapes[k],
                itemsize,
                band_pixels,
                quad_class,
                band_quad0[band],
                coded,
                table,
                out,
                rows[k],
                pixel0,
            )
        elif mode == MODE_RAW:
            position = offsets[k]
            for t in range(n_frames[k]):
                frame = out[rows[k] + t]
                for j in range(band_pixels):
                    frame[pixel0 + j] = _read_uint(buffer, position, itemsize)
                    position += itemsize
            status[k] = OK
        elif mode == MODE_ZERO:
            for t in range(n_frames[k]):
                out[rows[k] + t, pixel0 : pixel0 + band_pixels] = 0
            status[k] = OK
        else:
            status[k] = ERR_MODE


@numba.njit(cache=True, nogil=True)
def _encode_raw(frames, pixel0, band_pixels, itemsize, scratch):
    position = 0
    for t in range(frames.shape[0]):
        for j in range(band_pixels):
            value = np.int64(frames[t, pixel0 + j])
            for k in range(itemsize):
                scratch[position + k] = (value >> (8 * k)) & 0xFF
            position += itemsize
    return MODE_RAW, position, 0, 0


@numba.njit(cache=True, nogil=True)
def _encode_block(frames, pixel0, band_pixels, quad_class, quad0, freq, cum, itemsize, scratch):
    """One band of ``frames`` (n, P) into ``scratch``; returns (mode, length, n_words,
    n_escapes)."""
    n = frames.shape[0]
    raw_length = n * band_pixels * itemsize
    n_escapes = 0
    nonzero = False
    for t in range(n):
        for j in range(band_pixels):
            value = np.int64(frames[t, pixel0 + j])
            nonzero |= value != 0
            c = quad_class[quad0 + (j >> 2)]
            if value >= ESCAPE_SYMBOL or freq[c, value] == 0:
                n_escapes += 1
    if not nonzero:
        return MODE_ZERO, 0, 0, 0
    escapes_at = ((BAND_STATES_SIZE + 3) // 4) * 4  # placeholder, fixed after the words
    max_words = (raw_length - BAND_STATES_SIZE - n_escapes * itemsize) // 2
    if max_words <= 0:
        return _encode_raw(frames, pixel0, band_pixels, itemsize, scratch)
    x = np.full(BAND_STATES, RANS_L, dtype=np.int64)
    n_words = 0
    for t in range(n - 1, -1, -1):
        for j in range(band_pixels - 1, -1, -1):
            i = j & (BAND_STATES - 1)
            value = np.int64(frames[t, pixel0 + j])
            c = np.int64(quad_class[quad0 + (j >> 2)])
            s = value if value < ESCAPE_SYMBOL and freq[c, value] > 0 else ESCAPE_SYMBOL
            f = np.int64(freq[c, s])
            state = x[i]
            if state >= (f << 20):
                if n_words >= max_words:
                    return _encode_raw(frames, pixel0, band_pixels, itemsize, scratch)
                position = BAND_STATES_SIZE + 2 * n_words
                scratch[position] = state & 0xFF
                scratch[position + 1] = (state >> 8) & 0xFF
                n_words += 1
                state >>= 16
            x[i] = ((state // f) << PROB_BITS) + state % f + cum[c, s]
    escapes_at = finish_words(scratch, x, BAND_STATES_SIZE, n_words)
    e = escapes_at
    for t in range(n):
        for j in range(band_pixels):
            value = np.int64(frames[t, pixel0 + j])
            c = quad_class[quad0 + (j >> 2)]
            if value >= ESCAPE_SYMBOL or freq[c, value] == 0:
                for k in range(itemsize):
                    scratch[e + k] = (value >> (8 * k)) & 0xFF
                e += itemsize
    length = e
    if length >= raw_length:
        return _encode_raw(frames, pixel0, band_pixels, itemsize, scratch)
    return MODE_RANS, length, n_words, n_escapes


@numba.njit(cache=True, parallel=True, nogil=True)
def encode_blocks(
    frames,
    block_frames,
    band_first_row,
    band_n_rows,
    band_quad0,
    det_c,
    quad_class,
    freq,
    cum,
    itemsize,
    scratch,
    fields,
):
    """Encode the frame blocks of ``frames`` (n, P), every band of each: entry
    ``b * n_bands + band`` into scratch row of the same index; ``fields`` int64
    [entries, 4] gets ``(mode, length, n_words, n_escapes)``."""
    n_total = frames.shape[0]
    bands = band_first_row.size
    for e in numba.prange(fields.shape[0]):
        b = e // bands
        band = e % bands
        start = b * block_frames
        stop = min(start + block_frames, n_total)
        mode, length, n_words, n_escapes = _encode_block(
            frames[start:stop],
            band_first_row[band] * det_c,
            band_n_rows[band] * det_c,
            quad_class,
            band_quad0[band],
            freq,
            cum,
            itemsize,
            scratch[e],
        )
        fields[e, 0] = mode
        fields[e, 1] = length
        fields[e, 2] = n_words
        fields[e, 3] = n_escapes
