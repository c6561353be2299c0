"""The compute workloads ``harness run compute`` measures: the registry and the parameters.

A workload is an ordered list of named stages over a shared state; each stage is one
call into quantem's public API, so the timings are those of the product a user gets.
``load`` reads the source with ``quantem.stem4d.io.load`` on the run's backend (dense) and
``prepare`` opens its frames (both here, shared); the later stages are the public stage
functions of :mod:`quantem.stem4d.dpc`, :mod:`quantem.stem4d.parallax`, :mod:`quantem.stem4d.ssb` and
:mod:`quantem.stem4d.virtual`, one module of stages per workload (:mod:`harness.run.compute.dpc`,
:mod:`~harness.run.compute.parallax`, :mod:`~harness.run.compute.ssb`,
:mod:`~harness.run.compute.virtual`). ``outputs`` are every array the workload produces
(hashed, and saved with ``--save-outputs``); ``fitted`` the fitted parameters and
calibration (JSON).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.errors import UsageError
from harness.run.compute import dpc, parallax, products, ssb, validate, virtual

Stage = tuple[str, Callable[[dict], None]]


@dataclass(frozen=True)
class ComputeParameters:
    """What the user chose for a run (recorded in the report's conditions)."""

    energy_ev: float | None = None
    convergence_mrad: float | None = None
    mrad_per_pixel: float | None = None
    scan_step_angstrom: float | None = None
    inverse_angstrom_per_pixel: float | None = None
    accept_calibration_mismatch: bool = False
    dtype: str = "float64"
    rotation_deg: float | None = None
    transpose: bool | None = None
    bin_factor: int = 1
    max_shift: float | None = None
    #: parallax: C10 guess (A, = -defocus) the alignment searches around (guided_align).
    c10_guess_angstrom: float | None = None
    upsample: int = 2
    correct_aberrations: bool = False
    inner: float | None = None
    outer: float | None = None
    unit: str = "px"
    trials: int = 200
    seed: int = 0
    regions: tuple[int, int] = (2, 2)
    refine_evaluations: int | None = None
    # ssb on the CPU: stream the source in blocks of scan rows (quantem.stem4d.ssb.prepare's
    # streaming mode) instead of loading it whole; either one selects it.
    memory_budget_bytes: int | None = None
    scan_block_rows: int | None = None

    @property
    def streaming(self) -> bool:
        return self.memory_budget_bytes is not None or self.scan_block_rows is not None

    def streaming_options(self) -> dict:
        """The streaming arguments of ``quantem.stem4d.ssb.prepare`` (empty when not streaming)."""
        options = {}
        if self.memory_budget_bytes is not None:
            options["memory_budget_bytes"] = int(self.memory_budget_bytes)
        if self.scan_block_rows is not None:
            options["scan_block_rows"] = int(self.scan_block_rows)
        return options

    def calibration(self):
        from quantem.stem4d.virtual import Calibration

        return Calibration(
            energy_ev=self.energy_ev,
            convergence_mrad=self.convergence_mrad,
            mrad_per_pixel=self.mrad_per_pixel,
            scan_step_angstrom=self.scan_step_angstrom,
            inverse_angstrom_per_pixel=self.inverse_angstrom_per_pixel,
        )

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _load(state: dict) -> None:
    import quantem.stem4d.io

    options = state.get("load_options", {})
    state["acq"] = quantem.stem4d.io.load(state["path"], state["backend"], **options)
    state["on_close"].append(state["acq"].close)


def _frames(state: dict) -> None:
    from quantem.stem4d.virtual import open_frames

    state["frames"] = open_frames(state["acq"])


@dataclass(frozen=True)
class Workload:
    name: str
    stages: tuple[Stage, ...]
    outputs: Callable[[dict], dict[str, Any]]
    fitted: Callable[[dict], dict]
    #: stage -> the floor that bounds it ("read_once": the whole resident data;
    #: "mask_lines": the lines of the stage's mask, given by ``masks``); a stage left out
    #: has no floor (it reads derived arrays, or a part of the data no floor here models).
    floors: Mapping[str, str] = field(default_factory=dict)
    masks: Callable[[dict], dict[str, Any]] | None = None


WORKLOADS = {
    "dpc": Workload(
        "dpc",
        (
            ("load", _load),
            ("prepare", _frames),
            ("com", dpc.dpc_com),
            ("shifts", dpc.dpc_shifts),
            ("rotation", dpc.dpc_rotation),
            ("integration", dpc.dpc_integration),
        ),
        dpc.dpc_outputs,
        dpc.dpc_fitted,
        {"com": "read_once"},
    ),
    "parallax": Workload(
        "parallax",
        (
            ("load", _load),
            ("prepare", _frames),
            ("stack", parallax.parallax_stack),
            ("align", parallax.parallax_align),
            ("fit", parallax.parallax_fit),
            ("reconstruct", parallax.parallax_reconstruct),
        ),
        parallax.parallax_outputs,
        parallax.parallax_fitted,
    ),
    "products": Workload(
        "products",
        (
            ("load", _load),
            ("prepare", products.products_session),
            ("mean_dp", products.products_mean_dp),
            ("bf", products.products_bf),
            ("adf", products.products_adf),
            ("com", products.products_com),
        ),
        products.products_outputs,
        products.products_fitted,
        products.PRODUCTS_FLOORS,
        products.products_masks,
    ),
    "ssb": Workload(
        "ssb",
        (
            ("load", _load),
            ("prepare", ssb.ssb_prepare),
            ("reconstruct", ssb.ssb_reconstruct),
            ssb.ssb_fit("standard", "STANDARD_PARAMETERS"),
            ssb.ssb_fit("default", "EXTENDED_PARAMETERS"),
            ("regional_fits", ssb.ssb_regions),
        ),
        ssb.ssb_outputs,
        ssb.ssb_fitted,
    ),
    "virtual": Workload(
        "virtual",
        (
            ("load", _load),
            ("prepare", _frames),
            ("mean_dp", virtual.virtual_disk),
            virtual.virtual_detector("bf", virtual.bf_detector),
            virtual.virtual_detector("adf", virtual.adf_detector),
            virtual.virtual_detector("df", virtual.df_detector),
        ),
        virtual.virtual_outputs,
        virtual.virtual_fitted,
        {"mean_dp": "read_once"},
    ),
    # Each method against a simulation's truth (tests/data/validation; truth.json beside
    # the source gives the parameters): scores and a verdict per acquisition.
    "validate": Workload(
        "validate",
        (
            ("load", _load),
            ("prepare", _frames),
            ("truth", validate.validate_truth),
            ("idpc", validate.validate_dpc),
            ("parallax", validate.validate_parallax),
            ("ssb", validate.validate_ssb),
        ),
        validate.validate_outputs,
        validate.validate_fitted,
    ),
}


#: ``ssb`` streamed from the source (``--memory-budget`` / ``--scan-block-rows``): no dense
#: load; ``open`` reads the scan's shape, ``prepare`` reads the frames in blocks of scan rows.
SSB_STREAMING = Workload(
    "ssb",
    (("open", ssb.ssb_open), *WORKLOADS["ssb"].stages[1:]),
    ssb.ssb_outputs,
    ssb.ssb_fitted,
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
    from quantem.stem4d.arrays import to_numpy

    return np.ascontiguousarray(to_numpy(array))


__all__ = [
    "SSB_STREAMING",
    "WORKLOADS",
    "ComputeParameters",
    "Workload",
    "as_host",
    "workload_for",
]
