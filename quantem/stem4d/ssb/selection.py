"""Whether a fit earned its place: model selection by BIC and an independent image check.

**Model selection.** The loss is the share of the sideband energy the model leaves
unexplained, so ``RSS = loss * E`` (``E`` the prepared energy) over ``n = 2 sum_Q N(Q)``
real numbers (each pixel of each left region is one complex value), and the Bayesian
information criterion is ``n ln(RSS / n) + k ln n`` (``k`` fitted coefficients). It is
recorded, but it does not decide: on samples a few nm thick the residual is dominated by
what the thin-object model misses (propagation inside the slab), not by noise, and with
``n`` of order 1e5 every extra coefficient "explains" some of it (BIC keeps C30 of 2-10 um
where the simulated C30 is 0). :func:`select_model` therefore asks the independent image
(below): it keeps the smallest model whose phase agrees with it within
:data:`CHECK_MARGIN` of the best model's, so C21, C23 and C30 stay out unless they make
the image agree better. iDPC is a fair reference only while the probe is small against
the image's detail: when the standard fit's defocus spreads the probe over more than
:data:`IDPC_PROBE_LIMIT` focused-probe diameters (``|C10| alpha > 2 * 1.22 lambda /
alpha``), the reference is not used (:func:`idpc_is_reliable`): the selection keeps the
fewest coefficients and the check reports ``unchecked``.

**Independent check.** The loss is computed from the same sidebands the fit tuned, so it
cannot say whether the image got better. :func:`check_fit` compares the uncorrected and
fitted phases with an image the fit never saw: the iDPC phase of the same data
(:func:`idpc_reference`, the centre of mass integrated), both low-passed to the SSB band
``2 alpha``. A fitted phase that agrees worse by more than :data:`CHECK_MARGIN` is
reported (``fitted_worse``) and warned about (:class:`~quantem.stem4d.errors.SSBFitWarning`):
never handed back silently.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from quantem.stem4d.dpc import dpc
from quantem.stem4d.errors import SSBFitWarning
from quantem.stem4d.ssb.prepare import Prepared
from quantem.stem4d.ssb.reconstruct import reconstruct
from quantem.stem4d.virtual import Calibration

#: A fitted phase this much less correlated with the independent image is flagged.
CHECK_MARGIN = 0.02
#: iDPC is a reference while the defocused probe's radius stays under this many
#: focused-probe diameters (beyond, the CoM no longer follows the phase gradient).
IDPC_PROBE_LIMIT = 2.0


def idpc_is_reliable(prepared: Prepared, c10_angstrom: float) -> bool:
    """Whether the iDPC phase can judge SSB phases at this defocus (module docstring)."""
    focused = 1.22 * prepared.wavelength_a / prepared.alpha
    return abs(c10_angstrom) * prepared.alpha <= IDPC_PROBE_LIMIT * focused


def bic(prepared: Prepared, loss: float, n_parameters: int) -> float:
    """Bayesian information criterion of a fit with ``loss`` and ``n_parameters``."""
    n = 2.0 * float(np.asarray(_host(prepared.region_pixels)).sum())
    residual = max(float(loss), 1e-300) * prepared.energy_total
    return n * math.log(residual / n) + n_parameters * math.log(n)


@dataclass(frozen=True)
class ModelSelection:
    """Each candidate model's BIC and agreement with the reference, and the one selected."""

    criterion: str
    bic: dict[str, float]
    n_parameters: dict[str, int]
    r_reference: dict[str, float]
    selected: str

    def to_dict(self) -> dict:
        return {
            "criterion": self.criterion,
            "bic": dict(self.bic),
            "n_parameters": dict(self.n_parameters),
            "r_reference": dict(self.r_reference),
            "selected": self.selected,
        }


def select_model(prepared: Prepared, fits: dict[str, Any], reference: Any = None) -> ModelSelection:
    """The model of ``fits`` (name -> FitResult) to keep (module docstring).

    With ``reference`` (an independent phase image on the scan grid): the fewest
    coefficients whose phase agrees with it within :data:`CHECK_MARGIN` of the best;
    without: the fewest coefficients (BIC recorded, not deciding: module docstring).
    """
    if not fits:
        raise ValueError("select_model needs at least one fit")
    scores = {name: bic(prepared, fit.loss, len(fit.parameters)) for name, fit in fits.items()}
    counts = {name: len(fit.parameters) for name, fit in fits.items()}
    order = sorted(fits, key=lambda name: (counts[name], list(fits).index(name)))
    if reference is None:
        return ModelSelection("fewest coefficients (no reference)", scores, counts, {}, order[0])
    ref = band_limit(_host(reference).astype(np.float64), prepared)
    agreement = {
        name: _r(
            band_limit(
                _host(reconstruct(prepared, fits[name].aberrations).phase).astype(np.float64),
                prepared,
            ),
            ref,
        )
        for name in order
    }
    best = max(agreement.values())
    selected = next(name for name in order if agreement[name] >= best - CHECK_MARGIN)
    return ModelSelection("independent image", scores, counts, agreement, selected)


def band_limit(image: np.ndarray, prepared: Prepared) -> np.ndarray:
    """``image`` (scan grid) with frequencies over the SSB band ``2 alpha / lambda`` removed."""
    step_r, step_c = prepared.calibration.scan_step_a
    fr = np.fft.fftfreq(image.shape[0], d=step_r)[:, None]
    fc = np.fft.fftfreq(image.shape[1], d=step_c)[None, :]
    limit = 2 * prepared.alpha / prepared.wavelength_a
    return np.real(np.fft.ifft2(np.fft.fft2(image) * (fr**2 + fc**2 <= limit**2)))


def _host(array: Any) -> np.ndarray:
    get = getattr(array, "get", None)
    return np.asarray(get() if callable(get) else array)


def _r(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a - a.mean(), b - b.mean()
    norm = math.sqrt(float((a * a).sum() * (b * b).sum()))
    return float((a * b).sum()) / norm if norm > 0 else 0.0


@dataclass(frozen=True)
class FitCheck:
    """The uncorrected and fitted phases against the independent image."""

    reference: str
    r_uncorrected: float
    r_fitted: float
    fitted_worse: bool

    def to_dict(self) -> dict:
        return {
            "reference": self.reference,
            "r_uncorrected": self.r_uncorrected,
            "r_fitted": self.r_fitted,
            "margin": CHECK_MARGIN,
            "fitted_worse": self.fitted_worse,
        }


def check_fit(
    prepared: Prepared, uncorrected_phase: Any, fitted_phase: Any, reference: Any, name: str
) -> FitCheck:
    """Correlations of both phases with ``reference`` in the SSB band; warns if worse."""
    ref = band_limit(_host(reference).astype(np.float64), prepared)
    r_unc = _r(band_limit(_host(uncorrected_phase).astype(np.float64), prepared), ref)
    r_fit = _r(band_limit(_host(fitted_phase).astype(np.float64), prepared), ref)
    worse = r_fit < r_unc - CHECK_MARGIN
    if worse:
        warnings.warn(
            f"ssb: the fitted phase agrees worse with the {name} (r {r_fit:.3f}) than the "
            f"uncorrected phase does (r {r_unc:.3f}): the loss minimum is not the better image",
            SSBFitWarning,
            stacklevel=2,
        )
    return FitCheck(name, r_unc, r_fit, worse)


def idpc_reference(source: Any, prepared: Prepared) -> np.ndarray:
    """The iDPC phase of ``source`` with the rotation and calibration ``prepared`` used."""
    cal = prepared.calibration
    sampling = prepared.detector_sampling_mrad[0] / prepared.detector_bin
    general = Calibration(
        energy_ev=cal.energy_ev, mrad_per_pixel=sampling, scan_step_angstrom=cal.scan_step_a
    )
    with warnings.catch_warnings():
        # prepare already checked the calibration and the rotation against this data
        warnings.simplefilter("ignore")
        result = dpc(
            source,
            calibration=general,
            rotation_deg=prepared.rotation.rotation_deg,
            transpose=prepared.rotation.transpose,
            accept_calibration_mismatch=True,
            boundary="periodic",
        )
    return _host(result.phase)


__all__ = [
    "CHECK_MARGIN",
    "IDPC_PROBE_LIMIT",
    "FitCheck",
    "ModelSelection",
    "band_limit",
    "bic",
    "check_fit",
    "idpc_is_reliable",
    "idpc_reference",
    "select_model",
]
