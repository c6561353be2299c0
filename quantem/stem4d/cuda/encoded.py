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

from quantem.stem4d.cuda import qem_pipeline
from quantem.stem4d.cuda.rans_decode import (
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
        An open, validated :class:`quantem.stem4d.io.qem.reader.QemFile`.
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
        # Block-index entries of those frame blocks (2.0: one per row band, band-minor).
        self.n_bands = int(getattr(qem, "n_bands", 1))
        entries = qem.entries(ids) if self.n_bands > 1 else ids
        self._entries = entries
        _, all_extents = qem_pipeline.block_extents(index)
        extents = all_extents[entries]
        resident = np.zeros(entries.size, dtype=np.int64)
        np.cumsum(extents[:-1], out=resident[1:])
        self.nbytes = int(extents.sum())
        self.payload = cupy.empty(max(self.nbytes, 16), dtype=cupy.uint8)
        self.decoder = QemBlockDecoder(qem)
        self.table = DeviceBlockTable.from_index(
            index[entries],
            resident,
            index["frame_start"][entries].astype(np.int64) - self._base,
        )
        self._entry_band = np.asarray(index["band"][entries], dtype=np.int64)
        self._band_tables: dict[bytes, tuple[DeviceBlockTable, np.ndarray]] = {}

        def place(
            i: int, a: int, b: int, device_bytes: Any, starts: np.ndarray, stream: Any
        ) -> None:
            size = int(starts[-1] + extents[b - 1]) if b > a else 0
            if size:
                with stream:
                    at = int(resident[a])
                    self.payload[at : at + size] = device_bytes[:size]

        self.stats = qem_pipeline.stage_blocks(
            qem, entries, place, verify=verify, threads=threads, batch_bytes=batch_bytes
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
        if self.decoder.version_2:
            return mask
        return cupy.asarray(pack_mask_bits(mask, self.decoder.n_groups))

    def _touched_entries(self, mask: np.ndarray) -> tuple[Any, DeviceBlockTable, np.ndarray]:
        """2.0: the quad map of ``mask`` and the resident entries of the bands it touches
        (only those are decoded), with their block ids."""
        import cupy

        quad_map, bands = self.decoder.quad_mask_map(mask)
        key = bands.tobytes()
        if key not in self._band_tables:
            positions = np.flatnonzero(np.isin(self._entry_band, bands))
            self._band_tables = {key: (self._subtable_at(positions), self._entries[positions])}
        table, ids = self._band_tables[key]
        return cupy.asarray(quad_map), table, ids

    def moments(self, mask2d_bool: Any) -> tuple[Any, Any, Any]:
        """Per frame over the mask: total, sum of value*row, sum of value*column (uint64).

        Format 2.0 decodes only the row bands the mask touches.
        """
        import cupy

        bits = self._mask_bits(mask2d_bool)
        sums = tuple(cupy.zeros(self._decoded_frames, dtype=cupy.uint64) for _ in range(3))
        if self.decoder.version_2:
            quad_map, table, ids = self._touched_entries(bits)
            status = cupy.zeros(max(len(table), 1), dtype=cupy.int32)
            self.decoder.reduce_moments(self.payload, table, quad_map, sums, status)
            self._check(status[: len(table)], ids)
        else:
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
        bands = self.n_bands
        entry_positions = (positions[:, None] * bands + np.arange(bands)[None, :]).reshape(-1)
        table = self._subtable_at(entry_positions, np.repeat(np.arange(ids.size), bands))
        status = cupy.zeros(max(entry_positions.size, 1), dtype=cupy.int32)
        self.decoder.decode_dense(self.payload, table, out, status)
        self._check(status[: entry_positions.size], self._entries[entry_positions])
        return out

    def sum_frames(self) -> Any:
        """Sum over every frame per pixel (uint64, detector shape), in bounded batches."""
        import cupy

        from quantem.stem4d.cuda import detector_kernels

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
    def _subtable_at(
        self, positions: np.ndarray, out_blocks: np.ndarray | None = None
    ) -> DeviceBlockTable:
        """Entries at ``positions`` of the resident table; with ``out_blocks``, entry
        ``k`` writes frame block ``out_blocks[k]`` of a fresh output (else the frames
        keep their place in the payload's output)."""
        import cupy

        t = self.table
        sel = cupy.asarray(positions)
        if out_blocks is None:
            out_frame = t.out_frame[sel]
        else:
            out_frame = cupy.asarray(np.asarray(out_blocks, dtype=np.int64) * self.block_frames)
        return DeviceBlockTable(
            t.offset[sel],
            t.mode[sel],
            t.n_frames[sel],
            t.n_words[sel],
            t.n_nonzero[sel],
            t.n_escapes[sel],
            out_frame,
            t.band[sel],
        )

    def _check(self, status: Any, ids: np.ndarray) -> None:
        import cupy

        # no entries (a mask touching no band of a 2.0 file): nothing decoded, nothing failed
        if status.size and int(status.max()) != 0:
            raise_block_error(cupy.asnumpy(status), ids, self.path)

    def close(self) -> None:
        """Release the device memory (the payload, tables and decoder scratch)."""
        self.payload = None
        self.table = None
        self.decoder = None

    def __repr__(self) -> str:
        return f"<EncodedPayload {self.n_blocks} blocks, {self.nbytes} bytes on the GPU>"
