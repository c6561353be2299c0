"""The compute workloads ``harness run compute`` measures: their stages, parameters, outputs.

A workload is an ordered list of named stages over a shared state; each stage is one
call into quantem's public API, so the timings are those of the product a user gets.
``load`` reads the source with ``quantem.io.load`` on the run's backend (dense); the
later stages are the public stage functions of :mod:`quantem.dpc`,
:mod:`quantem.parallax` and :mod:`quantem.virtual`. ``outputs`` are every array the
workload produces (hashed, and saved with ``--save-outputs``); ``fitted`` the fitted
parameters and calibration (JSON).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.errors import UsageError

Stage = tuple[str, Callable[[dict], None]]


@dataclass(frozen=True)
class ComputeParameters:
    """What the user chose for a run (recorded in the report's conditions)."""

    energy_ev: float | None = None
    convergence_mrad: float | None = None
    mrad_per_pixel: float | None = None
    scan_step_angstrom: float | None = None
    dtype: str = "float64"
    rotation_deg: float | None = None
    transpose: bool | None = None
    bin_factor: int = 1
    max_shift: float | None = None
    upsample: int = 2
    correct_aberrations: bool = False
    inner: float | None = None
    outer: float | None = None
    unit: str = "px"
    trials: int = 200
    seed: int = 0
    regions: tuple[int, int] = (2, 2)
    refine_evaluations: int | None = None
    # ssb on the CPU: stream the source in blocks of scan rows (quantem.ssb.prepare's
    # streaming mode) instead of loading it whole; either one selects it.
    memory_budget_bytes: int | None = None
    scan_block_rows: int | None = None

    @property
    def streaming(self) -> bool:
        return self.memory_budget_bytes is not None or self.scan_block_rows is not None

    def streaming_options(self) -> dict:
        """The streaming arguments of ``quantem.ssb.prepare`` (empty when not streaming)."""
        options = {}
        if self.memory_budget_bytes is not None:
            options["memory_budget_bytes"] = int(self.memory_budget_bytes)
        if self.scan_block_rows is not None:
            options["scan_block_rows"] = int(self.scan_block_rows)
        return options

    def calibration(self):
        from quantem.virtual import Calibration

        return Calibration(
            energy_ev=self.energy_ev,
            convergence_mrad=self.convergence_mrad,
            mrad_per_pixel=self.mrad_per_pixel,
            scan_step_angstrom=self.scan_step_angstrom,
        )

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _load(state: dict) -> None:
    import quantem.io

    state["acq"] = quantem.io.load(state["path"], state["backend"])
    state["on_close"].append(state["acq"].close)


def _frames(state: dict) -> None:
    from quantem.virtual import open_frames

    state["frames"] = open_frames(state["acq"])


# -- dpc --------------------------------------------------------------------------


def _dpc_com(state: dict) -> None:
    from quantem.dpc import measure_com

    state["com"] = measure_com(state["frames"])


def _dpc_shifts(state: dict) -> None:
    from quantem.dpc import beam_shifts

    p = state["parameters"]
    state["shifts"] = beam_shifts(state["com"], p.calibration(), p.dtype)


def _dpc_rotation(state: dict) -> None:
    from quantem.dpc import RotationFit, find_rotation

    p, shifts = state["parameters"], state["shifts"]
    if p.rotation_deg is None:
        state["rotation"] = find_rotation(
            shifts.row, shifts.col, transpose=p.transpose, step=shifts.step
        )
    else:
        state["rotation"] = RotationFit(p.rotation_deg, bool(p.transpose), float("nan"), None)


def _dpc_integration(state: dict) -> None:
    from quantem.dpc import reconstruct

    p = state["parameters"]
    state["dpc"] = reconstruct(
        state["shifts"], state["rotation"], resolve_half_turn=p.rotation_deg is None
    )


def _dpc_outputs(state: dict) -> dict[str, Any]:
    grad_r, grad_c, phase, div, _, _ = state["dpc"]
    return {
        "com_row": state["com"].row,
        "com_col": state["com"].col,
        "gradient_row": grad_r,
        "gradient_col": grad_c,
        "phase": phase,
        "divergence": div,
    }


def _dpc_fitted(state: dict) -> dict:
    _, _, _, _, angle, flipped = state["dpc"]
    rotation = state["rotation"]
    return {
        "rotation_deg": angle,
        "transpose": rotation.transpose,
        "half_turn_flipped": flipped,
        "residual_curl": None if rotation.residual != rotation.residual else rotation.residual,
        "gradient_units": state["shifts"].units,
        "mean_com_px": list(state["shifts"].mean_com),
    }


# -- parallax ---------------------------------------------------------------------


def _parallax_stack(state: dict) -> None:
    from quantem.parallax import build_stack

    state["stack"] = build_stack(state["frames"], bin_factor=state["parameters"].bin_factor)


def _parallax_align(state: dict) -> None:
    from quantem.parallax import align

    state["alignment"] = align(state["stack"].images, max_shift=state["parameters"].max_shift)


def _parallax_fit(state: dict) -> None:
    from quantem.arrays import to_numpy
    from quantem.parallax import fit_aberrations

    p = state["parameters"]
    calibration = p.calibration().with_disk_radius(state["stack"].radius)
    state["calibration"] = calibration
    angles = state["stack"].positions * (calibration.detector_mrad_per_pixel * 1e-3)
    state["fit"] = fit_aberrations(
        to_numpy(state["alignment"].shifts), angles, calibration.scan_step, transpose=p.transpose
    )


def _parallax_reconstruct(state: dict) -> None:
    from quantem.arrays import module_for_backend
    from quantem.parallax import shift_and_sum
    from quantem.parallax.reconstruct import aberration_sign

    p, stack = state["parameters"], state["stack"]
    xp = module_for_backend(state["backend"])
    shifts = xp.asarray(state["fit"].fitted_shifts)
    state["image"] = shift_and_sum(stack.images, shifts, upsample=p.upsample)
    if p.correct_aberrations:
        step = state["calibration"].scan_step
        sign = aberration_sign(
            state["image"].shape,
            (step[0] / p.upsample, step[1] / p.upsample),
            state["fit"],
            state["calibration"].wavelength_angstrom,
            xp,
        )
        state["image_corrected"] = shift_and_sum(
            stack.images, shifts, upsample=p.upsample, correction=sign
        )


def _parallax_outputs(state: dict) -> dict[str, Any]:
    out = {
        "positions": state["stack"].positions,
        "shifts": state["alignment"].shifts,
        "fitted_shifts": state["fit"].fitted_shifts,
        "image": state["image"],
    }
    if "image_corrected" in state:
        out["image_corrected"] = state["image_corrected"]
    return out


def _parallax_fitted(state: dict) -> dict:
    return {
        **state["fit"].to_dict(),
        "n_images": len(state["stack"].positions),
        "disk_center_px": list(state["stack"].center),
        "disk_radius_px": state["stack"].radius,
    }


# -- virtual ----------------------------------------------------------------------


def _virtual_disk(state: dict) -> None:
    state["disk"] = state["frames"].disk()
    state["mean_dp"] = state["frames"].pattern_sum()


def _virtual_detector(name: str, detector: Callable[[dict], Any]) -> Stage:
    def stage(state: dict) -> None:
        from quantem.virtual import virtual_images

        p = state["parameters"]
        state[name] = virtual_images(
            state["frames"], {name: detector(state)}, calibration=p.calibration()
        )[name]

    return name, stage


def _virtual_outputs(state: dict) -> dict[str, Any]:
    return {name: state[name] for name in ("mean_dp", "bf", "adf", "df")}


def _virtual_fitted(state: dict) -> dict:
    disk = state["disk"]
    return {"disk_center_px": list(disk.center), "disk_radius_px": disk.radius}


def _bf(state):
    from quantem.virtual import Disk

    return Disk()


def _adf(state):
    from quantem.virtual import Annulus

    return Annulus()


def _df(state):
    from quantem.virtual import Annulus

    p = state["parameters"]
    inner = p.inner if p.inner is not None else 1.5 * state["disk"].radius
    outer = p.outer if p.outer is not None else 3.0 * state["disk"].radius
    unit = p.unit if p.inner is not None else "px"
    return Annulus(inner, outer, unit)


# -- ssb --------------------------------------------------------------------------
# Stages: the scan transform, one uncorrected reconstruction, the standard fit (C10, C12)
# and the default fit (C10 to C30) with a seeded TPE search + Nelder-Mead, and the regional
# fits (--regions tiles, standard parameters). quantem.ssb (docs/ssb.md) does the work.
# Without --rotation-deg the rotation is quantem.dpc's curl-minimising estimate, found in
# the prepare stage, shared by the regions and recorded (fitted["rotation"]).


def _ssb_calibration(state: dict):
    from quantem.ssb import Calibration

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
    return Calibration(
        energy_ev=p.energy_ev,
        semiangle_mrad=p.convergence_mrad,
        scan_step_a=p.scan_step_angstrom,
        rotation_deg=p.rotation_deg,
        detector_sampling_mrad=p.mrad_per_pixel,
        transpose=p.transpose,
    )


def _ssb_source(state: dict) -> Any:
    """The dense array (after ``load``) or, streaming, the master file's path."""
    return state["path"] if state["parameters"].streaming else state["acq"].array


def _ssb_open(state: dict) -> None:
    """Streaming: open the source's scan rows (shape, dtype) without reading the frames."""
    from quantem.ssb.stream import open_scan_rows

    state["ssb_rows_shape"] = tuple(open_scan_rows(state["path"]).shape)


def _ssb_prepare(state: dict) -> None:
    from quantem.ssb import prepare

    p = state["parameters"]
    state["ssb_calibration"] = _ssb_calibration(state)
    state["ssb"] = prepare(
        _ssb_source(state),
        state["ssb_calibration"],
        detector_bin=p.bin_factor,
        **p.streaming_options(),
    )


def _ssb_reconstruct(state: dict) -> None:
    from quantem.ssb import reconstruct

    state["ssb_uncorrected"] = reconstruct(state["ssb"])


def _ssb_fit(name: str, parameters_attr: str) -> Stage:
    def stage(state: dict) -> None:
        import quantem.ssb as ssb
        from quantem.ssb import fit_aberrations, reconstruct

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


def _ssb_regions(state: dict) -> None:
    from quantem.ssb import STANDARD_PARAMETERS, fit_regions, split_regions

    p = state["parameters"]
    state["ssb_regions"] = fit_regions(
        _ssb_source(state),
        state["ssb_calibration"],
        split_regions(tuple(state["ssb"].scan_shape), tuple(p.regions)),
        prepare_options={
            "disk": state["ssb"].disk,
            "rotation": state["ssb"].rotation,
            "detector_bin": p.bin_factor,
            **p.streaming_options(),
        },
        parameters=STANDARD_PARAMETERS,
        n_trials=p.trials,
        seed=p.seed,
        refine_max_evaluations=p.refine_evaluations,
    )


def _ssb_outputs(state: dict) -> dict[str, Any]:
    return {
        "object": state["ssb_default_result"].object,
        "phase": state["ssb_default_result"].phase,
        "standard_phase": state["ssb_standard_result"].phase,
        "uncorrected_phase": state["ssb_uncorrected"].phase,
    }


def _ssb_fitted(state: dict) -> dict:
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

    return {
        "calibration": state["ssb"].calibration.to_dict(),
        "rotation": state["ssb"].rotation.to_dict(),
        "bf_disk": {"center": list(state["ssb"].disk.center), "radius": state["ssb"].disk.radius},
        "uncorrected_loss": state["ssb_uncorrected"].loss,
        "standard_fit": record(state["ssb_standard"]),
        "default_fit": record(state["ssb_default"]),
        "regional_fits": [
            {"region": list(r.region), **record(r.result)} for r in state["ssb_regions"]
        ],
    }


@dataclass(frozen=True)
class Workload:
    name: str
    stages: tuple[Stage, ...]
    outputs: Callable[[dict], dict[str, Any]]
    fitted: Callable[[dict], dict]


WORKLOADS = {
    "dpc": Workload(
        "dpc",
        (
            ("load", _load),
            ("prepare", _frames),
            ("com", _dpc_com),
            ("shifts", _dpc_shifts),
            ("rotation", _dpc_rotation),
            ("integration", _dpc_integration),
        ),
        _dpc_outputs,
        _dpc_fitted,
    ),
    "parallax": Workload(
        "parallax",
        (
            ("load", _load),
            ("prepare", _frames),
            ("stack", _parallax_stack),
            ("align", _parallax_align),
            ("fit", _parallax_fit),
            ("reconstruct", _parallax_reconstruct),
        ),
        _parallax_outputs,
        _parallax_fitted,
    ),
    "ssb": Workload(
        "ssb",
        (
            ("load", _load),
            ("prepare", _ssb_prepare),
            ("reconstruct", _ssb_reconstruct),
            _ssb_fit("standard", "STANDARD_PARAMETERS"),
            _ssb_fit("default", "EXTENDED_PARAMETERS"),
            ("regional_fits", _ssb_regions),
        ),
        _ssb_outputs,
        _ssb_fitted,
    ),
    "virtual": Workload(
        "virtual",
        (
            ("load", _load),
            ("prepare", _frames),
            ("mean_dp", _virtual_disk),
            _virtual_detector("bf", _bf),
            _virtual_detector("adf", _adf),
            _virtual_detector("df", _df),
        ),
        _virtual_outputs,
        _virtual_fitted,
    ),
}


#: ``ssb`` streamed from the source (``--memory-budget`` / ``--scan-block-rows``): no dense
#: load; ``open`` reads the scan's shape, ``prepare`` reads the frames in blocks of scan rows.
SSB_STREAMING = Workload(
    "ssb",
    (("open", _ssb_open), *WORKLOADS["ssb"].stages[1:]),
    _ssb_outputs,
    _ssb_fitted,
)


def workload_for(name: str, parameters: ComputeParameters | None = None) -> Workload:
    """The workload ``name``; ``ssb`` with streaming parameters is :data:`SSB_STREAMING`."""
    try:
        workload = WORKLOADS[name]
    except KeyError:
        raise UsageError(
            f"unknown compute workload {name!r}; choose one of {', '.join(WORKLOADS)}"
        ) from None
    if parameters is not None and parameters.streaming:
        if name != "ssb":
            raise UsageError("--memory-budget and --scan-block-rows are ssb options")
        return SSB_STREAMING
    return workload


def as_host(array: Any) -> np.ndarray:
    from quantem.arrays import to_numpy

    return np.ascontiguousarray(to_numpy(array))


__all__ = [
    "SSB_STREAMING",
    "WORKLOADS",
    "ComputeParameters",
    "Workload",
    "as_host",
    "workload_for",
]
