"""Reading ``.qem`` files: validation, checksums, random access, ``load_qem``.

:class:`QemFile` validates everything that ``docs/qem-format.md`` §14 lists before it
touches block bytes, memory-maps the file and decodes only the blocks a request needs.
Its parsed tables are public so another decoder (the CUDA backend, tests) can use them.

The file is read with ``os.pread``, never memory-mapped: a file that shrinks while it
is read (truncated by another process) then gives a clean :class:`QemFormatError`
naming the file, where touching a mapped page past the new end of file would kill the
process with SIGBUS.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.errors import QemFormatError, SourceNotFoundError
from quantem.stem4d.io.qem import format as fmt
from quantem.stem4d.io.qem import tables
from quantem.stem4d.io.qem.checksum import xxh3
from quantem.stem4d.io.qem.progress import frame_progress
from quantem.stem4d.io.transforms import LoadOptions, empty_info, parse_loader_options

#: Decoded sizes above which a full load shows progress (on a TTY), and its batch size.
PROGRESS_MIN_BYTES = 1 << 30
PROGRESS_BATCH_BYTES = 256 << 20


class QemFile:
    """An open, validated ``.qem`` file.

    Parameters
    ----------
    path
        The file.
    verify
        Verify each block's checksum (and trailing padding) before decoding it. Turning
        this off skips only the per-block payload checksums; the header, sections and
        structure are always checked.
    threads
        Decoding threads (default: every core this process may use).

    Attributes
    ----------
    header : format.Header
    metadata : dict
        The METADATA JSON.
    pixel_mask : numpy.ndarray
        uint32 (det_r, det_c).
    model : format.Model
    block_index : numpy.ndarray
        Structured array (``format.BLOCK_INDEX_DTYPE`` fields, native order).
    block_checksums : numpy.ndarray
        uint64 [n_blocks].
    freq, cum, slot_symbol : numpy.ndarray
        Per-context frequency (int64 [C, 256]), cumulative frequency (int64 [C, 257]) and
        slot -> symbol (uint8 [C, 4096]) tables (§7).
    decode_table : numpy.ndarray
        The CPU decoder's packed per-slot table (uint32 [C, 4096]).
    buffer : numpy.ndarray
        The whole file as uint8, read when first asked for (decoding does not use it:
        it reads only the blocks it needs).
    """

    def __init__(
        self, path: str | os.PathLike, *, verify: bool = True, threads: int | None = None
    ) -> None:
        self.path = Path(path)
        self.verify = verify
        self.threads = threads
        self._verified = None
        try:
            self._file = open(self.path, "rb")  # noqa: SIM115 - owned until close()
        except FileNotFoundError:
            raise SourceNotFoundError(self.path, "no such .qem file") from None
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    # -- parsing -------------------------------------------------------------------
    def _open(self) -> None:
        size = os.fstat(self._file.fileno()).st_size
        if size < fmt.HEADER_SIZE + fmt.FOOTER_SIZE:
            raise QemFormatError(
                self.path, f"file too short to be .qem ({size} bytes)", section="header"
            )
        self._size = size
        header = fmt.parse_header(self._read(0, fmt.HEADER_SIZE + fmt.FOOTER_SIZE), self.path)
        if header.file_size != size:
            raise QemFormatError(
                self.path,
                f"file is {size} bytes but the header says {header.file_size} (truncated?)",
                section="header",
            )
        fmt.parse_footer(self._read(size - fmt.FOOTER_SIZE, fmt.FOOTER_SIZE), header, self.path)
        self.header = header
        self._check_sections()
        sections = header.sections
        self.metadata = fmt.parse_metadata(
            self._section_bytes(fmt.SECTION_METADATA), header, self.path
        )
        det = header.detector_shape
        if sections[fmt.SECTION_PIXEL_MASK].present:
            mask = np.frombuffer(self._section_bytes(fmt.SECTION_PIXEL_MASK), dtype="<u4")
            if not mask.any():
                raise QemFormatError(
                    self.path, "present pixel mask is all zero", section="PIXEL_MASK"
                )
            self.pixel_mask = mask.astype(np.uint32).reshape(det)
        else:
            self.pixel_mask = np.zeros(det, dtype=np.uint32)
        declared = self.metadata["pixel_mask"]
        n_masked = int(np.count_nonzero(self.pixel_mask))
        if declared["n_masked"] != n_masked:
            raise QemFormatError(
                self.path,
                f"metadata pixel_mask {declared!r} disagrees with the mask ({n_masked} masked)",
                section="METADATA",
            )
        self.model = fmt.parse_model(self._section_bytes(fmt.SECTION_MODEL), header, self.path)
        self.block_index = fmt.parse_block_index(
            self._section_bytes(fmt.SECTION_BLOCK_INDEX), header, self.path
        )
        self.block_checksums = np.frombuffer(
            self._section_bytes(fmt.SECTION_BLOCK_CHECKSUMS), dtype="<u8"
        ).astype(np.uint64)
        # decode tables (int64 for the numba codec)
        self.freq = self.model.freq.astype(np.int64)
        self.cum = self.model.cum.astype(np.int64)
        self.slot_symbol = self.model.slot_symbol
        self.decode_table = tables.pack_decode_table(self.slot_symbol, self.freq, self.cum)
        # row bands (2.0, §19.1; 1.0: one band, the whole frame)
        self.version_2 = header.version_major == fmt.VERSION_2
        self.n_bands = header.n_bands
        self.band_first_row, self.band_n_rows = fmt.band_geometry(
            *header.detector_shape, header.band_rows
        )
        self.band_quad0 = fmt.band_quads(*header.detector_shape, header.band_rows)
        #: 2.0: uint8 [K, 256], 1 where a value below 255 is coded directly (§19.5).
        self.coded = tables.coded_symbols(self.model.freq) if self.version_2 else None
        self._verified = np.zeros(header.n_blocks, dtype=bool)

    def _check_sections(self) -> None:
        header = self.header
        lengths = [s.length for s in header.sections]
        rules = {
            fmt.SECTION_METADATA: (1, fmt.MAX_METADATA_BYTES),
            fmt.SECTION_BLOCK_INDEX: (fmt.BLOCK_ENTRY_SIZE * header.n_blocks,) * 2,
            fmt.SECTION_BLOCK_CHECKSUMS: (8 * header.n_blocks,) * 2,
        }
        for section_id, (low, high) in rules.items():
            if not low <= lengths[section_id] <= high:
                raise self._section_error(section_id, f"length {lengths[section_id]} invalid")
        mask_length = lengths[fmt.SECTION_PIXEL_MASK]
        if mask_length not in (0, 4 * header.frame_pixels):
            raise self._section_error(fmt.SECTION_PIXEL_MASK, f"length {mask_length} invalid")
        if lengths[fmt.SECTION_MODEL] < fmt.MODEL_HEADER_SIZE:
            raise self._section_error(fmt.SECTION_MODEL, "too short")
        spatial = lengths[fmt.SECTION_SPATIAL_INDEX]
        if spatial and header.version_minor <= fmt.VERSION_MINOR:
            raise self._section_error(fmt.SECTION_SPATIAL_INDEX, "must be absent in 1.0")
        if header.sections[fmt.SECTION_PAYLOAD].xxh3 != 0:
            raise self._section_error(fmt.SECTION_PAYLOAD, "checksum field must be 0")
        if any(lengths[i] > header.file_size for i in range(fmt.N_SECTIONS)):
            raise QemFormatError(self.path, "section longer than the file", section="header")
        offsets, footer_offset = fmt.expected_section_layout(lengths)
        for section_id, section in enumerate(header.sections):
            if section.offset != offsets[section_id] or (
                not section.present and section_id != fmt.SECTION_PAYLOAD and section.xxh3
            ):
                raise self._section_error(section_id, "offset is not the canonical layout")
        if footer_offset + fmt.FOOTER_SIZE != header.file_size:
            raise QemFormatError(
                self.path, "file size disagrees with the section layout", section="footer"
            )
        # padding between header, sections and footer
        position = fmt.HEADER_SIZE
        spans = sorted(
            (s.offset, s.end, i)
            for i, s in enumerate(header.sections)
            if s.present or i == fmt.SECTION_PAYLOAD
        )
        for start, end, section_id in [*spans, (footer_offset, footer_offset, -1)]:
            if start > position and any(self._read(position, start - position)):
                # named after the section that follows the padding (spec §14 step 6)
                where = fmt.SECTION_NAMES[section_id] if section_id >= 0 else "footer"
                raise QemFormatError(self.path, f"nonzero padding before {where}", section=where)
            position = max(position, end)
        for section_id, section in enumerate(header.sections):
            if (
                section.present
                and section_id != fmt.SECTION_PAYLOAD
                and xxh3(self._read(section.offset, section.length)) != section.xxh3
            ):
                raise self._section_error(section_id, "checksum mismatch")

    def _section_error(self, section_id: int, detail: str) -> QemFormatError:
        name = fmt.SECTION_NAMES[section_id]
        return QemFormatError(self.path, f"section {name}: {detail}", section=name)

    def _section_bytes(self, section_id: int) -> bytes:
        section = self.header.sections[section_id]
        return self._read(section.offset, section.length)

    def _read(self, offset: int, length: int, into: Any = None) -> Any:
        """``length`` bytes at ``offset`` (into the writable buffer ``into`` if given).

        A short read means the file shrank since it was opened: a clean error naming the
        file, never a crash or partial data.
        """
        if self._file is None:
            raise ValueError(f"{self.path}: the .qem file is closed")
        view = memoryview(into).cast("B") if into is not None else memoryview(bytearray(length))
        done = 0
        while done < length:
            got = os.preadv(self._file.fileno(), [view[done:length]], offset + done)
            if got == 0:
                size = os.fstat(self._file.fileno()).st_size
                raise QemFormatError(
                    self.path,
                    f"file shrank while being read: {length} bytes needed at offset {offset}, "
                    f"the file now has {size} of the {self._size} it had when opened "
                    "(truncated by another process?)",
                    section="PAYLOAD" if offset >= fmt.HEADER_SIZE else "header",
                )
            done += got
        return into if into is not None else bytes(view)

    @property
    def buffer(self) -> np.ndarray:
        """The whole file as uint8 (read now)."""
        return np.frombuffer(self._read(0, self._size), dtype=np.uint8)

    def _read_blocks(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The extents of blocks ``ids`` packed into one buffer, and each one's offset in it.

        Blocks adjacent in the file are read with one call. Extents are multiples of 16
        bytes starting at 16-byte file offsets, so packed offsets keep the alignment the
        decoder's 16-bit word view needs.
        """
        index = self.block_index[ids]
        offsets = index["offset"].astype(np.int64)
        extents = -(-(offsets + index["length"].astype(np.int64)) // fmt.BLOCK_ALIGN)
        extents = extents * fmt.BLOCK_ALIGN - offsets
        packed_offsets = np.zeros(ids.size, dtype=np.int64)
        np.cumsum(extents[:-1], out=packed_offsets[1:])
        total = int(extents.sum())
        packed = np.zeros(max(total, 2), dtype=np.uint8)
        run_start = 0
        for k in range(1, ids.size + 1):
            if k < ids.size and offsets[k] == offsets[k - 1] + extents[k - 1]:
                continue
            begin, end = int(packed_offsets[run_start]), int(packed_offsets[k - 1] + extents[k - 1])
            if end > begin:
                self._read(int(offsets[run_start]), end - begin, packed[begin:end])
            run_start = k
        return packed, packed_offsets

    def _check_blocks(
        self, ids: np.ndarray, packed: np.ndarray, packed_offsets: np.ndarray
    ) -> None:
        """Checksum and trailing padding of blocks held in a :meth:`_read_blocks` buffer."""
        index = self.block_index
        for k, block in enumerate(ids):
            block = int(block)
            start = int(packed_offsets[k])
            offset, length = int(index["offset"][block]), int(index["length"][block])
            extent = fmt.block_extent_end(offset, length) - offset
            if xxh3(packed[start : start + extent]) != int(self.block_checksums[block]):
                raise QemFormatError(
                    self.path, "block checksum mismatch", section="PAYLOAD", block=block
                )
            if packed[start + length : start + extent].any():
                raise QemFormatError(
                    self.path, "nonzero block padding", section="PAYLOAD", block=block
                )
            self._verified[block] = True

    # -- properties ------------------------------------------------------------------
    @property
    def scan_shape(self) -> tuple[int, int]:
        return self.header.scan_shape

    @property
    def detector_shape(self) -> tuple[int, int]:
        return self.header.detector_shape

    @property
    def n_frames(self) -> int:
        return self.header.n_frames

    @property
    def n_blocks(self) -> int:
        return self.header.n_blocks

    @property
    def dtype(self) -> np.dtype:
        """The stored (decoded) dtype."""
        return self.header.stored_dtype

    @property
    def validity(self) -> np.ndarray:
        return self.pixel_mask == 0

    @property
    def block_frames(self) -> int:
        return self.header.block_frames

    @property
    def n_frame_blocks(self) -> int:
        """Groups of ``block_frames`` frames (1.0: the blocks; 2.0: each has one block
        entry per row band)."""
        return self.header.n_frame_blocks

    def entries(self, frame_blocks: Iterable[int] | np.ndarray) -> np.ndarray:
        """Block-index entries of the given frame blocks, every band of each in order
        (the frame blocks themselves in 1.0)."""
        fb = np.asarray(frame_blocks, dtype=np.int64).reshape(-1)
        bands = self.n_bands
        return (fb[:, None] * bands + np.arange(bands, dtype=np.int64)[None, :]).reshape(-1)

    def blocks_for_frames(self, frames: Iterable[int] | np.ndarray) -> np.ndarray:
        """Sorted unique block ids (block-index entries: every band in 2.0) holding the
        given frames."""
        frames = np.asarray(frames, dtype=np.int64)
        if frames.size and (frames.min() < 0 or frames.max() >= self.n_frames):
            raise IndexError(f"frame out of range [0, {self.n_frames})")
        return self.entries(np.unique(frames // self.block_frames))

    def lane_states(self, blocks: Iterable[int] | None = None) -> np.ndarray:
        """Initial decoder lane states uint32 [n, 32] of RANS blocks (zeros for others).

        They are the first 128 bytes of a RANS block (§10); block checksums are not
        verified by this call.
        """
        ids = np.arange(self.n_blocks) if blocks is None else np.asarray(blocks, dtype=np.int64)
        n_states = fmt.BAND_STATES if self.version_2 else fmt.LANES
        states = np.zeros((ids.size, n_states), dtype=np.uint32)
        for row, block in enumerate(ids):
            if int(self.block_index["mode"][block]) == fmt.MODE_RANS:
                offset = int(self.block_index["offset"][block])
                lanes = self._read(offset, 4 * n_states)
                states[row] = np.frombuffer(lanes, dtype="<u4", count=n_states)
        return states

    # -- checksums ---------------------------------------------------------------------
    def verify_checksums(self, blocks: Iterable[int] | None = None) -> None:
        """Check the XXH3-64 and trailing padding of blocks (all by default)."""
        ids = np.arange(self.n_blocks) if blocks is None else np.asarray(list(blocks))
        ids = ids.astype(np.int64).reshape(-1)
        for first in range(0, ids.size, 4096):  # bounded memory for whole-file checks
            part = ids[first : first + 4096]
            self._check_blocks(part, *self._read_blocks(part))

    # -- decoding ------------------------------------------------------------------------
    def decode_blocks(
        self, block_ids: Sequence[int] | np.ndarray, out: np.ndarray | None = None
    ) -> np.ndarray:
        """Decode the given blocks (in the given order) into ``(frames, det_r, det_c)``.

        2.0: ``block_ids`` are block-index entries; the frames returned are those of their
        frame blocks (every band of each decoded), in order of first appearance.
        """
        ids = np.asarray(block_ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.n_blocks):
            raise IndexError(f"block out of range [0, {self.n_blocks})")
        if self.version_2:
            return self._decode_band_entries(ids, out)
        packed, packed_offsets = self._read_checked(ids)
        index = self.block_index[ids]
        counts = index["n_frames"].astype(np.int64)
        rows = np.zeros(ids.size, dtype=np.int64)
        np.cumsum(counts[:-1], out=rows[1:])
        total = int(counts.sum())
        out = self._frames_out(out, total)
        status = np.zeros(ids.size, dtype=np.int64)
        arguments = (
            packed,
            packed[: packed.size - packed.size % 2].view("<u2"),
            packed_offsets,
            index["mode"].astype(np.int64),
            counts,
            index["n_words"].astype(np.int64),
            index["n_nonzero"].astype(np.int64),
            index["n_escapes"].astype(np.int64),
            rows,
            self.header.stored_itemsize,
            self.header.frame_pixels,
            self.model.group_class,
            self.decode_table,
            out.reshape(total, -1),
            status,
        )
        from quantem.stem4d.io.qem import rans  # numba: imported by the CPU decode only

        self._run_decode(rans.decode_blocks, arguments, ids, status)
        return out

    def _read_checked(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The packed bytes of entries ``ids``, checksummed first when verifying."""
        packed, packed_offsets = self._read_blocks(ids)
        if self.verify:
            pending = ~self._verified[ids]
            self._check_blocks(ids[pending], packed, packed_offsets[pending])
        return packed, packed_offsets

    def _frames_out(self, out: np.ndarray | None, total: int) -> np.ndarray:
        """``out`` checked as ``total`` C-contiguous frames, or a new such array."""
        shape = (total, *self.detector_shape)
        if out is None:
            return np.empty(shape, dtype=self.dtype)
        if out.shape != shape or out.dtype != self.dtype or not out.flags.c_contiguous:
            raise ValueError(f"out must be a C-contiguous {self.dtype} array {shape}")
        return out

    def _run_decode(self, decode, arguments: tuple, ids: np.ndarray, status: np.ndarray) -> None:
        """Decode entries ``ids`` in ranges over the threads; the first failure raises."""
        _run_ranges(lambda first, stop: decode(*arguments, first, stop), ids.size, self.threads)
        if status.any():
            k = int(np.flatnonzero(status)[0])
            raise QemFormatError(
                self.path,
                f"block decode failed: {tables.STATUS_MESSAGES[int(status[k])]}",
                section="PAYLOAD",
                block=int(ids[k]),
            )

    def _decode_band_entries(self, ids: np.ndarray, out: np.ndarray | None) -> np.ndarray:
        frame_blocks = ids // self.n_bands
        _, first = np.unique(frame_blocks, return_index=True)
        frame_blocks = frame_blocks[np.sort(first)]
        ids = self.entries(frame_blocks)
        packed, packed_offsets = self._read_checked(ids)
        index = self.block_index[ids]
        counts = index["n_frames"].astype(np.int64)
        block_rows = np.zeros(frame_blocks.size, dtype=np.int64)
        np.cumsum(counts[:: self.n_bands][:-1], out=block_rows[1:])
        rows = np.repeat(block_rows, self.n_bands)
        total = int(counts[:: self.n_bands].sum())
        det = self.detector_shape
        out = self._frames_out(out, total)
        status = np.zeros(ids.size, dtype=np.int64)
        arguments = (
            packed,
            packed_offsets,
            index["mode"].astype(np.int64),
            counts,
            index["n_words"].astype(np.int64),
            index["n_escapes"].astype(np.int64),
            rows,
            index["band"].astype(np.int64),
            self.band_first_row,
            self.band_n_rows,
            self.band_quad0,
            int(det[1]),
            self.header.stored_itemsize,
            self.model.group_class,
            self.coded,
            self.decode_table,
            out.reshape(total, -1),
            status,
        )
        from quantem.stem4d.io.qem import band_rans  # numba: imported by the CPU decode only

        self._run_decode(band_rans.decode_blocks, arguments, ids, status)
        return out

    def read_frames(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Frames ``[start, stop)`` as ``(n, det_r, det_c)``; decodes only their blocks."""
        stop = self.n_frames if stop is None else stop
        if not 0 <= start <= stop <= self.n_frames:
            raise IndexError(f"frame range [{start}, {stop}) outside [0, {self.n_frames}]")
        if start == stop:
            return np.empty((0, *self.detector_shape), dtype=self.dtype)
        first = start // self.block_frames
        last = (stop - 1) // self.block_frames
        decoded = self.decode_blocks(self.entries(np.arange(first, last + 1)))
        skip = start - first * self.block_frames
        return decoded[skip : skip + stop - start]

    def frame(self, index: int) -> np.ndarray:
        """One frame ``(det_r, det_c)``."""
        if not 0 <= index < self.n_frames:
            raise IndexError(f"frame {index} outside [0, {self.n_frames})")
        return self.read_frames(index, index + 1)[0]

    def read_region(self, rows: tuple[int, int], cols: tuple[int, int]) -> np.ndarray:
        """Scan region ``[r0, r1) x [c0, c1)`` as 4D; decodes only the blocks it touches."""
        (r0, r1), (c0, c1) = rows, cols
        scan_r, scan_c = self.scan_shape
        if not (0 <= r0 < r1 <= scan_r and 0 <= c0 < c1 <= scan_c):
            raise IndexError(f"scan region {rows}x{cols} outside {self.scan_shape}")
        frames = (np.arange(r0, r1)[:, None] * scan_c + np.arange(c0, c1)[None, :]).reshape(-1)
        blocks = np.unique(frames // self.block_frames)
        decoded = self.decode_blocks(self.entries(blocks))
        block_row = np.full(self.n_frame_blocks, -1, dtype=np.int64)
        block_row[blocks] = np.arange(blocks.size) * self.block_frames
        local = block_row[frames // self.block_frames] + frames % self.block_frames
        return decoded[local].reshape(r1 - r0, c1 - c0, *self.detector_shape)

    def iter_frame_batches(
        self, batch_frames: int | None = None
    ) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(start, frames)`` over the whole file in block-aligned batches."""
        per = max(1, (batch_frames or 64 * self.block_frames) // self.block_frames)
        for first in range(0, self.n_frame_blocks, per):
            ids = np.arange(first, min(first + per, self.n_frame_blocks))
            yield first * self.block_frames, self.decode_blocks(self.entries(ids))

    # -- accounting ------------------------------------------------------------------------
    def layout(self) -> dict[str, Any]:
        """Byte accounting of the file (for ``harness qem inspect``)."""
        header = self.header
        index = self.block_index
        modes = index["mode"]
        rans_blocks = modes == fmt.MODE_RANS
        lengths = index["length"].astype(np.int64)
        extents = np.array(
            [
                fmt.block_extent_end(int(o), int(n)) - int(o)
                for o, n in zip(index["offset"], index["length"])
            ],
            dtype=np.int64,
        )
        states = int(rans_blocks.sum()) * (
            fmt.BAND_STATES_SIZE if self.version_2 else fmt.LANE_STATES_SIZE
        )
        escapes = int((index["n_escapes"].astype(np.int64) * header.stored_itemsize).sum())
        words = int(2 * index["n_words"].astype(np.int64).sum())
        raw = int(lengths[modes == fmt.MODE_RAW].sum())
        block_padding = int((extents - lengths).sum())
        rans_padding = int(lengths[rans_blocks].sum()) - states - escapes - words
        sections = {
            fmt.SECTION_NAMES[i]: {"offset": s.offset, "length": s.length, "xxh3": f"{s.xxh3:016x}"}
            for i, s in enumerate(header.sections)
        }
        section_bytes = sum(
            s.length for i, s in enumerate(header.sections) if i != fmt.SECTION_PAYLOAD
        )
        payload = header.sections[fmt.SECTION_PAYLOAD].length
        envelope = fmt.HEADER_SIZE + fmt.FOOTER_SIZE
        padding = header.file_size - envelope - section_bytes - payload
        decoded = header.n_frames * header.frame_pixels * header.stored_itemsize
        return {
            "file_bytes": header.file_size,
            "decoded_bytes": decoded,
            "compression_ratio": decoded / header.file_size,
            "bits_per_pixel": 8 * header.file_size / (header.n_frames * header.frame_pixels),
            "sections": sections,
            "bytes": {
                "envelope": envelope,
                "section_padding": padding,
                "metadata": header.sections[fmt.SECTION_METADATA].length,
                "pixel_mask": header.sections[fmt.SECTION_PIXEL_MASK].length,
                "model": header.sections[fmt.SECTION_MODEL].length,
                "indexes": header.sections[fmt.SECTION_BLOCK_INDEX].length
                + header.sections[fmt.SECTION_BLOCK_CHECKSUMS].length
                + header.sections[fmt.SECTION_SPATIAL_INDEX].length,
                "payload": payload,
                "payload_rans_words": words,
                "payload_stream_states": states,
                "payload_escapes": escapes,
                "payload_raw_blocks": raw,
                "payload_padding": block_padding + rans_padding,
            },
            "blocks": {
                "count": header.n_blocks,
                "frames_per_block": header.block_frames,
                "bands": self.n_bands,
                "band_rows": header.band_rows,
                "zero": int((modes == fmt.MODE_ZERO).sum()),
                "raw": int((modes == fmt.MODE_RAW).sum()),
                "rans": int(rans_blocks.sum()),
            },
            "model": {
                "n_classes": self.model.n_classes,
                "n_contexts": self.model.n_contexts,
                "class_groups": np.bincount(
                    self.model.group_class, minlength=self.model.n_classes
                ).tolist(),
            },
        }

    def header_document(self) -> dict[str, Any]:
        """The archivable header: layout, metadata and the block checksum table.

        Deterministic for a given file, so it can be stored and compared later to prove
        a prepared file has not changed.
        """
        header = self.header
        return {
            "format": "qem",
            "version": [header.version_major, header.version_minor],
            "file_size": header.file_size,
            "header_xxh3": f"{header.header_xxh3:016x}",
            "scan_shape": list(header.scan_shape),
            "detector_shape": list(header.detector_shape),
            "dtype": self.dtype.name,
            "source_dtype": header.source_dtype.name,
            "block_frames": header.block_frames,
            "n_blocks": header.n_blocks,
            **({"band_rows": header.band_rows} if self.version_2 else {}),
            "sections": {
                fmt.SECTION_NAMES[i]: {
                    "offset": s.offset,
                    "length": s.length,
                    "xxh3": f"{s.xxh3:016x}",
                }
                for i, s in enumerate(header.sections)
            },
            "metadata": self.metadata,
            "blocks": [
                {
                    "mode": fmt.MODE_NAMES[int(m)],
                    "offset": int(o),
                    "length": int(n),
                    "xxh3": f"{int(c):016x}",
                }
                for m, o, n, c in zip(
                    self.block_index["mode"],
                    self.block_index["offset"],
                    self.block_index["length"],
                    self.block_checksums,
                )
            ],
        }

    # -- lifetime ----------------------------------------------------------------------------
    def close(self) -> None:
        """Close the file (safe to call twice); decoded arrays are independent copies."""
        file = getattr(self, "_file", None)
        if file is not None:
            self._file = None
            file.close()

    def __enter__(self) -> QemFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<QemFile {self.path.name} {(*self.scan_shape, *self.detector_shape)} "
            f"{self.dtype} {self.n_blocks} blocks>"
        )


def usable_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _run_ranges(work, n_items: int, threads: int | None) -> None:
    """Run ``work(first, stop)`` over ``[0, n_items)`` in small ranges on a thread pool.

    Ranges are pulled by whichever thread is free, so one slow or descheduled thread
    does not hold the others back (a static split does, on a busy machine).
    """
    threads = max(1, min(threads or usable_cores(), n_items))
    if threads == 1:
        work(0, n_items)
        return
    size = max(1, min(8, n_items // (4 * threads)))
    starts = range(0, n_items, size)
    with ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(work, s, min(s + size, n_items)) for s in starts]:
            future.result()


def parse_scan_region(
    scan_region: Any, scan_shape: tuple[int, int]
) -> tuple[tuple[int, int], tuple[int, int]]:
    """Normalise a scan region: ``(r0, r1, c0, c1)``, ``((r0, r1), (c0, c1))`` or two
    slices (step 1), half-open, inside ``scan_shape``."""
    scan_r, scan_c = scan_shape
    try:
        if len(scan_region) == 4:
            r0, r1, c0, c1 = (int(v) for v in scan_region)
        else:
            rows, cols = scan_region
            if isinstance(rows, slice) and isinstance(cols, slice):
                if rows.step not in (None, 1) or cols.step not in (None, 1):
                    raise ValueError("scan_region slices must have step 1")
                r0, r1, _ = rows.indices(scan_r)
                c0, c1, _ = cols.indices(scan_c)
            else:
                (r0, r1), (c0, c1) = ((int(a), int(b)) for a, b in (rows, cols))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"invalid scan_region {scan_region!r}: {exc}") from None
    if not (0 <= r0 < r1 <= scan_r and 0 <= c0 < c1 <= scan_c):
        raise ValueError(f"scan_region {scan_region!r} is empty or outside the scan {scan_shape}")
    return (r0, r1), (c0, c1)


#: The options of a load that returns the stored counts unchanged.
STORED_COUNTS = LoadOptions(apply_mask=False)


def acquisition_metadata(
    qem: QemFile,
    scan_shape: tuple[int, int],
    options: LoadOptions = STORED_COUNTS,
    info: dict | None = None,
) -> dict:
    """Acquisition.metadata for a .qem file, with the HDF5 reader's keys.

    The source's scalar fields (calibration, detector description) come back as
    top-level keys; file-specific keys describe the .qem file; ``qem_source`` keeps
    the original source's kind, file names, identity and SHA-256s. The load-option
    keys (:meth:`LoadOptions.metadata`) describe ``options`` (default: the stored
    counts, unmodified) with the counts of ``info``.
    """
    stored = qem.metadata
    metadata: dict[str, Any] = {}
    metadata.update(stored.get("detector", {}))
    metadata.update(stored.get("calibration", {}))
    payload = qem.header.sections[fmt.SECTION_PAYLOAD]
    metadata.update(
        {
            "scan_shape": tuple(int(n) for n in scan_shape),
            "source_dtype": qem.header.source_dtype.name,
            "n_frames": int(scan_shape[0] * scan_shape[1]),
            "pixel_mask": qem.pixel_mask.copy(),
            "invalid_pixels": int(np.count_nonzero(qem.pixel_mask)),
            "source_files": [str(qem.path)],
            "source_identity": _file_identity(qem.path),
            "source_format": "qem",
            "compressed_bytes": int(payload.length),
            **options.metadata(
                info if info is not None else empty_info(),
                stored_dtype=qem.dtype,
                stored_detector_shape=qem.detector_shape,
            ),
            "qem_source": stored.get("source", {}),
        }
    )
    return metadata


def _file_identity(path: Path) -> dict:
    stat = path.stat()
    return {"path": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def resolve_load_options(
    qem: QemFile,
    dtype: Any,
    apply_mask: Any,
    det_bin: Any,
    scan_shape: Any,
    load_options: LoadOptions | None = None,
) -> LoadOptions:
    """The parsed load options of a ``.qem`` load (every backend's).

    ``scan_shape`` is accepted for routing symmetry with HDF5 and must equal the stored
    one; ``dtype="source"`` means the dtype of the file's source.
    """
    if scan_shape is not None and tuple(scan_shape) != tuple(qem.scan_shape):
        raise QemFormatError(
            qem.path,
            f"scan_shape {tuple(scan_shape)} differs from the stored {qem.scan_shape}",
            section="header",
        )
    if isinstance(dtype, str) and dtype == "source":
        dtype = qem.header.source_dtype.name
    options = parse_loader_options(load_options, dtype, apply_mask, det_bin)
    options.check_detector(qem.detector_shape)
    return options


def dense_metadata(
    qem: QemFile,
    scan_shape: tuple[int, int],
    options: LoadOptions,
    info: dict,
    blocks: np.ndarray,
    region: Sequence[int] | None,
) -> dict:
    """Acquisition.metadata of a dense load (every backend's): the file's keys, the
    load-option keys, the bytes of the blocks decoded and the scan region, if any."""
    metadata = acquisition_metadata(qem, scan_shape, options, info)
    index = qem.block_index[np.asarray(blocks, dtype=np.int64)]
    offsets = index["offset"].astype(np.int64)
    ends = offsets + index["length"].astype(np.int64)
    extent_ends = -(-ends // fmt.BLOCK_ALIGN) * fmt.BLOCK_ALIGN  # block_extent_end, vectorised
    metadata["compressed_bytes"] = int((extent_ends - offsets).sum())
    if region is not None:
        metadata["scan_region"] = [int(v) for v in region]
    return metadata


def load_qem(
    path: str | os.PathLike,
    *,
    dtype: str = "native",
    apply_mask: bool = True,
    det_bin: int = 1,
    verify: bool = True,
    scan_region: Any = None,
    representation: str = "dense",
    threads: int | None = None,
    scan_shape: Any = None,
    progress: bool | None = None,
    load_options: LoadOptions | None = None,
) -> Acquisition:
    """Load a ``.qem`` file on the CPU as a dense numpy :class:`Acquisition`.

    Parameters
    ----------
    dtype, apply_mask, det_bin
        Load options with exactly the HDF5 reader's semantics
        (:meth:`quantem.stem4d.io.transforms.LoadOptions.finish`: mask (default on), then
        dtype, then binning). ``dtype="native"`` gives the stored dtype (the narrowest
        that holds every count); ``"source"`` converts to the dtype of the file's source.
    load_options
        The parsed :class:`~quantem.stem4d.io.transforms.LoadOptions` (what ``io.load``
        passes), instead of ``dtype``, ``apply_mask`` and ``det_bin``.
    verify
        Verify the checksum of every decoded block (default). ``False`` skips only the
        payload checksums; structure and decode checks always run.
    scan_region
        Decode only a rectangle of the scan: ``(r0, r1, c0, c1)``, half-open.
    representation
        Only ``"dense"`` on the CPU (the encoded representation is a CUDA feature).
    threads
        Decoding threads (default: every core this process may use).
    scan_shape
        Accepted for routing symmetry; must equal the stored scan shape if given.
    progress
        Show a progress bar while decoding (default: when stderr is a TTY and the
        decoded data exceeds 1 GiB).
    """
    if representation != "dense":
        raise ValueError(
            f"representation {representation!r} is not available on the cpu backend "
            "(use backend='cuda' for 'encoded')"
        )
    qem = QemFile(path, verify=verify, threads=threads)
    try:
        options = resolve_load_options(qem, dtype, apply_mask, det_bin, scan_shape, load_options)
        if scan_region is None:
            shape = qem.scan_shape
            frames = _decode_all(qem, progress)
            region = None
            blocks = np.arange(qem.n_blocks)
        else:
            rows, cols = parse_scan_region(scan_region, qem.scan_shape)
            shape = (rows[1] - rows[0], cols[1] - cols[0])
            frames = qem.read_region(rows, cols).reshape(-1, *qem.detector_shape)
            region = [rows[0], rows[1], cols[0], cols[1]]
            frame_ids = np.arange(rows[0], rows[1])[:, None] * qem.scan_shape[1]
            blocks = qem.blocks_for_frames(frame_ids + np.arange(cols[0], cols[1]))
        frames, info = options.finish(frames, qem.validity, overwrite=True)
        metadata = dense_metadata(qem, shape, options, info, blocks, region)
        validity = options.finish_validity(qem.validity)
        data = frames.reshape(*shape, *frames.shape[1:])
    finally:
        qem.close()
    return Acquisition(data, metadata, validity, "cpu")


def _decode_all(qem: QemFile, progress: bool | None) -> np.ndarray:
    """Every block; in batches under a progress bar when one is shown."""
    header = qem.header
    decoded_bytes = header.n_frames * header.frame_pixels * header.stored_itemsize
    if progress is None:
        progress = None if decoded_bytes > PROGRESS_MIN_BYTES else False
    ids = np.arange(qem.n_frame_blocks)
    with frame_progress(progress, qem.n_frames, "qem: decoding") as advance:
        out = np.empty((qem.n_frames, *qem.detector_shape), dtype=qem.dtype)
        block_bytes = qem.block_frames * header.frame_pixels * header.stored_itemsize
        per = max(1, PROGRESS_BATCH_BYTES // block_bytes)
        for first in range(0, qem.n_frame_blocks, per):
            batch = ids[first : first + per]
            start = first * qem.block_frames
            stop = min(qem.n_frames, (first + batch.size) * qem.block_frames)
            qem.decode_blocks(qem.entries(batch), out=out[start:stop])
            advance(stop - start)
    return out
