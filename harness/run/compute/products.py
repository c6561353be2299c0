"""The ``products`` compute workload's stages: the detector session's exact products.

Each stage is one call of :class:`quantem.stem4d.detector.DetectorSession` (what
``quantem.stem4d.detector.prepare`` returns), the API the README shows: the exact summed
pattern (uint64), BF and ADF over the disk it finds, and the centre of mass from exact
integer moments. The registry (:mod:`harness.run.compute.workloads`) orders them after
``load``.
"""

from __future__ import annotations

from typing import Any


def products_session(state: dict) -> None:
    from quantem.stem4d.detector import prepare

    state["session"] = prepare(state["acq"])


def products_mean_dp(state: dict) -> None:
    state["mean_dp"] = state["session"].mean_dp_exact()


def products_bf(state: dict) -> None:
    state["bf"] = state["session"].bf()


def products_adf(state: dict) -> None:
    state["adf"] = state["session"].adf()


def products_com(state: dict) -> None:
    state["com"] = state["session"].center_of_mass()


def products_outputs(state: dict) -> dict[str, Any]:
    com = state["com"]
    return {
        "mean_dp": state["mean_dp"],
        "bf": state["bf"],
        "adf": state["adf"],
        "com_row": com.row,
        "com_col": com.col,
    }


#: What bounds each product stage: one pass over the whole data, or over the lines of its
#: mask (harness.run.floors); ``prepare`` reads no data and has none.
PRODUCTS_FLOORS = {
    "mean_dp": "read_once",
    "bf": "mask_lines",
    "adf": "mask_lines",
    "com": "read_once",
}


def products_masks(state: dict) -> dict[str, Any]:
    """The detector masks of the BF and ADF stages (as the session draws them), host bool."""
    from quantem.stem4d.arrays import to_numpy
    from quantem.stem4d.detector.masks import annulus_mask, disk_mask

    acq = state["acq"]
    disk = state["session"].bright_field_disk()
    shape = tuple(acq.shape[2:])
    validity = to_numpy(acq.validity).astype(bool)
    return {
        "bf": disk_mask(shape, disk.center, disk.radius) & validity,
        "adf": annulus_mask(shape, disk.center, disk.radius, None) & validity,
    }


def products_fitted(state: dict) -> dict:
    disk = state["session"].bright_field_disk()
    return {"disk_center_px": [float(v) for v in disk.center], "disk_radius_px": float(disk.radius)}
