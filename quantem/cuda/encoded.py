"""The ``representation="encoded"`` payload: a ``.qem`` file's blocks resident on the GPU.

The whole PAYLOAD (every block extent, checksums verified while it streams in) stays on
the device, several times smaller than the decoded frames. Detector queries decode on the
fly: ``masked_sum`` and ``moments`` run the fused decode+reduce kernel (frames are never
materialised); ``sum_frames`` decodes bounded batches of blocks into a scratch array and
sums them exactly; ``frame`` decodes the one block holding the frame. The object provides
the same four methods as a backend kernel module (contract B), without the data argument.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from quantem.cuda import qem_pipeline
from quantem.cuda.rans_decode import (
    DeviceBlockTable,
    QemBlockDecoder,
    pack_mask_bits,
    raise_block_error,
)

SCRATCH_FRAME_BYTES = 256 << 20


class EncodedPayload:
    """A verified ``.qem`` payload resident on the current CUDA device.

    Parameters
    ----------
    qem
        An open, validated :class:`quantem.io.qem.reader.QemFile`.
    verify
        Verify every block's checksum and padding while loading.
    threads, batch_bytes
        Reader threads and staging batch size.
    """

    def __init__(
        self,
        qem: Any,
        *,
        verify: bool = True,
        threads: int | None = None,
        batch_bytes: int = qem_pipeline.DEFAULT_BATCH_BYTES,
        rows: tuple[int, int] | None = None,
    ) -> None:
        import cupy

        index = qem.block_index
        self.path = qem.path
        scan_r, scan_c = (int(v) for v in qem.scan_shape)
        # ``rows``: only the blocks holding these scan rows are resident (one GPU's share
        # of a sharded load); products cover exactly those rows.
        r0, r1 = (0, scan_r) if rows is None else (int(rows[0]), int(rows[1]))
        if not 0 <= r0 <= r1 <= scan_r:
            raise ValueError(f"rows {rows} are outside the scan's {scan_r} rows")
        self.rows = (r0, r1)
        self.scan_shape = (r1 - r0, scan_c)
        self.detector_shape = tuple(int(v) for v in qem.detector_shape)
        self.dtype = np.dtype(qem.dtype)
        self.block_frames = bf = int(qem.block_frames)
        self.first_frame = r0 * scan_c
        self.n_frames = (r1 - r0) * scan_c
        last = self.first_frame + self.n_frames
        if self.n_frames:
            ids = np.arange(self.first_frame // bf, -(-last // bf), dtype=np.int64)
        else:
            ids = np.zeros(0, dtype=np.int64)
        self._block_ids = ids
        self.n_blocks = int(ids.size)
        #: Flat frame of the first resident block's first frame (outputs start there).
        self._base = int(ids[0]) * bf if ids.size else self.first_frame
        self._decoded_frames = (
            min(int(qem.n_frames), (int(ids[-1]) + 1) * bf) - self._base if ids.size else 0
        )
        _, all_extents = qem_pipeline.block_extents(index)
        extents = all_extents[ids]
        resident = np.zeros(ids.size, dtype=np.int64)
        np.cumsum(extents[:-1], out=resident[1:])
        self.nbytes = int(extents.sum())
        self.payload = cupy.empty(max(self.nbytes, 16), dtype=cupy.uint8)
        self.decoder = QemBlockDecoder(qem)
        self.table = DeviceBlockTable.from_index(
            index[ids], resident, index["frame_start"][ids].astype(np.int64) - self._base
        )

        def place(
            i: int, a: int, b: int, device_bytes: Any, starts: np.ndarray, stream: Any
        ) -> None:
            size = int(starts[-1] + extents[b - 1]) if b > a else 0
            if size:
                with stream:
                    at = int(resident[a])
                    self.payload[at : at + size] = device_bytes[:size]

        self.stats = qem_pipeline.stage_blocks(
            qem, ids, place, verify=verify, threads=threads, batch_bytes=batch_bytes
        )

    # -- contract B ------------------------------------------------------------------
    def _mask_bits(self, mask2d_bool: Any) -> Any:
        import cupy

        mask = np.asarray(cupy.asnumpy(mask2d_bool) if hasattr(mask2d_bool, "get") else mask2d_bool)
        if mask.shape != self.detector_shape:
            raise ValueError(
                f"mask shape {mask.shape} does not match the detector shape {self.detector_shape}"
            )
        if mask.dtype != np.bool_:
            raise TypeError(f"mask must be boolean, got {mask.dtype}")
        return cupy.asarray(pack_mask_bits(mask, self.decoder.n_groups))

    def moments(self, mask2d_bool: Any) -> tuple[Any, Any, Any]:
        """Per frame over the mask: total, sum of value*row, sum of value*column (uint64)."""
        import cupy

        bits = self._mask_bits(mask2d_bool)
        sums = tuple(cupy.zeros(self._decoded_frames, dtype=cupy.uint64) for _ in range(3))
        status = cupy.zeros(self.n_blocks, dtype=cupy.int32)
        self.decoder.reduce_moments(self.payload, self.table, bits, sums, status)
        self._check(status, self._block_ids)
        skip = self.first_frame - self._base  # frames of the first block before our rows
        total, rows, cols = (s[skip : skip + self.n_frames].reshape(self.scan_shape) for s in sums)
        return total, rows, cols

    def masked_sum(self, mask2d_bool: Any) -> Any:
        """Sum of each frame over the mask (uint64, scan shape), decoded on the fly."""
        return self.moments(mask2d_bool)[0]

    def decode_blocks(self, block_ids: np.ndarray) -> Any:
        """Dense frames of the given (resident) blocks, in order:
        ``(len * block_frames, det_r, det_c)`` (frames past the end of the acquisition are
        left unwritten)."""
        import cupy

        ids = np.asarray(block_ids, dtype=np.int64)
        first = int(self._block_ids[0]) if self.n_blocks else 0
        positions = ids - first
        if positions.size and (positions.min() < 0 or positions.max() >= self.n_blocks):
            raise IndexError(f"blocks {ids.tolist()} are not resident on this payload")
        out = cupy.empty((ids.size * self.block_frames, *self.detector_shape), dtype=self.dtype)
        table = self._subtable(positions)
        status = cupy.zeros(ids.size, dtype=cupy.int32)
        self.decoder.decode_dense(self.payload, table, out, status)
        self._check(status, ids)
        return out

    def sum_frames(self) -> Any:
        """Sum over every frame per pixel (uint64, detector shape), in bounded batches."""
        import cupy

        from quantem.cuda import detector_kernels

        frame_bytes = self.detector_shape[0] * self.detector_shape[1] * self.dtype.itemsize
        per_batch = max(1, SCRATCH_FRAME_BYTES // (frame_bytes * self.block_frames))
        total = cupy.zeros(self.detector_shape, dtype=cupy.uint64)
        first, last = self.first_frame, self.first_frame + self.n_frames
        for a in range(0, self.n_blocks, per_batch):
            ids = self._block_ids[a : a + per_batch]
            frames = self.decode_blocks(ids)
            start = int(ids[0]) * self.block_frames
            lo = max(first - start, 0)
            hi = min(last - start, frames.shape[0])
            total += detector_kernels.sum_frames(frames[lo:hi])
        return total

    def frame(self, i: int) -> Any:
        """Frame ``i`` (flat scan index within this payload's rows), decoding only its block."""
        index = int(i)
        if not -self.n_frames <= index < self.n_frames:
            raise IndexError(f"frame {i} is out of range for {self.n_frames} frames")
        flat = self.first_frame + index % self.n_frames
        block = flat // self.block_frames
        frames = self.decode_blocks(np.array([block]))
        return frames[flat - block * self.block_frames].copy()

    # -- helpers -----------------------------------------------------------------------
    def _subtable(self, positions: np.ndarray) -> DeviceBlockTable:
        import cupy

        t = self.table
        sel = cupy.asarray(positions)
        k = cupy.arange(positions.size, dtype=cupy.int64) * self.block_frames
        return DeviceBlockTable(
            t.offset[sel],
            t.mode[sel],
            t.n_frames[sel],
            t.n_words[sel],
            t.n_nonzero[sel],
            t.n_escapes[sel],
            k,
        )

    def _check(self, status: Any, ids: np.ndarray) -> None:
        import cupy

        if int(status.max()) != 0:
            raise_block_error(cupy.asnumpy(status), ids, self.path)

    def close(self) -> None:
        """Release the device memory (the payload, tables and decoder scratch)."""
        self.payload = None
        self.table = None
        self.decoder = None

    def __repr__(self) -> str:
        return f"<EncodedPayload {self.n_blocks} blocks, {self.nbytes} bytes on the GPU>"
