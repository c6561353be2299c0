"""Aberration fit: a seeded global search (Optuna's TPE) then a Nelder-Mead refinement.

The objective is :func:`quantem.stem4d.ssb.reconstruct.loss` (the normalised sideband residual).
It is flat far from the answer and sharp near it (a wrong defocus of a few nm scrambles
the trotter phases), which suits a sampler that learns where good trials cluster: the
Tree-structured Parzen Estimator of Optuna, seeded, one trial at a time (so the sequence
of trials is reproducible), over the Cartesian coefficients in given bounds. The best
trial then seeds scipy's Nelder-Mead in coordinates scaled by each bound's half-width.

Every evaluation is recorded in order (stage, coefficients, loss), so a fit is checked
for determinism by hashing its trajectory; see :func:`FitResult.trajectory_sha256`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from quantem.stem4d.ssb.aberrations import CARTESIAN_NAMES, Aberrations
from quantem.stem4d.ssb.prepare import (
    Prepared,
    estimate_rotation,
    measure_bright_field_disk,
    prepare,
)
from quantem.stem4d.ssb.reconstruct import loss as ssb_loss

#: The standard fit: defocus and two-fold astigmatism.
STANDARD_PARAMETERS = ("C10", "C12a", "C12b")
#: Up to third order: adds axial coma and spherical aberration.
EXTENDED_PARAMETERS = ("C10", "C12a", "C12b", "C21a", "C21b", "C23a", "C23b", "C30")
#: Default search bounds, Angstrom (C10 +-20 nm, C12 +-10 nm, C21/C23 +-1 um, C30 +-50 um).
DEFAULT_BOUNDS: dict[str, tuple[float, float]] = {
    "C10": (-200.0, 200.0),
    "C12a": (-100.0, 100.0),
    "C12b": (-100.0, 100.0),
    "C21a": (-1.0e4, 1.0e4),
    "C21b": (-1.0e4, 1.0e4),
    "C23a": (-1.0e4, 1.0e4),
    "C23b": (-1.0e4, 1.0e4),
    "C30": (-5.0e5, 5.0e5),
}
DEFAULT_TRIALS = 200
DEFAULT_SEED = 0


@dataclass
class FitResult:
    """What a fit found and how: parameters, loss, trials, seed and the full trajectory."""

    aberrations: Aberrations
    loss: float
    parameters: tuple[str, ...]
    bounds: dict[str, tuple[float, float]]
    n_trials: int
    seed: int
    search_best: dict[str, float]
    search_loss: float
    refine: dict[str, Any]
    trajectory: list[dict[str, Any]] = field(repr=False)

    @property
    def n_evaluations(self) -> int:
        return len(self.trajectory)

    def trajectory_sha256(self) -> str:
        """SHA-256 of the trajectory's exact float values (``float.hex``), in order."""
        digest = hashlib.sha256()
        for step in self.trajectory:
            values = [step["stage"], *(float(step["values"][n]).hex() for n in self.parameters)]
            values.append(float(step["loss"]).hex())
            digest.update(("|".join(values) + "\n").encode())
        return digest.hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return {
            "aberrations": self.aberrations.to_dict(),
            "aberrations_polar": self.aberrations.to_polar(),
            "loss": self.loss,
            "parameters": list(self.parameters),
            "bounds": {k: list(v) for k, v in self.bounds.items()},
            "n_trials": self.n_trials,
            "n_evaluations": self.n_evaluations,
            "seed": self.seed,
            "search_best": self.search_best,
            "search_loss": self.search_loss,
            "refine": self.refine,
            "trajectory_sha256": self.trajectory_sha256(),
            "trajectory": self.trajectory,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))


@contextlib.contextmanager
def _quiet_optuna() -> Iterator[Any]:
    import optuna

    previous = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield optuna
    finally:
        optuna.logging.set_verbosity(previous)


def _parse_parameters(
    parameters: Sequence[str], bounds: dict[str, tuple[float, float]] | None
) -> tuple[tuple[str, ...], dict[str, tuple[float, float]]]:
    names = tuple(parameters)
    if not names:
        raise ValueError("fit at least one aberration coefficient")
    unknown = [n for n in names if n not in CARTESIAN_NAMES]
    if unknown or len(set(names)) != len(names):
        raise ValueError(
            f"parameters must be distinct names among {CARTESIAN_NAMES}, got {list(names)}"
        )
    merged = dict(DEFAULT_BOUNDS)
    merged.update(bounds or {})
    chosen = {}
    for name in names:
        low, high = (float(v) for v in merged[name])
        if not (np.isfinite(low) and np.isfinite(high) and low < high):
            raise ValueError(f"bounds of {name} must be finite with low < high, got {merged[name]}")
        chosen[name] = (low, high)
    return names, chosen


def fit_aberrations(
    prepared: Prepared,
    *,
    parameters: Sequence[str] = STANDARD_PARAMETERS,
    bounds: dict[str, tuple[float, float]] | None = None,
    n_trials: int = DEFAULT_TRIALS,
    seed: int = DEFAULT_SEED,
    start: Aberrations | None = None,
    refine: bool = True,
    refine_max_evaluations: int | None = None,
    engine: str = "auto",
    loss_function: Callable[[Prepared, Aberrations], float] | None = None,
) -> FitResult:
    """Fit ``parameters`` (Cartesian names) by TPE search then Nelder-Mead.

    ``start`` supplies the values of the coefficients that are not fitted, and is tried
    first by the search (an estimate from parallax, say). ``n_trials`` counts the TPE
    trials; the refinement adds its own evaluations (all in ``trajectory``).
    """
    names, chosen = _parse_parameters(parameters, bounds)
    if int(n_trials) != n_trials or n_trials < 1:
        raise ValueError(f"n_trials must be a positive integer, got {n_trials!r}")
    if isinstance(seed, bool) or int(seed) != seed or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    base = start or Aberrations()
    if loss_function is None:

        def evaluate(p: Prepared, a: Aberrations) -> float:
            return ssb_loss(p, a, engine=engine)

    else:
        evaluate = loss_function
    trajectory: list[dict[str, Any]] = []

    def objective(stage: str, values: dict[str, float]) -> float:
        value = float(evaluate(prepared, base.replace(**values)))
        if not np.isfinite(value):
            value = 1.0
        trajectory.append({"stage": stage, "values": dict(values), "loss": value})
        return value

    with _quiet_optuna() as optuna:
        sampler = optuna.samplers.TPESampler(seed=int(seed), multivariate=True)
        study = optuna.create_study(direction="minimize", sampler=sampler)
        initial = {n: float(np.clip(getattr(base, n), *chosen[n])) for n in names}
        study.enqueue_trial(initial)

        def trial_objective(trial: Any) -> float:
            values = {n: trial.suggest_float(n, *chosen[n]) for n in names}
            return objective("search", values)

        study.optimize(trial_objective, n_trials=int(n_trials), n_jobs=1)
    best_index = int(np.argmin([s["loss"] for s in trajectory]))
    search_best = dict(trajectory[best_index]["values"])
    search_loss = trajectory[best_index]["loss"]

    refine_info: dict[str, Any] = {"method": None}
    best_values, best_loss = search_best, search_loss
    if refine:
        best_values, best_loss, refine_info = _refine(
            objective, names, chosen, search_best, refine_max_evaluations
        )
        if search_loss < best_loss:  # Nelder-Mead never returns worse, but keep the rule
            best_values, best_loss = search_best, search_loss
    return FitResult(
        aberrations=base.replace(**best_values),
        loss=best_loss,
        parameters=names,
        bounds=chosen,
        n_trials=int(n_trials),
        seed=int(seed),
        search_best=search_best,
        search_loss=search_loss,
        refine=refine_info,
        trajectory=trajectory,
    )


def _refine(objective, names, chosen, start, max_evaluations):
    from scipy.optimize import minimize

    centre = np.array([(chosen[n][0] + chosen[n][1]) / 2 for n in names])
    half = np.array([(chosen[n][1] - chosen[n][0]) / 2 for n in names])

    def scaled(x: np.ndarray) -> float:
        values = {n: float(v) for n, v in zip(names, centre + half * x)}
        return objective("refine", values)

    x0 = (np.array([start[n] for n in names]) - centre) / half
    # A simplex of 2% of each half-width around the search's best: the basin of the
    # loss is a few percent of the default bounds wide.
    simplex = np.vstack([x0, x0 + 0.02 * np.eye(len(names))])
    max_evaluations = max_evaluations or 200 * len(names)
    result = minimize(
        scaled,
        x0,
        method="Nelder-Mead",
        options={
            "initial_simplex": simplex,
            "xatol": 1e-5,
            "fatol": 1e-9,
            "maxfev": int(max_evaluations),
        },
    )
    values = {n: float(v) for n, v in zip(names, centre + half * result.x)}
    info = {
        "method": "Nelder-Mead",
        "evaluations": int(result.nfev),
        "iterations": int(result.nit),
        "success": bool(result.success),
        "message": str(result.message),
        "xatol_scaled": 1e-5,
        "fatol": 1e-9,
    }
    return values, float(result.fun), info


def split_regions(
    scan_shape: tuple[int, int], grid: tuple[int, int]
) -> list[tuple[int, int, int, int]]:
    """``grid`` = (rows, columns) of equal tiles covering the scan: ``(r0, r1, c0, c1)`` each."""
    rows, cols = (int(g) for g in grid)
    if rows < 1 or cols < 1 or rows > scan_shape[0] // 2 or cols > scan_shape[1] // 2:
        raise ValueError(f"region grid {grid} does not fit a {scan_shape} scan (tiles of >= 2x2)")
    r_edges = np.linspace(0, scan_shape[0], rows + 1).astype(int)
    c_edges = np.linspace(0, scan_shape[1], cols + 1).astype(int)
    return [
        (int(r_edges[i]), int(r_edges[i + 1]), int(c_edges[j]), int(c_edges[j + 1]))
        for i in range(rows)
        for j in range(cols)
    ]


@dataclass
class RegionFit:
    region: tuple[int, int, int, int]
    result: FitResult


def fit_regions(
    data: Any,
    calibration: Any,
    regions: Sequence[tuple[int, int, int, int]] | tuple[int, int],
    *,
    prepare_options: dict[str, Any] | None = None,
    **fit_options: Any,
) -> list[RegionFit]:
    """Fit each scan region on its own (its own scan transform), in the order given.

    ``regions`` is a list of ``(r0, r1, c0, c1)`` or a ``(rows, columns)`` grid of tiles.
    The BF disk and, unless given, the rotation (the DPC estimate) are found once on the
    whole scan and shared, so the regions differ only by what the probe saw there.
    """
    if len(regions) == 2 and all(isinstance(v, (int, np.integer)) for v in regions):
        regions = split_regions(tuple(data.shape[:2]), regions)  # type: ignore[arg-type]
    options = dict(prepare_options or {})
    if "disk" not in options:
        options["disk"] = measure_bright_field_disk(data)
    if options.get("rotation") is None:
        options["rotation"] = estimate_rotation(data, calibration, disk=options["disk"])
    fits = []
    for region in regions:
        prepared = prepare(data, calibration, scan_region=tuple(region), **options)
        fits.append(
            RegionFit(tuple(int(v) for v in region), fit_aberrations(prepared, **fit_options))
        )
    return fits


__all__ = [
    "DEFAULT_BOUNDS",
    "DEFAULT_SEED",
    "DEFAULT_TRIALS",
    "EXTENDED_PARAMETERS",
    "STANDARD_PARAMETERS",
    "FitResult",
    "RegionFit",
    "fit_aberrations",
    "fit_regions",
    "split_regions",
]
