"""quantem: fast, exact 4D-STEM IO and detector kernels.

Importing this package never imports CuPy or PyTorch; the CUDA backend is loaded
only when it is asked for.
"""

from quantem import errors
from quantem.acquisition import Acquisition

__all__ = ["Acquisition", "errors"]
__version__ = "0.1.0"
