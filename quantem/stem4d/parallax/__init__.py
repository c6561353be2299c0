"""Parallax (tilt-corrected bright field): BF stack, alignment, aberration fit, shift-and-sum.

See ``docs/compute.md`` and :mod:`quantem.stem4d.parallax.reconstruct`.
"""

from quantem.stem4d.parallax.align import Alignment, align
from quantem.stem4d.parallax.fit import AberrationFit, fit_aberrations
from quantem.stem4d.parallax.reconstruct import ParallaxResult, parallax, shift_and_sum
from quantem.stem4d.parallax.stack import BrightFieldStack, build_stack, select_groups

__all__ = [
    "AberrationFit",
    "Alignment",
    "BrightFieldStack",
    "ParallaxResult",
    "align",
    "build_stack",
    "fit_aberrations",
    "parallax",
    "select_groups",
    "shift_and_sum",
]
