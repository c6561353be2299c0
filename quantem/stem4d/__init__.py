"""quantem.stem4d: fast, exact 4D-STEM IO, detector kernels and phase methods.

A namespace portion of ``quantem``: this project ships no ``quantem/__init__.py``, so it
installs beside electronmicroscopy/quantem without overwriting it. Importing this package
never imports CuPy or PyTorch; the CUDA backend is loaded only when it is asked for.
"""

from quantem.stem4d import errors
from quantem.stem4d.acquisition import Acquisition

__all__ = ["Acquisition", "errors"]
__version__ = "0.1.0"
