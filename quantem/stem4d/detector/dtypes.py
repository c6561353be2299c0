"""The element types the detector kernels accept, and the type each is accumulated in.

Shared by every kernel module (numba, numpy, CUDA) and the session; numpy only.
"""

from __future__ import annotations

import numpy as np

from quantem.stem4d.errors import UnsupportedDtypeError

#: Element types the CPU kernels accept.
SUPPORTED_DTYPES = tuple(
    np.dtype(name) for name in ("uint8", "uint16", "uint32", "float32", "float64")
)


def accumulator_dtype(dtype: np.dtype | str) -> np.dtype:
    """The dtype products of ``dtype`` data are accumulated in: uint64 or float64.

    Raises
    ------
    UnsupportedDtypeError
        For signed integers, booleans, float16, complex, non-native byte order, or any
        other type the kernels do not support.
    """
    dtype = np.dtype(dtype)
    if not dtype.isnative:
        raise UnsupportedDtypeError(
            f"detector products need native byte order data, got {dtype.str}; "
            "convert with data.astype(data.dtype.newbyteorder('='))"
        )
    if dtype not in SUPPORTED_DTYPES:
        names = ", ".join(str(d) for d in SUPPORTED_DTYPES)
        raise UnsupportedDtypeError(f"detector products support {names} data, got {dtype}")
    return np.dtype(np.uint64) if dtype.kind == "u" else np.dtype(np.float64)


__all__ = ["SUPPORTED_DTYPES", "accumulator_dtype"]
