"""Make docs/figures/ssb_abtem.png: SSB on the abTEM SrTiO3 fixtures against the potential.

    PYTHONPATH=$PWD python docs/figures/ssb_abtem.py

Fits the aberrations (200 TPE trials + Nelder-Mead, seed 0) on the thin sample at both
doses, and shows the band-limited projected potential, the two SSB phases and the plain
CoM-integrated (iDPC) phase at the low dose, each with its Pearson r against the potential.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from _ssb_abtem import calibration, com_integrated_phase, load, potential  # noqa: E402
from _ssb_helpers import pearson  # noqa: E402

from quantem.stem4d.ssb import fit_aberrations, prepare, reconstruct  # noqa: E402


def main() -> None:
    cal = calibration("thin")
    reference = potential("thin", cal)
    panels = [("projected potential (band-limited to 2α)", reference, None)]
    for dose in ("high", "low"):
        prepared = prepare(load("thin", dose), cal)
        fit = fit_aberrations(prepared, n_trials=200, seed=0)
        phase = reconstruct(prepared, fit.aberrations).phase
        polar = fit.aberrations.to_polar()
        label = f"SSB phase, {dose} dose\nC10 {polar['C10'] / 10:.2f} nm, C12 {polar['C12'] / 10:.2f} nm"
        panels.append((label, phase, pearson(phase, reference)))
    idpc = com_integrated_phase("thin", "low", cal)
    panels.append(("CoM-integrated (iDPC) phase, low dose", idpc, pearson(idpc, reference)))
    fig, axes = plt.subplots(1, len(panels), figsize=(3.0 * len(panels), 3.7), dpi=80)
    for ax, (title, image, r) in zip(axes, panels):
        ax.imshow(image, cmap="gray")
        ax.set_title(title if r is None else f"{title}\nPearson r = {r:.3f}", fontsize=8)
        ax.set_axis_off()
    fig.suptitle(
        "abTEM SrTiO3 [001], 4 unit cells, 200 kV, 25 mrad, C10 5 nm, C12 2 nm", fontsize=9
    )
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    out = Path(__file__).with_suffix(".png")
    fig.savefig(out)
    print(out, [None if r is None else round(r, 3) for _, _, r in panels])


if __name__ == "__main__":
    main()
