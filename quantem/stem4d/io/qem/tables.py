"""The parts of the ``.qem`` codec that opening a file needs, in numpy only: block status
codes and their messages, the packed decode table of format 1.0 (§11) and the coded-symbol
table of format 2.0 (§19.5).

Kept apart from the numba codecs (:mod:`quantem.stem4d.io.qem.rans`, :mod:`quantem.stem4d.io.qem.band_rans`)
so that opening a file, and the CUDA loader, do not import numba (0.3-0.7 s, on a fresh
process's first load).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from quantem.stem4d.io.qem.format import ESCAPE_SYMBOL, PROB_BITS

OK: Final = 0
ERR_STATE_RANGE: Final = 1
ERR_WORDS_EXHAUSTED: Final = 2
ERR_MASK_PADDING: Final = 3
ERR_NONZERO_COUNT: Final = 4
ERR_ESCAPES_EXHAUSTED: Final = 5
ERR_ESCAPE_VALUE: Final = 6
ERR_UNUSED_ESCAPES: Final = 7
ERR_UNUSED_WORDS: Final = 8
ERR_FINAL_STATE: Final = 9
ERR_PADDING: Final = 10
ERR_MODE: Final = 11

STATUS_MESSAGES: Final = {
    ERR_STATE_RANGE: "initial lane state out of [2^16, 2^32)",
    ERR_WORDS_EXHAUSTED: "word stream exhausted",
    ERR_MASK_PADDING: "mask padding bit set",
    ERR_NONZERO_COUNT: "nonzero count differs from the block index",
    ERR_ESCAPES_EXHAUSTED: "escape array exhausted",
    ERR_ESCAPE_VALUE: "escaped value below 256",
    ERR_UNUSED_ESCAPES: "unused escapes",
    ERR_UNUSED_WORDS: "unused words",
    ERR_FINAL_STATE: "final lane state is not 2^16",
    ERR_PADDING: "padding between words and escapes is not zero",
    ERR_MODE: "unknown block mode",
}


def pack_decode_table(slot_symbol: np.ndarray, freq: np.ndarray, cum: np.ndarray) -> np.ndarray:
    """One uint32 per (context, slot): ``symbol | (freq - 1) << 8 | (slot - cum) << 20``.

    A single load per decoded symbol instead of three dependent ones (symbol, then its
    frequency and cumulative frequency).
    """
    contexts = slot_symbol.shape[0]
    slots = np.arange(1 << PROB_BITS, dtype=np.int64)
    table = np.empty((contexts, 1 << PROB_BITS), dtype=np.uint32)
    for context in range(contexts):
        symbol = slot_symbol[context].astype(np.int64)
        f = freq[context].astype(np.int64)[symbol]
        bias = slots - cum[context].astype(np.int64)[symbol]
        table[context] = symbol | ((f - 1) << 8) | (bias << 20)
    return table


def coded_symbols(freq: np.ndarray) -> np.ndarray:
    """uint8 [K, 256]: 1 where a value below 255 has a slot (is coded directly)."""
    coded = (np.asarray(freq) > 0).astype(np.uint8)
    coded[:, ESCAPE_SYMBOL] = 0
    return coded


__all__ = [
    "OK",
    "STATUS_MESSAGES",
    "coded_symbols",
    "pack_decode_table",
]
