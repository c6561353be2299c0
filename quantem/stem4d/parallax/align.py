"""Sub-pixel shifts of the bright-field images against an iteratively refined reference.

Each image is normalised to its contrast ``I / mean(I) - 1`` and tapered at the scan edges
(a Tukey window; ``edge=0`` for periodic scans). Its shift against the reference is the
peak of their cross-correlation (FFT), first on the scan grid, then refined by evaluating
the correlation on a grid ``upsample`` times finer within one scan pixel of that
peak: a matrix-product DFT (the upsampled-DFT method of Guizar-Sicairos et
al., 2008), batched over images. An image ``I`` with shift ``s`` satisfies
``I(r) ~ reference(r - s)``; shifts are in scan pixels ``(row, col)``.

With ``initial_shifts`` (predicted from a defocus and rotation guess,
:func:`quantem.stem4d.parallax.fit.predicted_shifts`), the first reference is the mean of
the images moved by them and each image's peak is searched within ``max_shift`` of its own
prediction: only the residual of the prediction has to fit the search range, which for a
crystal stays under half the lattice period. Without them the first reference is the plain
mean of the images and every search is centred on zero. Each iteration aligns every image
by its shift (a Fourier phase ramp) and averages them into the next reference; the mean
shift is removed every time, which fixes the free origin of the shifts. Everything is a
deterministic sequence of FFTs, matrix products and reductions in the input's array
module (numpy or CuPy), with no atomic float accumulation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from quantem.stem4d.arrays import array_module
from quantem.stem4d.errors import ComputeError

DEFAULT_UPSAMPLE = 16
DEFAULT_ITERATIONS = 4
DEFAULT_EDGE = 0.1
DEFAULT_LOWPASS = 0.0
#: Images aligned per batch of the upsampled DFT (bounds its memory).
BATCH_IMAGES = 64


@dataclass
class Alignment:
    """Result of :func:`align`: ``shifts`` ``(n, 2)`` scan pixels (array module of the
    images), the final ``reference`` (contrast, scan grid), the iterations run, and
    ``at_bound``: how many shifts ended within half a pixel of the search range's edge
    (``max_shift`` from their centre), where the true shift may lie beyond it."""

    shifts: Any
    reference: Any
    iterations: int
    at_bound: int = 0


def tukey_window(shape: tuple[int, int], edge: float, xp: Any) -> Any:
    """Separable Tukey window; ``edge`` is the tapered fraction at each end (0: ones)."""
    if not 0 <= edge < 0.5:
        raise ComputeError(f"edge must be in [0, 0.5), got {edge}")

    def one(n: int) -> Any:
        w = xp.ones(n, dtype=xp.float64)
        m = int(edge * n)
        if m > 0:
            ramp = 0.5 - 0.5 * xp.cos(xp.pi * (xp.arange(m, dtype=xp.float64) + 0.5) / m)
            w[:m] = ramp
            w[n - m :] = ramp[::-1]
        return w

    return one(shape[0])[:, None] * one(shape[1])[None, :]


def object_frame_windows(n: int, edge: float, centres: Any, xp: Any) -> Any:
    """Tukey windows ``(len(centres), n)`` along one scan axis, each fixed to the object.

    Image ``j`` shows the object moved by ``centres[j]`` (its predicted shift); the window
    covers the object coordinates ``x = r - centres[j]`` that every image sees,
    ``[-min(centres), n - 1 - max(centres)]``, tapered over ``edge`` of that length at each
    end. All images then see the object through the same window, which a window fixed to
    the scan would not: it would move against the object by each image's shift and pull
    large shifts towards zero. With all centres zero this is :func:`tukey_window`'s axis.
    """
    first = -float(centres.min())
    last = n - 1 - float(centres.max())
    length = last - first + 1
    if length < 4:
        raise ComputeError(
            f"the predicted shifts span {n - length:.1f} of {n} scan pixels: no part of the "
            "object is seen by every bright-field image (check the defocus guess and the "
            "scan step)"
        )
    m = int(edge * length)
    x = xp.arange(n, dtype=xp.float64)[None, :] - centres[:, None]
    distance = xp.minimum(x - first, last - x)
    if m == 0:
        return xp.where(distance > -0.5, 1.0, 0.0)
    phase = xp.clip((distance + 0.5) / m, 0.0, 1.0)
    return 0.5 - 0.5 * xp.cos(xp.pi * phase)


def contrast(images: Any) -> Any:
    """``I / mean(I) - 1`` per image (images with no counts stay 0)."""
    xp = array_module(images)
    means = images.mean(axis=(1, 2), keepdims=True)
    safe = xp.where(means > 0, means, 1.0)
    return xp.where(means > 0, images / safe - 1.0, 0.0)


def separable_ramp(shape: tuple[int, int], shifts: Any, xp: Any, spacing: float = 1.0) -> Any:
    """``exp(2 pi i (q_r s_r + q_c s_c))`` per shift ``(n, 2)`` on an FFT grid ``shape``.

    Built as the outer product of a row and a column factor: ``n * (rows + cols)``
    complex exponentials instead of ``n * rows * cols``. ``spacing`` is the grid step in
    units of the shifts (``1 / upsample`` for a fine grid).
    """
    q_r = xp.fft.fftfreq(shape[0], d=spacing)
    q_c = xp.fft.fftfreq(shape[1], d=spacing)
    row = xp.exp(2j * xp.pi * shifts[:, 0, None] * q_r[None, :])
    col = xp.exp(2j * xp.pi * shifts[:, 1, None] * q_c[None, :])
    return row[:, :, None] * col[:, None, :]


def fourier_shift(spectra: Any, shifts: Any) -> Any:
    """Spectra of images moved by ``-shifts`` (so ``I(r) = ref(r - s)`` maps onto ``ref``)."""
    xp = array_module(spectra)
    return spectra * separable_ramp(spectra.shape[-2:], shifts, xp)


def _search_window(
    n_r: int, n_c: int, max_shift: float | None, centres: Any, xp: Any
) -> tuple[Any, Any, Any]:
    """Additive masks ``(n, n_r * n_c)`` (0 inside, -inf outside) of the shifts within
    ``max_shift`` pixels of each image's centre, and the unwrapped peak positions: the
    correlation is periodic, so each grid offset stands for the shift nearest the centre."""
    whole = xp.round(centres)
    r = xp.arange(n_r, dtype=xp.float64)[None, :]
    c = xp.arange(n_c, dtype=xp.float64)[None, :]
    position_r = whole[:, 0:1] + (r - whole[:, 0:1] + n_r // 2) % n_r - n_r // 2  # (n, n_r)
    position_c = whole[:, 1:2] + (c - whole[:, 1:2] + n_c // 2) % n_c - n_c // 2  # (n, n_c)
    if max_shift is None:
        return None, position_r, position_c
    d_r = position_r - centres[:, 0:1]
    d_c = position_c - centres[:, 1:2]
    inside = d_r[:, :, None] ** 2 + d_c[:, None, :] ** 2 <= max_shift * max_shift
    return xp.where(inside, 0.0, -xp.inf).reshape(len(centres), -1), position_r, position_c


def correlation_shifts(
    spectra: Any,
    reference_spectrum: Any,
    upsample: int,
    max_shift: float | None = None,
    centres: Any = None,
) -> Any:
    """Shifts ``(n, 2)`` of images (given as spectra) against one reference spectrum.

    ``max_shift`` (scan pixels) limits the search for the correlation peak to that distance
    from each image's ``centres`` row (``(n, 2)``, default zero): for a crystal, whose
    correlation peaks at every lattice vector, it must stay below half the smallest
    lattice spacing.
    """
    xp = array_module(spectra)
    n, n_r, n_c = spectra.shape
    if centres is None:
        centres = xp.zeros((n, 2), dtype=xp.float64)
    centres = xp.asarray(centres, dtype=xp.float64)
    cross = spectra * xp.conj(reference_spectrum)[None]
    coarse = xp.fft.ifft2(cross).real.reshape(n, -1)
    window, position_r, position_c = _search_window(n_r, n_c, max_shift, centres, xp)
    if window is not None:
        coarse = coarse + window
    flat = xp.argmax(coarse, axis=1)
    index = xp.arange(n)
    peak_r = position_r[index, flat // n_c]
    peak_c = position_c[index, flat % n_c]
    if upsample <= 1:
        return xp.stack([peak_r, peak_c], axis=1)
    half = int(upsample)  # +-1 scan pixel around the coarse peak (which is within 0.5 px)
    offsets = (xp.arange(2 * half + 1, dtype=xp.float64) - half) / upsample
    m = offsets.size
    # Inverse DFT on the fine grid: C(p + o) = sum_k X(k) exp(2 pi i k (p + o)). The coarse
    # peak p enters as a phase ramp on X, so the fine offsets o share one pair of DFT
    # matrices, applied as two plain matrix products over the whole batch.
    centred = cross * separable_ramp((n_r, n_c), xp.stack([peak_r, peak_c], axis=1), xp)
    e_r = xp.exp(2j * xp.pi * offsets[:, None] * xp.fft.fftfreq(n_r)[None, :])  # (m, n_r)
    e_c = xp.exp(2j * xp.pi * xp.fft.fftfreq(n_c)[:, None] * offsets[None, :])  # (n_c, m)
    rows = (e_r @ centred.transpose(1, 0, 2).reshape(n_r, n * n_c)).reshape(m, n, n_c)
    fine = (rows.transpose(1, 0, 2).reshape(n * m, n_c) @ e_c).real.reshape(n, m * m)
    best = xp.argmax(fine, axis=1)
    y = peak_r[:, None] + offsets[None, :]
    x = peak_c[:, None] + offsets[None, :]
    return xp.stack([y[index, best // m], x[index, best % m]], axis=1)


def align(
    images: Any,
    *,
    upsample: int = DEFAULT_UPSAMPLE,
    iterations: int = DEFAULT_ITERATIONS,
    edge: float = DEFAULT_EDGE,
    lowpass: float = DEFAULT_LOWPASS,
    max_shift: float | None = None,
    initial_shifts: Any = None,
) -> Alignment:
    """Shifts of every image against the iteratively refined reference.

    ``lowpass`` (scan pixels, 0 = off) is the sigma of a Gaussian smoothing applied to
    the correlation, which steadies the peak of noisy images. ``max_shift`` (scan pixels,
    None = anywhere) bounds the peak search (:func:`correlation_shifts`) around zero or,
    with ``initial_shifts`` ``(n, 2)`` (scan pixels, a prediction), around each image's
    prediction, which also seeds the first reference.
    """
    if max_shift is not None and not max_shift > 0:
        raise ComputeError(f"max_shift must be > 0 scan pixels, got {max_shift!r}")
    if int(upsample) != upsample or upsample < 1:
        raise ComputeError(f"upsample must be a positive integer, got {upsample!r}")
    if int(iterations) != iterations or iterations < 1:
        raise ComputeError(f"iterations must be a positive integer, got {iterations!r}")
    xp = array_module(images)
    n, n_r, n_c = images.shape
    window = tukey_window((n_r, n_c), edge, xp)
    if initial_shifts is None:
        centres = xp.zeros((n, 2), dtype=xp.float64)
        spectra = xp.fft.fft2(contrast(images) * window[None])
    else:
        centres = xp.asarray(initial_shifts, dtype=xp.float64)
        if centres.shape != (n, 2):
            raise ComputeError(f"initial_shifts must be ({n}, 2) scan pixels, got {centres.shape}")
        if not bool(xp.all(xp.isfinite(centres))):
            raise ComputeError("initial_shifts must be finite")
        centres = centres - centres.mean(axis=0, keepdims=True)
        images = contrast(images)
        if edge > 0:
            images = images * object_frame_windows(n_r, edge, centres[:, 0], xp)[:, :, None]
            images = images * object_frame_windows(n_c, edge, centres[:, 1], xp)[:, None, :]
        spectra = xp.fft.fft2(images)
    if lowpass > 0:
        q2 = xp.fft.fftfreq(n_r)[:, None] ** 2 + xp.fft.fftfreq(n_c)[None, :] ** 2
        # Half the filter on each side of the product: the correlation gets the whole.
        spectra = spectra * xp.exp(-(xp.pi**2) * lowpass**2 * q2)[None]
    reference = fourier_shift(spectra, centres).mean(axis=0)
    shifts = centres
    for _ in range(int(iterations)):
        parts = [
            correlation_shifts(
                spectra[a : a + BATCH_IMAGES],
                reference,
                int(upsample),
                max_shift,
                centres[a : a + BATCH_IMAGES],
            )
            for a in range(0, n, BATCH_IMAGES)
        ]
        shifts = xp.concatenate(parts, axis=0)
        shifts = shifts - shifts.mean(axis=0, keepdims=True)
        reference = fourier_shift(spectra, shifts).mean(axis=0)
    at_bound = 0
    if max_shift is not None:
        distance = xp.sqrt(((shifts - centres) ** 2).sum(axis=1))
        at_bound = int((distance > max_shift - 0.5).sum())
    return Alignment(shifts, xp.fft.ifft2(reference).real, int(iterations), at_bound)


__all__ = [
    "DEFAULT_EDGE",
    "DEFAULT_ITERATIONS",
    "DEFAULT_UPSAMPLE",
    "Alignment",
    "align",
    "contrast",
    "correlation_shifts",
    "fourier_shift",
    "object_frame_windows",
    "tukey_window",
]
