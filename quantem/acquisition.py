"""The :class:`Acquisition`: a loaded 4D-STEM dataset that owns its resources."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Acquisition:
    """A loaded 4D-STEM acquisition ``(scan_r, scan_c, det_r, det_c)``.

    Parameters
    ----------
    data
        The 4D array (``numpy.ndarray`` for the cpu backend, ``cupy.ndarray`` for cuda),
        or ``None`` for representations that keep the data encoded (see ``encoded``).
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
        self._on_close = list(on_close or [])
        self.closed = False

    @property
    def shape(self) -> tuple[int, int, int, int]:
        scan = tuple(self.metadata["scan_shape"])
        det = tuple(self.metadata["detector_shape"])
        return (*scan, *det)  # type: ignore[return-value]

    @property
    def dtype(self):
        import numpy as np

        if self.data is not None:
            return self.data.dtype
        return np.dtype(self.metadata["dtype"])

    def close(self) -> None:
        """Release every resource this acquisition owns; safe to call twice."""
        if self.closed:
            return
        self.closed = True
        self.data = None
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
