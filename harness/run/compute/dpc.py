"""The ``dpc`` compute workload's stages: centre of mass, beam shifts, rotation, integration.

Each stage is one call into :mod:`quantem.stem4d.dpc` over the workload's shared state (the
registry, :mod:`harness.run.compute.workloads`, orders them after ``load`` and
``prepare``); ``dpc_outputs`` and ``dpc_fitted`` are what a round hashes and records.
"""

from __future__ import annotations

from typing import Any


def dpc_com(state: dict) -> None:
    from quantem.stem4d.dpc import measure_com

    state["com"] = measure_com(state["frames"])


def dpc_shifts(state: dict) -> None:
    from quantem.stem4d.dpc import beam_shifts, complete_calibration
    from quantem.stem4d.dpc.focus import defocus_note

    p = state["parameters"]
    # A convergence angle alone sets the scale through the measured BF radius (derived).
    state["calibration"] = complete_calibration(p.calibration(), state["frames"])
    state["shifts"] = beam_shifts(state["com"], state["calibration"], p.dtype)
    # the focus check of dpc(c10_angstrom=...), with --c10-guess as the probe's defocus
    note = None
    if p.c10_guess_angstrom is not None:
        note = defocus_note(p.c10_guess_angstrom, state["calibration"])
    state["notes"] = [] if note is None else [note]


def dpc_rotation(state: dict) -> None:
    from quantem.stem4d.dpc import RotationFit, check_dpc_calibration, find_rotation

    p, shifts = state["parameters"], state["shifts"]
    if p.rotation_deg is None:
        state["rotation"] = find_rotation(
            shifts.row, shifts.col, transpose=p.transpose, step=shifts.step
        )
    else:
        state["rotation"] = RotationFit(p.rotation_deg, bool(p.transpose), float("nan"), None)
    state["calibration_check"] = check_dpc_calibration(
        state["calibration"],
        state["frames"],
        shifts,
        state["rotation"],
        rotation_given=p.rotation_deg is not None,
        accept_mismatch=p.accept_calibration_mismatch,
    )


def dpc_integration(state: dict) -> None:
    from quantem.stem4d.dpc import reconstruct

    p = state["parameters"]
    state["dpc"] = reconstruct(
        state["shifts"], state["rotation"], resolve_half_turn=p.rotation_deg is None
    )


def dpc_outputs(state: dict) -> dict[str, Any]:
    grad_r, grad_c, phase, div, _, _ = state["dpc"]
    return {
        "com_row": state["com"].row,
        "com_col": state["com"].col,
        "gradient_row": grad_r,
        "gradient_col": grad_c,
        "phase": phase,
        "divergence": div,
    }


def dpc_fitted(state: dict) -> dict:
    from quantem.stem4d.dpc import units_of

    _, _, _, _, angle, flipped = state["dpc"]
    rotation = state["rotation"]
    return {
        "rotation_deg": angle,
        "transpose": rotation.transpose,
        "half_turn_flipped": flipped,
        "residual_curl": None if rotation.residual != rotation.residual else rotation.residual,
        "gradient_units": state["shifts"].units,
        "units": units_of(state["shifts"].units),
        "mean_com_px": list(state["shifts"].mean_com),
        "calibration": state["calibration"].to_dict(),
        "calibration_check": state["calibration_check"],
        "c10_angstrom": state["parameters"].c10_guess_angstrom,
        "warnings": list(state["notes"]),
    }
