"""Parallax (tilt-corrected bright field): BF stack, alignment, aberration fit, shift-and-sum.

See ``docs/compute.md`` and :mod:`quantem.parallax.reconstruct`.
"""

from quantem.parallax.align import Alignment, align
from quantem.parallax.fit import AberrationFit, fit_aberrations
from quantem.parallax.reconstruct import ParallaxResult, parallax, shift_and_sum
from quantem.parallax.stack import BrightFieldStack, build_stack, select_groups

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
