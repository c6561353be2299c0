"""GPU decoding of ``.qem`` blocks (``docs/qem-format.md`` §10-§12), dense or fused.

:class:`QemBlockDecoder` uploads the file's model once (slot->symbol tables and packed
frequency/cumulative tables, copied into shared memory by each thread block) and launches
``rans_decode.cu``: one warp per block over a persistent grid, either writing dense frames
or (``reduce=True``) summing the masked pixels of each frame as they are decoded (total,
value*row, value*column in uint64) without ever materialising the frames.

Block status codes are those of the CPU codec (:data:`quantem.stem4d.io.qem.tables.STATUS_MESSAGES`),
so a corrupt block raises the same :class:`~quantem.stem4d.errors.QemFormatError` text on both
backends.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from quantem.stem4d.errors import QemFormatError

SOURCE_FILE = "rans_decode.cu"
WARPS_PER_CTA = 16
GROUP_PIXELS = 8
SHARED_CLASSES_MAX = 16384  # class maps up to this many groups live in shared memory
#: The kernels of ``rans_decode.cu`` (the same blocks, checks and status codes): ``v1`` the
#: original one-warp-per-block decoder, ``v2`` its leaner phase B (see the file's notes).
KERNEL_FUNCTIONS = {"v1": "decode_qem_blocks", "v2": "decode_qem_blocks_v2"}
#: The kernel of format 2.0 files (per-pixel symbols in row bands, ``docs/qem-format.md``
#: §19), whatever ``kernel`` says (v1/v2 decode 1.0 blocks only).
BAND_KERNEL = "decode_qem2_blocks"
#: 2.0 quad maps up to this many quads live in shared memory (as in ``rans_decode.cu``).
SHARED_QUADS_MAX = 16384
#: The kernel :class:`QemBlockDecoder` uses unless told otherwise; ``QUANTEM_RANS_KERNEL``
#: (``v1`` or ``v2``) overrides it for a process.
DEFAULT_KERNEL = "v2"


@dataclass
class DeviceBlockTable:
    """Block fields on the device, in launch order (cupy arrays)."""

    offset: Any  # int64, byte offset of each block in the device payload buffer
    mode: Any  # uint32
    n_frames: Any  # uint32
    n_words: Any  # uint32
    n_nonzero: Any  # uint32
    n_escapes: Any  # uint32
    out_frame: Any  # int64, output frame of the block's first frame
    band: Any = None  # uint32, the entry's row band (2.0; zeros for 1.0)

    @classmethod
    def from_index(
        cls, index: np.ndarray, offsets: np.ndarray, out_frames: np.ndarray
    ) -> DeviceBlockTable:
        import cupy

        def u32(name: str) -> Any:
            return cupy.asarray(np.ascontiguousarray(index[name], dtype=np.uint32))

        return cls(
            offset=cupy.asarray(np.ascontiguousarray(offsets, dtype=np.int64)),
            mode=u32("mode"),
            n_frames=u32("n_frames"),
            n_words=u32("n_words"),
            n_nonzero=u32("n_nonzero"),
            n_escapes=u32("n_escapes"),
            out_frame=cupy.asarray(np.ascontiguousarray(out_frames, dtype=np.int64)),
            band=u32("band"),
        )

    def __len__(self) -> int:
        return int(self.offset.size)

    def slice(self, a: int, b: int) -> DeviceBlockTable:
        return DeviceBlockTable(
            self.offset[a:b],
            self.mode[a:b],
            self.n_frames[a:b],
            self.n_words[a:b],
            self.n_nonzero[a:b],
            self.n_escapes[a:b],
            self.out_frame[a:b],
            None if self.band is None else self.band[a:b],
        )


def pack_mask_bits(mask: np.ndarray, n_groups: int) -> np.ndarray:
    """A boolean detector mask as one byte per pixel group (bit i = pixel 8j + i)."""
    flat = np.zeros(n_groups * GROUP_PIXELS, dtype=bool)
    values = np.asarray(mask, dtype=bool).reshape(-1)
    flat[: values.size] = values
    return np.packbits(flat, bitorder="little")


def selected_kernel(kernel: str | None = None) -> str:
    """``kernel``, else ``QUANTEM_RANS_KERNEL``, else :data:`DEFAULT_KERNEL` (checked)."""
    name = kernel or os.environ.get("QUANTEM_RANS_KERNEL") or DEFAULT_KERNEL
    if name not in KERNEL_FUNCTIONS:
        raise ValueError(
            f"unknown rANS kernel {name!r}; expected one of {sorted(KERNEL_FUNCTIONS)}"
        )
    return name


def shared_bytes(kernel: str, itemsize: int, n_groups: int, n_contexts: int) -> int:
    """Dynamic shared memory of one thread block (the formulas in ``rans_decode.cu``)."""
    tables = n_contexts * (4096 + 1024)
    if kernel == "v1":
        per_warp = 1536
    else:
        per_warp = 256 * (4 if itemsize == 4 else 2) + 512
    classes = -(-n_groups // 16) * 16 if n_groups <= SHARED_CLASSES_MAX else 0
    return tables + WARPS_PER_CTA * per_warp + classes


def band_shared_bytes(n_classes: int, n_quads: int) -> int:
    """Dynamic shared memory of the 2.0 kernel (tables, coded bitmaps, quad map)."""
    quads = n_quads if n_quads <= SHARED_QUADS_MAX else 0
    return n_classes * (4 * 4096 + 32) + -(-quads // 16) * 16


def decoder_defines(
    itemsize: int, det: tuple[int, int], n_contexts: int, reduce: int
) -> dict[str, int]:
    """The compile-time constants of ``rans_decode.cu`` (also what the ahead-of-time build
    of :mod:`quantem.stem4d.cuda.aot` specialises)."""
    frame_pixels = int(det[0]) * int(det[1])
    n_groups = -(-frame_pixels // GROUP_PIXELS)
    return {
        "ELEM_SIZE": int(itemsize),
        "FRAME_PIXELS": frame_pixels,
        "N_GROUPS": n_groups,
        "DET_C": int(det[1]),
        "N_CONTEXTS": int(n_contexts),
        "WARPS_PER_CTA": WARPS_PER_CTA,
        "REDUCE": int(reduce),
        "VECTOR_STORES": int(frame_pixels % GROUP_PIXELS == 0),
        "SHARED_CLASSES": int(n_groups <= SHARED_CLASSES_MAX),
    }


class QemBlockDecoder:
    """Compiled block kernels and device model tables for one open ``QemFile``."""

    def __init__(
        self, qem: Any, kernel: str | None = None, extra_defines: dict[str, int] | None = None
    ) -> None:
        import cupy

        from quantem.stem4d.cuda.module_loader import load_module

        header = qem.header
        #: Format 2.0 file (per-pixel symbols in row bands): the ``decode_qem2_blocks``
        #: kernel, whatever ``kernel`` says.
        self.version_2 = bool(getattr(qem, "version_2", False))
        #: Which kernel of ``rans_decode.cu`` runs (``v1``, ``v2`` or, for 2.0, ``2.0``).
        self.kernel = "2.0" if self.version_2 else selected_kernel(kernel)
        self.path = qem.path
        self.itemsize = int(header.stored_itemsize)
        self.dtype = np.dtype(qem.dtype)
        self.det = tuple(int(v) for v in qem.detector_shape)
        self.frame_pixels = self.det[0] * self.det[1]
        self.n_groups = -(-self.frame_pixels // GROUP_PIXELS)
        self.block_frames = int(header.block_frames)
        model = qem.model
        n_contexts = int(model.n_contexts)
        freq = np.asarray(model.freq, dtype=np.uint32)
        cum = np.asarray(model.cum, dtype=np.uint32)[:, :256]
        self.sym = cupy.asarray(np.ascontiguousarray(model.slot_symbol, dtype=np.uint8))
        self.fc = cupy.asarray(np.ascontiguousarray(freq | (cum << 16), dtype=np.uint32))
        self.group_class = cupy.asarray(np.ascontiguousarray(model.group_class, dtype=np.uint8))
        if self.version_2:
            self.n_classes = int(model.n_classes)
            self.band_rows = int(header.band_rows)
            self.n_quads = int(model.group_class.size)
            self.band_first_row = np.asarray(qem.band_first_row)
            self.band_n_rows = np.asarray(qem.band_n_rows)
            self.band_quad0 = np.asarray(qem.band_quad0)
            self.tables = cupy.asarray(np.ascontiguousarray(qem.decode_table, dtype=np.uint32))
            coded = np.asarray(qem.coded, dtype=bool)
            bits = np.packbits(coded, axis=1, bitorder="little").view("<u4")
            self.coded = cupy.asarray(np.ascontiguousarray(bits, dtype=np.uint32))
            self.shared_bytes = band_shared_bytes(self.n_classes, self.n_quads)
            # the 1.0 specialisation of the same class count: the same fatbins
            n_contexts = 2 * self.n_classes
            function = BAND_KERNEL
        else:
            self.shared_bytes = shared_bytes(self.kernel, self.itemsize, self.n_groups, n_contexts)
            function = KERNEL_FUNCTIONS[self.kernel]
        self._kernels = {}
        for reduce in (0, 1):
            defines = decoder_defines(self.itemsize, self.det, n_contexts, reduce)
            # extra_defines (benchmarks only): e.g. V2_MIN_CTAS, compiled by NVRTC
            defines.update(extra_defines or {})
            module = load_module(SOURCE_FILE, defines)
            kernel = module.get_function(function)
            kernel.max_dynamic_shared_size_bytes = self.shared_bytes
            self._kernels[reduce] = kernel
        attributes = cupy.cuda.Device().attributes
        sms = int(attributes["MultiProcessorCount"])
        # Persistent grid: as many thread blocks as can be resident at once.
        threads = 32 * WARPS_PER_CTA
        smem_per_sm = int(attributes.get("MaxSharedMemoryPerMultiprocessor", 228 * 1024))
        self.ctas = {}
        for reduce, kernel in self._kernels.items():
            per_sm = min(
                65536 // max(int(getattr(kernel, "num_regs", 64) or 64) * threads, 1),
                smem_per_sm // (self.shared_bytes + 1024),
                int(attributes.get("MaxThreadsPerMultiProcessor", 2048)) // threads,
            )
            self.ctas[reduce] = sms * max(1, per_sm)
        #: Registers per thread of the dense (0) and fused (1) kernels, as compiled.
        self.registers = {
            reduce: int(getattr(kernel, "num_regs", 0) or 0)
            for reduce, kernel in self._kernels.items()
        }
        self.max_ctas = max(self.ctas.values())
        self.scratch_per_warp = 0 if self.version_2 else self.block_frames * self.n_groups
        self.mask_scratch = cupy.empty(
            max(1, self.max_ctas * WARPS_PER_CTA * self.scratch_per_warp), dtype=cupy.uint8
        )
        self._dummy_u64 = cupy.zeros(1, dtype=cupy.uint64)
        self._dummy_u8 = cupy.zeros(1, dtype=cupy.uint8)

    def _launch(
        self,
        reduce: int,
        payload: Any,
        table: DeviceBlockTable,
        status: Any,
        out: Any,
        mask_bits: Any,
        sums: tuple[Any, Any, Any],
        stream: Any,
    ) -> None:
        import cupy

        n = len(table)
        if n == 0:
            return
        ctas = min(self.ctas[reduce], -(-n // WARPS_PER_CTA))
        if self.version_2:
            quad_map = mask_bits if reduce else self.group_class
            args = (
                payload, table.offset, table.mode, table.n_frames, table.n_words,
                table.n_escapes, table.out_frame, table.band, np.int32(n),
                np.int32(self.band_rows), np.int32(self.n_classes), np.int32(self.n_quads),
                quad_map, self.tables, self.coded, out, *sums, status,
            )  # fmt: skip
            with stream if stream is not None else cupy.cuda.Stream.null:
                self._kernels[reduce](
                    (ctas,), (32 * WARPS_PER_CTA,), args, shared_mem=self.shared_bytes
                )
            return
        args = (
            payload,
            table.offset,
            table.mode,
            table.n_frames,
            table.n_words,
            table.n_nonzero,
            table.n_escapes,
            table.out_frame,
            np.int32(n),
            self.group_class,
            self.sym,
            self.fc,
            self.mask_scratch,
            np.int64(self.scratch_per_warp),
            out,
            mask_bits,
            *sums,
            status,
        )
        with stream if stream is not None else cupy.cuda.Stream.null:
            self._kernels[reduce](
                (ctas,), (32 * WARPS_PER_CTA,), args, shared_mem=self.shared_bytes
            )

    def decode_dense(
        self, payload: Any, table: DeviceBlockTable, out: Any, status: Any, stream: Any = None
    ) -> None:
        """Enqueue decoding of the table's blocks into ``out`` (frames, det_r, det_c)."""
        dummy = self._dummy_u64
        self._launch(0, payload, table, status, out, self._dummy_u8, (dummy, dummy, dummy), stream)

    def quad_mask_map(self, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """2.0: the fused kernel's quad map for a boolean detector ``mask`` (class | the
        quad's 4 mask bits << 4, uint8 [n_quads]) and the bands the mask touches."""
        det_c = self.det[1]
        flat = np.asarray(mask, dtype=bool).reshape(-1)
        nibbles = np.zeros(self.n_quads * 4, dtype=bool)
        touched = []
        for k in range(self.band_first_row.size):
            a = int(self.band_first_row[k]) * det_c
            n = int(self.band_n_rows[k]) * det_c
            q0 = int(self.band_quad0[k]) * 4
            nibbles[q0 : q0 + n] = flat[a : a + n]
            if flat[a : a + n].any():
                touched.append(k)
        bits = np.packbits(nibbles.reshape(-1, 4), axis=1, bitorder="little").reshape(-1)
        classes = np.asarray(self.group_class.get(), dtype=np.uint8)
        return (classes | (bits << 4)).astype(np.uint8), np.asarray(touched, dtype=np.int64)

    def reduce_moments(
        self,
        payload: Any,
        table: DeviceBlockTable,
        mask_bits: Any,
        sums: tuple[Any, Any, Any],
        status: Any,
        stream: Any = None,
    ) -> None:
        """Enqueue fused decode + masked moments into ``sums`` (uint64 per output frame)."""
        dummy_out = cupy_empty_like_dtype(self.dtype)
        self._launch(1, payload, table, status, dummy_out, mask_bits, sums, stream)


def cupy_empty_like_dtype(dtype: np.dtype) -> Any:
    import cupy

    return cupy.empty(1, dtype=dtype)


def raise_block_error(status_host: np.ndarray, block_ids: np.ndarray, path: Any) -> None:
    """Raise QemFormatError for the first failed block, with the CPU codec's message."""
    from quantem.stem4d.io.qem.tables import STATUS_MESSAGES

    bad = np.flatnonzero(status_host)
    if bad.size == 0:
        return
    k = int(bad[0])
    code = int(status_host[k])
    message = STATUS_MESSAGES.get(code, f"unknown status {code}")
    raise QemFormatError(
        path, f"block decode failed: {message}", section="PAYLOAD", block=int(block_ids[k])
    )
