"""The ``virtual`` compute workload's stages: the mean pattern and BF, ADF and DF images.

Each stage is one call into :mod:`quantem.stem4d.virtual` over the workload's shared state
(ordered by :mod:`harness.run.compute_workloads`); ``virtual_detector(name, detector)``
makes the stage of one virtual detector, ``detector(state)`` giving its geometry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def virtual_disk(state: dict) -> None:
    state["disk"] = state["frames"].disk()
    state["mean_dp"] = state["frames"].pattern_sum()


def virtual_detector(
    name: str, detector: Callable[[dict], Any]
) -> tuple[str, Callable[[dict], None]]:
    def stage(state: dict) -> None:
        from quantem.stem4d.virtual import virtual_images

        p = state["parameters"]
        state[name] = virtual_images(
            state["frames"], {name: detector(state)}, calibration=p.calibration()
        )[name]

    return name, stage


def virtual_outputs(state: dict) -> dict[str, Any]:
    return {name: state[name] for name in ("mean_dp", "bf", "adf", "df")}


def virtual_fitted(state: dict) -> dict:
    disk = state["disk"]
    return {"disk_center_px": list(disk.center), "disk_radius_px": disk.radius}


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
