"""The ``virtual`` compute workload's stages: the mean pattern and BF, ADF and DF images.

Each stage is one call into :mod:`quantem.stem4d.virtual` over the workload's shared state
(ordered by :mod:`harness.run.compute.workloads`); ``virtual_detector(name, detector)``
makes the stage of one virtual detector, ``detector(state)`` giving its geometry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: The calibration fields mrad radii apply (energy only with a reciprocal-space sampling).
MRAD_FIELDS = frozenset(
    {"mrad_per_pixel", "inverse_angstrom_per_pixel", "convergence_mrad", "bf_radius_px"}
)


def virtual_disk(state: dict) -> None:
    from quantem.stem4d.virtual.calibration_check import check_bf_radius, check_scan_step, settle

    p = state["parameters"]
    state["disk"] = state["frames"].disk()
    state["mean_dp"] = state["frames"].pattern_sum()
    calibration = p.calibration()
    applied = set(MRAD_FIELDS) if p.unit == "mrad" and p.inner is not None else set()
    if applied and calibration.inverse_angstrom_per_pixel is not None:
        applied.add("energy_ev")
    calibration.refuse_unused("virtual", applied)
    findings = [check_scan_step(calibration)]
    if calibration.has_detector_sampling:
        findings.append(check_bf_radius(calibration, state["disk"].radius))
    state["calibration"] = (
        calibration.with_disk_radius(state["disk"].radius) if applied else calibration
    )
    state["calibration_check"] = settle(
        findings, workload="virtual", accept_mismatch=p.accept_calibration_mismatch
    )


def virtual_detector(
    name: str, detector: Callable[[dict], Any]
) -> tuple[str, Callable[[dict], None]]:
    def stage(state: dict) -> None:
        from quantem.stem4d.virtual import virtual_images

        state[name] = virtual_images(
            state["frames"], {name: detector(state)}, calibration=state["calibration"]
        )[name]

    return name, stage


def virtual_outputs(state: dict) -> dict[str, Any]:
    return {name: state[name] for name in ("mean_dp", "bf", "adf", "df")}


def virtual_fitted(state: dict) -> dict:
    disk = state["disk"]
    p = state["parameters"]
    return {
        "disk_center_px": list(disk.center),
        "disk_radius_px": disk.radius,
        "units": {
            "mean_dp": "counts",
            "bf": "counts",
            "adf": "counts",
            "df": "counts",
            "df_radii": p.unit if p.inner is not None else "px",
        },
        "calibration": state["calibration"].to_dict(),
        "calibration_check": state["calibration_check"],
    }


def bf_detector(state):
    from quantem.stem4d.virtual import Disk

    return Disk()


def adf_detector(state):
    from quantem.stem4d.virtual import Annulus

    return Annulus()


def df_detector(state):
    from quantem.stem4d.virtual import Annulus

    p = state["parameters"]
    inner = p.inner if p.inner is not None else 1.5 * state["disk"].radius
    outer = p.outer if p.outer is not None else 3.0 * state["disk"].radius
    unit = p.unit if p.inner is not None else "px"
    return Annulus(inner, outer, unit)
