"""The ``parallax`` compute workload's stages: image stack, alignment, fit, reconstruction.

Each stage is one call into :mod:`quantem.stem4d.parallax` over the workload's shared state
(ordered by :mod:`harness.run.compute.workloads`); ``parallax_outputs`` and
``parallax_fitted`` are what a round hashes and records. With ``--c10-guess`` the ``align``
stage is :func:`quantem.stem4d.parallax.guided.guided_align` around the guess (and
``--rotation``, the rotation hint), as ``parallax(c10_guess_angstrom=...)`` does; it needs
the calibration, which is then settled in ``align`` rather than in ``fit``. The ``fit``
stage also checks the fitted shifts against the images
(:func:`quantem.stem4d.parallax.agreement.check_fit`, C10 undetermined where they disagree).
"""

from __future__ import annotations

from typing import Any


def parallax_stack(state: dict) -> None:
    from quantem.stem4d.parallax import build_stack

    state["stack"] = build_stack(state["frames"], bin_factor=state["parameters"].bin_factor)


def _settle_calibration(state: dict) -> None:
    """The fit's calibration and its checks against the data, once a round (the beam angles
    of the BF images follow from it)."""
    from quantem.stem4d.parallax.reconstruct import parallax_calibration

    if "calibration" in state:
        return
    p = state["parameters"]
    calibration, state["calibration_check"] = parallax_calibration(
        p.calibration(),
        state["stack"],
        correct_aberrations=p.correct_aberrations,
        accept_mismatch=p.accept_calibration_mismatch,
    )
    state["calibration"] = calibration
    state["angles"] = state["stack"].positions * (calibration.detector_mrad_per_pixel * 1e-3)


def parallax_align(state: dict) -> None:
    from quantem.stem4d.parallax import align
    from quantem.stem4d.parallax.guided import guided_align

    p = state["parameters"]
    if p.c10_guess_angstrom is None:
        state["alignment"] = align(state["stack"].images, max_shift=p.max_shift)
        return
    _settle_calibration(state)
    state["alignment"] = guided_align(
        state["stack"].images,
        state["angles"],
        state["calibration"].scan_step,
        p.c10_guess_angstrom,
        rotation_deg=p.rotation_deg,
        transpose=p.transpose,
        max_shift=p.max_shift,
    )


def parallax_fit(state: dict) -> None:
    from quantem.stem4d.arrays import to_numpy
    from quantem.stem4d.parallax import fit_aberrations
    from quantem.stem4d.parallax.agreement import check_fit
    from quantem.stem4d.parallax.align import DEFAULT_EDGE

    p = state["parameters"]
    _settle_calibration(state)
    fit = fit_aberrations(
        to_numpy(state["alignment"].shifts),
        state["angles"],
        state["calibration"].scan_step,
        transpose=p.transpose,
        rotation_hint_deg=p.rotation_deg,
    )
    # the shift model checked against the images, as parallax() does
    state["fit"], state["fit_note"] = check_fit(
        state["stack"].images, state["alignment"].shifts, fit, DEFAULT_EDGE
    )


def parallax_reconstruct(state: dict) -> None:
    from quantem.stem4d.arrays import module_for_backend
    from quantem.stem4d.parallax import shift_and_sum
    from quantem.stem4d.parallax.reconstruct import aberration_sign

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


def parallax_outputs(state: dict) -> dict[str, Any]:
    out = {
        "positions": state["stack"].positions,
        "shifts": state["alignment"].shifts,
        "fitted_shifts": state["fit"].fitted_shifts,
        "image": state["image"],
    }
    if "image_corrected" in state:
        out["image_corrected"] = state["image_corrected"]
    return out


def parallax_fitted(state: dict) -> dict:
    from quantem.stem4d.parallax.reconstruct import UNITS

    return {
        **state["fit"].to_dict(),
        "n_images": len(state["stack"].positions),
        "disk_center_px": list(state["stack"].center),
        "disk_radius_px": state["stack"].radius,
        "units": dict(UNITS),
        "calibration": state["calibration"].to_dict(),
        "calibration_check": state["calibration_check"],
        "c10_guess_angstrom": state["parameters"].c10_guess_angstrom,
        "rotation_hint_deg": state["parameters"].rotation_deg,
        "alignment_at_bound": state["alignment"].at_bound,
        "warnings": [] if state.get("fit_note") is None else [state["fit_note"]],
    }
