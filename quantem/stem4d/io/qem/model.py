"""The entropy model of a ``.qem`` file: pixel-group classes and 12-bit frequencies.

Implements the encoder policy of ``docs/qem-format.md`` §16 (informative there;
decoders only read the resulting MODEL section, §7). Every choice is made with integer
arithmetic or with stable, deterministic orderings so the same sample gives the same
model, hence byte-identical files.
"""

from __future__ import annotations

import itertools
from typing import Final

import numpy as np

from quantem.stem4d.io.qem.format import (
    ALPHABET,
    ESCAPE_MIN_VALUE,
    ESCAPE_SYMBOL,
    GROUP_PIXELS,
    MAX_CLASSES,
    PROB_SCALE,
    QUAD_PIXELS,
    Model,
    band_geometry,
    band_quads,
    n_groups,
)

#: Number of rank quantiles among which class boundaries are chosen.
RANK_BINS: Final = 64
DEFAULT_MODEL_FRAMES: Final = 512
DEFAULT_CLASSES: Final = MAX_CLASSES


def sample_frame_indices(n_frames: int, model_frames: int = DEFAULT_MODEL_FRAMES) -> np.ndarray:
    """Indices of the model sample: ``floor(i * n_frames / m)``, ``i < m`` (§16)."""
    m = max(1, min(int(model_frames), n_frames))
    return (np.arange(m, dtype=np.int64) * n_frames) // m


def group_masks_and_symbols(
    frames: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Masks per (frame, group) and the value symbols of nonzero pixels with their group.

    Returns ``(masks uint8 [m, G], value_symbols uint8 [N], value_groups int64 [N])``.
    """
    m = frames.shape[0]
    frame_pixels = int(np.prod(frames.shape[1:]))
    groups = n_groups(frame_pixels)
    flat = np.zeros((m, groups * GROUP_PIXELS), dtype=frames.dtype)
    flat[:, :frame_pixels] = frames.reshape(m, frame_pixels)
    nonzero = flat != 0
    masks = np.packbits(nonzero.reshape(m, groups, GROUP_PIXELS), axis=2, bitorder="little")
    masks = masks.reshape(m, groups)
    values = flat[nonzero].astype(np.int64)
    positions = np.flatnonzero(nonzero.reshape(-1)) % (groups * GROUP_PIXELS)
    symbols = np.where(values >= ESCAPE_MIN_VALUE, ESCAPE_SYMBOL, values - 1).astype(np.uint8)
    return masks, symbols, positions // GROUP_PIXELS


def _code_length(hist: np.ndarray) -> float:
    """Empirical entropy (bits) of a histogram, summed over its rows."""
    hist = hist.astype(np.float64)
    totals = hist.sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(hist > 0, hist * np.log2(hist), 0.0).sum(axis=-1)
        whole = np.where(totals > 0, totals * np.log2(totals), 0.0)
    return float((whole - terms).sum())


def _greedy_bin_classes(cumulative: np.ndarray, n_classes: int) -> np.ndarray:
    """The class of each of ``n_bins`` ordered bins: at most ``n_classes`` runs of
    adjacent bins, cut greedily where a cut lowers the summed code length most.
    ``cumulative[k]`` is the histogram of bins ``< k`` (``n_bins + 1`` rows)."""
    n_bins = cumulative.shape[0] - 1

    def cost(cuts: list[int]) -> float:
        edges = [0, *cuts, n_bins]
        return sum(
            _code_length(cumulative[b] - cumulative[a]) for a, b in itertools.pairwise(edges)
        )

    cuts: list[int] = []
    best = cost(cuts)
    for _ in range(n_classes - 1):
        choice = None
        for candidate in range(1, n_bins):
            if candidate in cuts:
                continue
            trial = cost(sorted([*cuts, candidate]))
            if trial < best - 1e-6 * max(1.0, best):
                best, choice = trial, candidate
        if choice is None:
            break
        cuts = sorted([*cuts, choice])
    return np.searchsorted(np.array(cuts, dtype=np.int64), np.arange(n_bins), side="right")


def choose_group_classes(
    frames: np.ndarray,
    n_classes: int = DEFAULT_CLASSES,
    coded: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """Class of each pixel group from the sample (§16): contiguous ranges of the groups
    ranked by total count, cut greedily to minimise the empirical code length."""
    if not 1 <= n_classes <= MAX_CLASSES:
        raise ValueError(f"n_classes must be 1..{MAX_CLASSES}, got {n_classes}")
    if coded is None:
        coded = group_masks_and_symbols(frames)
    masks, symbols, value_groups = coded
    groups = masks.shape[1]
    m = frames.shape[0]
    frame_pixels = int(np.prod(frames.shape[1:]))
    padded = np.zeros((m, groups * GROUP_PIXELS), dtype=np.int64)
    padded[:, :frame_pixels] = frames.reshape(m, frame_pixels)
    totals = padded.reshape(m, groups, GROUP_PIXELS).sum(axis=(0, 2))
    order = np.lexsort((np.arange(groups), totals))
    rank = np.empty(groups, dtype=np.int64)
    rank[order] = np.arange(groups)
    n_bins = min(RANK_BINS, groups)
    group_bin = rank * n_bins // groups
    mask_hist = np.bincount(
        (group_bin[None, :] * ALPHABET + masks).reshape(-1), minlength=n_bins * ALPHABET
    ).reshape(n_bins, ALPHABET)
    value_hist = np.bincount(
        group_bin[value_groups] * ALPHABET + symbols, minlength=n_bins * ALPHABET
    ).reshape(n_bins, ALPHABET)
    hist = np.stack([mask_hist, value_hist], axis=1)  # [bin, 2, 256]
    cumulative = np.concatenate([np.zeros((1, 2, ALPHABET), np.int64), np.cumsum(hist, axis=0)])

    bin_class = _greedy_bin_classes(cumulative, n_classes)
    return bin_class[group_bin].astype(np.uint8)


def normalise_frequencies(counts: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """12-bit frequencies from counts (§16): every allowed symbol gets at least 1, the
    rest proportionally, the remainder by largest fractional part (ties: lower symbol)."""
    counts = np.where(allowed, counts.astype(np.int64), 0)
    n_allowed = int(allowed.sum())
    total = int(counts.sum())
    freq = np.zeros(ALPHABET, dtype=np.int64)
    if total == 0:
        base, extra = divmod(PROB_SCALE, n_allowed)
        symbols = np.flatnonzero(allowed)
        freq[symbols] = base
        freq[symbols[:extra]] += 1
        return freq.astype(np.uint16)
    spread = PROB_SCALE - n_allowed
    scaled = counts * spread
    freq[allowed] = 1 + scaled[allowed] // total
    remainder = PROB_SCALE - int(freq.sum())
    fraction = np.where(allowed, scaled % total, -1)
    order = np.lexsort((np.arange(ALPHABET), -fraction))
    freq[order[:remainder]] += 1
    assert int(freq.sum()) == PROB_SCALE
    return freq.astype(np.uint16)


def build_model(
    frames: np.ndarray, stored_itemsize: int, n_classes: int = DEFAULT_CLASSES
) -> Model:
    """The MODEL (§7) for sample ``frames`` (m, det_r, det_c) of the stored dtype."""
    masks, symbols, value_groups = group_masks_and_symbols(frames)
    group_class = choose_group_classes(frames, n_classes, (masks, symbols, value_groups))
    classes_used = int(group_class.max()) + 1 if group_class.size else 1
    mask_allowed = np.ones(ALPHABET, dtype=bool)
    value_allowed = np.ones(ALPHABET, dtype=bool)
    value_allowed[ESCAPE_SYMBOL] = stored_itemsize > 1
    freq = np.zeros((2 * classes_used, ALPHABET), dtype=np.uint16)
    for k in range(classes_used):
        in_class = group_class == k
        mask_counts = np.bincount(masks[:, in_class].reshape(-1), minlength=ALPHABET)
        value_counts = np.bincount(symbols[in_class[value_groups]], minlength=ALPHABET)
        freq[2 * k] = normalise_frequencies(mask_counts, mask_allowed)
        freq[2 * k + 1] = normalise_frequencies(value_counts, value_allowed)
    return Model(n_classes=classes_used, group_class=group_class, freq=freq)


def quad_of_pixel(det_r: int, det_c: int, band_rows: int) -> np.ndarray:
    """The 2.0 class-map quad of every pixel of a frame (int64 [P], §19.3)."""
    first, rows = band_geometry(det_r, det_c, band_rows)
    quad0 = band_quads(det_r, det_c, band_rows)
    out = np.empty(det_r * det_c, dtype=np.int64)
    for k in range(first.size):
        a = int(first[k]) * det_c
        n = int(rows[k]) * det_c
        out[a : a + n] = quad0[k] + np.arange(n, dtype=np.int64) // QUAD_PIXELS
    return out


def build_band_model(
    frames: np.ndarray, stored_itemsize: int, band_rows: int, n_classes: int = DEFAULT_CLASSES
) -> Model:
    """The 2.0 MODEL (§19.3) for sample ``frames`` (m, det_r, det_c) of the stored dtype.

    Quads are ranked by their total count over the sample (ties by index) and the ranking
    cut into up to ``n_classes`` contiguous ranges, among 64 rank quantiles, greedily
    minimising the empirical entropy of the direct symbols. Per class, only the symbols
    the sample uses get slots (every other value below 255 is escaped), and ESCAPE always
    gets at least one.
    """
    if not 1 <= n_classes <= MAX_CLASSES:
        raise ValueError(f"n_classes must be 1..{MAX_CLASSES}, got {n_classes}")
    m, det_r, det_c = frames.shape
    quad = quad_of_pixel(det_r, det_c, band_rows)
    n_quads = int(quad.max()) + 1
    flat = frames.reshape(m, -1)
    symbols = np.minimum(flat, ESCAPE_SYMBOL).astype(np.int64)
    totals = np.bincount(quad, weights=flat.astype(np.float64).sum(axis=0), minlength=n_quads)
    order = np.lexsort((np.arange(n_quads), totals))
    rank = np.empty(n_quads, dtype=np.int64)
    rank[order] = np.arange(n_quads)
    n_bins = min(RANK_BINS, n_quads)
    quad_bin = rank * n_bins // n_quads
    pixel_bin = quad_bin[quad]
    hist = np.bincount(
        (pixel_bin[None, :] * ALPHABET + symbols).reshape(-1), minlength=n_bins * ALPHABET
    ).reshape(n_bins, ALPHABET)
    cumulative = np.concatenate([np.zeros((1, ALPHABET), np.int64), np.cumsum(hist, axis=0)])

    bin_class = _greedy_bin_classes(cumulative, n_classes)
    quad_class = bin_class[quad_bin].astype(np.uint8)
    classes_used = int(quad_class.max()) + 1
    pixel_class = quad_class[quad].astype(np.int64)
    freq = np.zeros((classes_used, ALPHABET), dtype=np.uint16)
    for k in range(classes_used):
        counts = np.bincount(symbols[:, pixel_class == k].reshape(-1), minlength=ALPHABET)
        allowed = counts > 0
        allowed[ESCAPE_SYMBOL] = True
        freq[k] = normalise_frequencies(counts, allowed)
    return Model(n_classes=classes_used, group_class=quad_class, freq=freq, contexts_per_class=1)
