"""The ``ssb`` compute workload's stages (single-sideband ptychography, :mod:`quantem.stem4d.ssb`).

Stages: the scan transform, one uncorrected reconstruction, the standard fit (C10, C12)
and the default fit (C10 to C30) with a seeded TPE search + Nelder-Mead, and the regional
fits (--regions tiles, standard parameters). quantem.stem4d.ssb (docs/ssb.md) does the work.
Without --rotation-deg the rotation is quantem.stem4d.dpc's curl-minimising estimate, found in
the prepare stage, shared by the regions and recorded (fitted["rotation"]). Streamed
(``--memory-budget`` / ``--scan-block-rows``, on cpu or cuda), ``ssb_open`` replaces the
dense load.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.errors import UsageError


def _ssb_calibration(state: dict):
    from quantem.stem4d.ssb import Calibration

    p = state["parameters"]
    missing = [
        flag
        for flag, value in (
            ("--energy-ev/--voltage-kv", p.energy_ev),
            ("--convergence-mrad/--semiangle-mrad", p.convergence_mrad),
            ("--scan-step/--scan-step-a", p.scan_step_angstrom),
        )
        if value is None
    ]
    if missing:
        raise UsageError(f"ssb needs {', '.join(missing)}")
    general = p.calibration()
    return Calibration(
        energy_ev=p.energy_ev,
        semiangle_mrad=p.convergence_mrad,
        scan_step_a=p.scan_step_angstrom,
        rotation_deg=p.rotation_deg,
        # a reciprocal-space sampling becomes an angle here, with the given energy
        detector_sampling_mrad=general.detector_mrad_per_pixel
        if general.has_detector_sampling
        else None,
        transpose=p.transpose,
    )


def _ssb_source(state: dict) -> Any:
    """The dense array (after ``load``) or, streaming, the master file's path."""
    return state["path"] if state["parameters"].streaming else state["acq"].array


def _prepare_options(state: dict) -> dict:
    """``prepare``'s streaming arguments; a streamed source is reduced on the run's backend."""
    p = state["parameters"]
    return {**p.streaming_options(), "backend": state["backend"]} if p.streaming else {}


def ssb_open(state: dict) -> None:
    """Streaming: open the source's scan rows (shape, dtype) without reading the frames."""
    from quantem.stem4d.ssb.stream import open_scan_rows

    state["ssb_rows_shape"] = tuple(open_scan_rows(state["path"]).shape)


def ssb_prepare(state: dict) -> None:
    from quantem.stem4d.ssb import prepare

    p = state["parameters"]
    state["ssb_calibration"] = _ssb_calibration(state)
    state["ssb"] = prepare(
        _ssb_source(state),
        state["ssb_calibration"],
        detector_bin=p.bin_factor,
        accept_calibration_mismatch=p.accept_calibration_mismatch,
        **_prepare_options(state),
    )


def ssb_reconstruct(state: dict) -> None:
    from quantem.stem4d.ssb import reconstruct

    state["ssb_uncorrected"] = reconstruct(state["ssb"])


def ssb_fit(name: str, parameters_attr: str) -> tuple[str, Callable[[dict], None]]:
    def stage(state: dict) -> None:
        import quantem.stem4d.ssb as ssb
        from quantem.stem4d.ssb import fit_aberrations, reconstruct

        p = state["parameters"]
        fit = fit_aberrations(
            state["ssb"],
            parameters=getattr(ssb, parameters_attr),
            n_trials=p.trials,
            seed=p.seed,
            refine_max_evaluations=p.refine_evaluations,
        )
        state[f"ssb_{name}"] = fit
        state[f"ssb_{name}_result"] = reconstruct(state["ssb"], fit.aberrations)

    return (f"{name}_fit", stage)


def ssb_regions(state: dict) -> None:
    from quantem.stem4d.ssb import STANDARD_PARAMETERS, fit_regions, split_regions

    p = state["parameters"]
    state["ssb_regions"] = fit_regions(
        _ssb_source(state),
        state["ssb_calibration"],
        split_regions(tuple(state["ssb"].scan_shape), tuple(p.regions)),
        prepare_options={
            "disk": state["ssb"].disk,
            "rotation": state["ssb"].rotation,
            "detector_bin": p.bin_factor,
            **_prepare_options(state),
        },
        parameters=STANDARD_PARAMETERS,
        n_trials=p.trials,
        seed=p.seed,
        refine_max_evaluations=p.refine_evaluations,
    )


def ssb_outputs(state: dict) -> dict[str, Any]:
    return {
        "object": state["ssb_default_result"].object,
        "phase": state["ssb_default_result"].phase,
        "standard_phase": state["ssb_standard_result"].phase,
        "uncorrected_phase": state["ssb_uncorrected"].phase,
    }


def ssb_fitted(state: dict) -> dict:
    def record(fit) -> dict:
        return {
            "aberrations": fit.aberrations.to_dict(),
            "aberrations_polar": fit.aberrations.to_polar(),
            "loss": fit.loss,
            "n_trials": fit.n_trials,
            "n_evaluations": fit.n_evaluations,
            "seed": fit.seed,
            "refine": fit.refine,
            "trajectory_sha256": fit.trajectory_sha256(),
        }

    from quantem.stem4d.ssb.selection import (
        check_fit,
        idpc_is_reliable,
        idpc_reference,
        select_model,
    )

    prepared = state["ssb"]
    fits = {"standard": state["ssb_standard"], "default": state["ssb_default"]}
    if state["parameters"].streaming:
        selection = select_model(prepared, fits)
        check = {"reference": "iDPC phase", "unchecked": "streamed source: no dense frames"}
    elif not idpc_is_reliable(prepared, state["ssb_standard"].aberrations.to_polar()["C10"]):
        selection = select_model(prepared, fits)
        check = {"reference": "iDPC phase", "unchecked": "probe too defocused"}
    else:
        reference = idpc_reference(state["acq"], prepared)
        selection = select_model(prepared, fits, reference)
        chosen = state[f"ssb_{selection.selected}_result"]
        check = check_fit(
            prepared, state["ssb_uncorrected"].phase, chosen.phase, reference, "iDPC phase"
        ).to_dict()
    return {
        "model_selection": selection.to_dict(),
        "fit_check": {"model": selection.selected, **check},
        "calibration": state["ssb"].calibration.to_dict(),
        "rotation": state["ssb"].rotation.to_dict(),
        "bf_disk": {"center": list(state["ssb"].disk.center), "radius": state["ssb"].disk.radius},
        "units": {"phase": "rad", "object": "complex transmission", "aberrations": "A, rad"},
        "calibration_check": state["ssb"].calibration_check,
        "uncorrected_loss": state["ssb_uncorrected"].loss,
        "standard_fit": record(state["ssb_standard"]),
        "default_fit": record(state["ssb_default"]),
        "regional_fits": [
            {"region": list(r.region), **record(r.result)} for r in state["ssb_regions"]
        ],
    }
