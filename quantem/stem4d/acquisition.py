"""The :class:`Acquisition`: a loaded 4D-STEM dataset that owns its resources."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from quantem.stem4d.interop import array_to_torch, check_output, require_torch


class Acquisition:
    """A loaded 4D-STEM acquisition ``(scan_r, scan_c, det_r, det_c)``.

    Parameters
    ----------
    data
        The 4D array (``numpy.ndarray`` for the cpu backend, ``cupy.ndarray`` for cuda),
        or ``None`` for representations that keep the data encoded (see ``encoded``).
        After ``output="torch"`` (:meth:`set_output`) it is a
        ``torch.Tensor`` sharing that array's memory; :attr:`array` keeps the array.
    metadata
        Plain dict: ``scan_shape``, ``detector_shape``, ``dtype``, ``n_frames``,
        ``pixel_mask`` (numpy uint32), ``source_files``, ``source_identity``, and any
        scalar detector fields.
    validity
        Boolean detector mask, True where a pixel is valid (``pixel_mask == 0``).
    backend
        ``"cpu"`` or ``"cuda"``.
    encoded
        Backend object holding a resident encoded payload (``representation="encoded"``),
        which detector sessions query directly.
    on_close
        Callables run once by :meth:`close` (free pinned/device memory, close files).
    """

    def __init__(
        self,
        data: Any,
        metadata: dict,
        validity: Any,
        backend: str,
        *,
        encoded: Any = None,
        representation: str = "dense",
        on_close: list[Callable[[], None]] | None = None,
    ) -> None:
        self.data = data
        self.metadata = metadata
        self.validity = validity
        self.backend = backend
        self.encoded = encoded
        self.representation = representation
        #: ``"array"`` or ``"torch"``: what ``data`` and detector products are.
        self.output = "array"
        self._array: Any = None  # the numpy/CuPy array behind a tensor ``data``
        self._on_close = list(on_close or [])
        self.closed = False

    @property
    def array(self) -> Any:
        """The numpy (cpu) or CuPy (cuda) array holding the data, whatever ``output`` is.

        ``None`` for an encoded representation or a closed acquisition. Kernels use this.
        """
        return self._array if self._array is not None else self.data

    def dense_array(self) -> Any:
        """:attr:`array`, or ``TypeError`` when there is none (encoded or closed): what
        :func:`quantem.stem4d.interop.to_torch` hands to PyTorch."""
        array = self.array
        if array is None:
            raise TypeError(
                "to_torch needs a dense, open acquisition "
                f"(got representation {self.representation!r}"
                f"{', closed' if self.closed else ''})"
            )
        return array

    @property
    def shape(self) -> tuple[int, int, int, int]:
        scan = tuple(self.metadata["scan_shape"])
        det = tuple(self.metadata["detector_shape"])
        return (*scan, *det)  # type: ignore[return-value]

    def set_output(self, output: str) -> Acquisition:
        """Hand out ``output``: ``"array"`` (numpy/CuPy ``data``) or ``"torch"``.

        With ``"torch"`` a dense acquisition's ``data`` becomes a ``torch.Tensor``
        sharing the array's memory (DLPack, no copy); :attr:`array` keeps the array for
        the kernels, and detector sessions over the acquisition return tensors. An
        encoded acquisition keeps ``data`` None; only its products become tensors.
        Returns ``self``.
        """
        check_output(output)
        if output == self.output:
            return self
        if output == "torch":
            require_torch()
            array = self.array
            if array is not None:
                self.data, self._array = array_to_torch(array), array
        elif self._array is not None:
            self.data, self._array = self._array, None
        self.output = output
        return self

    @property
    def dtype(self):
        import numpy as np

        array = self.array
        if array is not None:
            return array.dtype
        return np.dtype(self.metadata["dtype"])

    def close(self) -> None:
        """Release every resource this acquisition owns; safe to call twice."""
        if self.closed:
            return
        self.closed = True
        self.data = None
        self._array = None
        self.encoded = None
        callbacks, self._on_close = self._on_close, []
        for callback in reversed(callbacks):
            callback()

    def __enter__(self) -> Acquisition:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.representation}, {self.dtype}"
        return f"<Acquisition {self.shape} {self.backend} {state}>"
