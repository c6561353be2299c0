"""One acquisition sharded across the GPUs of a host (``io.load(..., devices=[0, 1])``).

The scan rows are split into contiguous blocks, one per listed GPU (:func:`split_rows`).
One host thread per GPU, each inside that GPU's ``cupy.cuda.Device`` context, runs the
one-GPU pipeline (:mod:`quantem.stem4d.cuda.hdf5_pipeline`, :mod:`quantem.stem4d.cuda.qem_pipeline`,
:class:`~quantem.stem4d.cuda.encoded.EncodedPayload`) on its own rows: it reads, decodes and
holds its block, with its own pinned staging slots, streams and batch readers; the pread
piece pool is shared, because the host's read bandwidth is one floor for every GPU.

``acq.data`` is a :class:`ShardedData`: the :class:`ScanBlock` list plus
:meth:`ShardedData.gather` (to the host or onto one GPU). Detector products run on every
GPU at once and are combined on the first listed GPU (the *home* device) exactly:

* per-frame products (masked sums, moments) are per-row results, so combining them is a
  copy into place: the same bits as one GPU;
* the summed pattern (``sum_frames``) adds the per-GPU uint64 partial sums in device-list
  order: integer addition, exact in any order;
* centre of mass and the mean pattern are computed by the detector session from those
  exact integers, so they equal the one-GPU float64 results bit for bit.

GPU products take only unsigned integer data (``docs/cuda-backend.md``), so no float
reduction is ever split across GPUs.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.backends import format_gpu_uuid
from quantem.stem4d.io.formats import is_qem

#: Where the dense blocks' contract-B kernels live (the host tests swap in the cpu ones).
DENSE_KERNELS = "quantem.stem4d.cuda.detector_kernels"


def device_count() -> int:
    """CUDA devices visible to this process."""
    import cupy

    return int(cupy.cuda.runtime.getDeviceCount())


def parse_devices(devices: Any, available: int) -> list[int]:
    """Validate ``devices`` (``"all"`` or a non-empty sequence of distinct device ids).

    Raises ``ValueError`` naming the offending entry and how many GPUs there are.
    """
    if isinstance(devices, str):
        if devices != "all":
            raise ValueError(f"devices must be 'all' or a list of GPU ids, got {devices!r}")
        if available < 1:
            raise ValueError("devices='all': no CUDA device is visible")
        return list(range(available))
    if isinstance(devices, (int, np.integer)) or not isinstance(devices, Sequence):
        raise ValueError(
            f"devices must be 'all' or a list of GPU ids such as [0, 1], got {devices!r}"
        )
    parsed: list[int] = []
    for entry in devices:
        if isinstance(entry, (bool, np.bool_)) or not isinstance(entry, (int, np.integer)):
            raise ValueError(f"devices: {entry!r} is not a GPU id (an int)")
        if not 0 <= int(entry) < available:
            raise ValueError(
                f"devices: GPU {int(entry)} does not exist; this host has {available} "
                f"CUDA device{'s' if available != 1 else ''} (ids 0-{available - 1})"
                if available
                else f"devices: GPU {int(entry)} does not exist; no CUDA device is visible"
            )
        if int(entry) in parsed:
            raise ValueError(f"devices: GPU {int(entry)} is listed twice")
        parsed.append(int(entry))
    if not parsed:
        raise ValueError("devices: the list is empty")
    return parsed


def split_rows(scan_rows: int, n_parts: int) -> list[tuple[int, int]]:
    """Split ``scan_rows`` rows into ``n_parts`` contiguous, non-empty half-open blocks,
    the first ``scan_rows % n_parts`` one row longer."""
    if n_parts < 1:
        raise ValueError("n_parts must be at least 1")
    if n_parts > scan_rows:
        raise ValueError(
            f"cannot split {scan_rows} scan rows over {n_parts} GPUs (each needs a row)"
        )
    base, extra = divmod(int(scan_rows), int(n_parts))
    blocks = []
    start = 0
    for k in range(n_parts):
        stop = start + base + (1 if k < extra else 0)
        blocks.append((start, stop))
        start = stop
    return blocks


@dataclass(frozen=True)
class ScanBlock:
    """One GPU's share of a sharded acquisition.

    ``rows`` are the half-open scan rows ``[r0, r1)`` it holds (all columns); ``data`` is
    the CuPy array ``(r1 - r0, scan_c, det_r, det_c)`` on ``device`` for a dense load,
    ``encoded`` the resident :class:`~quantem.stem4d.cuda.encoded.EncodedPayload` for an encoded
    one; ``load_stats`` that GPU's pipeline statistics (bytes, seconds, staging).
    """

    device: int
    rows: tuple[int, int]
    data: Any = None
    encoded: Any = None
    load_stats: dict | None = None

    @property
    def n_rows(self) -> int:
        return self.rows[1] - self.rows[0]

    def kernels(self) -> Any:
        """The contract-B provider of this block: its encoded payload or the dense kernels."""
        if self.encoded is not None:
            return self.encoded
        return importlib.import_module(DENSE_KERNELS)

    def call(self, name: str, *args: Any) -> Any:
        provider = self.kernels()
        if self.encoded is not None:
            return getattr(provider, name)(*args)
        return getattr(provider, name)(self.data, *args)


class ShardedData(Sequence[ScanBlock]):
    """The blocks of a sharded acquisition, in scan order, and their exact combination.

    A sequence of :class:`ScanBlock`. :meth:`gather` assembles the whole
    ``(scan_r, scan_c, det_r, det_c)`` array on the host or one GPU; ``masked_sum``,
    ``moments``, ``sum_frames`` and ``frame`` (contract B, without the data argument) run
    on every GPU at once and return their result on the home device (the first listed).
    """

    def __init__(
        self,
        blocks: Sequence[ScanBlock],
        scan_shape: tuple[int, int],
        detector_shape: tuple[int, int],
        dtype: Any,
    ) -> None:
        self.blocks = tuple(blocks)
        self.scan_shape = (int(scan_shape[0]), int(scan_shape[1]))
        self.detector_shape = (int(detector_shape[0]), int(detector_shape[1]))
        self.dtype = np.dtype(dtype)
        expected = 0
        for block in self.blocks:
            if block.rows[0] != expected or block.rows[1] < block.rows[0]:
                raise ValueError(
                    f"scan blocks must tile the rows in order; block of GPU {block.device} "
                    f"holds rows {block.rows}, expected to start at {expected}"
                )
            expected = block.rows[1]
        if expected != self.scan_shape[0]:
            raise ValueError(f"scan blocks cover {expected} of {self.scan_shape[0]} rows")
        self.home = self.blocks[0].device

    # -- sequence ----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, k: Any) -> Any:
        return self.blocks[k]

    def __iter__(self) -> Iterator[ScanBlock]:
        return iter(self.blocks)

    @property
    def devices(self) -> tuple[int, ...]:
        return tuple(b.device for b in self.blocks)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (*self.scan_shape, *self.detector_shape)

    @property
    def ndim(self) -> int:
        return 4

    @property
    def nbytes(self) -> int:
        """Bytes resident over all GPUs (dense blocks, or encoded payloads)."""
        return sum(
            int(b.encoded.nbytes if b.encoded is not None else b.data.nbytes) for b in self.blocks
        )

    @property
    def encoded(self) -> bool:
        return any(b.encoded is not None for b in self.blocks)

    def __repr__(self) -> str:
        parts = ", ".join(f"GPU {b.device}: rows {b.rows[0]}-{b.rows[1]}" for b in self.blocks)
        return f"<ShardedData {self.shape} {self.dtype} [{parts}]>"

    # -- gathering ---------------------------------------------------------------------
    def gather(self, device: int | None = None) -> Any:
        """The whole acquisition as one array: numpy on the host (``device=None``) or a
        CuPy array on GPU ``device`` (peer copies of every block). Encoded blocks have no
        dense frames to gather (load ``representation="dense"``)."""
        import cupy

        if self.encoded:
            raise ValueError(
                "an encoded sharded acquisition has no dense frames to gather; "
                "load it with representation='dense'"
            )
        if device is None:
            out = np.empty(self.shape, dtype=self.dtype)
            for block in self.blocks:
                with cupy.cuda.Device(block.device):
                    out[block.rows[0] : block.rows[1]] = cupy.asnumpy(block.data)
            return out
        return _place_rows(
            [(block.rows, block.device, block.data) for block in self.blocks],
            int(device),
            self.shape,
            self.dtype,
        )

    # -- contract B --------------------------------------------------------------------
    def _on_each(self, work: Callable[[ScanBlock], Any]) -> list[Any]:
        """``work(block)`` on every non-empty block at once, one thread per GPU inside its
        device context; every GPU has finished when this returns."""
        return run_per_device(
            [(b.device, b) for b in self.blocks if b.n_rows], lambda b: _finished(b, work)
        )

    def masked_sum(self, mask2d_bool: Any) -> Any:
        """Per-frame sum over the mask, ``(scan_r, scan_c)`` uint64 on the home device."""
        parts = self._on_each(lambda b: b.call("masked_sum", mask2d_bool))
        return self._rows_on_home(parts)

    def moments(self, mask2d_bool: Any) -> tuple[Any, Any, Any]:
        """Per-frame total and first moments over the mask (uint64, home device)."""
        parts = self._on_each(lambda b: b.call("moments", mask2d_bool))
        return tuple(self._rows_on_home([p[k] for p in parts]) for k in range(3))  # type: ignore[return-value]

    def sum_frames(self) -> Any:
        """Per-pixel sum over every frame (uint64), the GPUs' partial sums added on the
        home device in device-list order (integer addition: exact)."""
        import cupy

        parts = self._on_each(lambda b: b.call("sum_frames"))
        with cupy.cuda.Device(self.home):
            total = cupy.zeros(self.detector_shape, dtype=np.uint64)
            for part, block in zip(parts, (b for b in self.blocks if b.n_rows)):
                total += _copy_to(part, block.device, self.home)
            return total

    def frame(self, i: int) -> Any:
        """Frame ``i`` (flat, row-major over the whole scan) from the GPU holding it, on
        the home device."""
        import cupy

        n = self.scan_shape[0] * self.scan_shape[1]
        index = int(i)
        if not -n <= index < n:
            raise IndexError(f"frame {i} is out of range for {n} frames")
        index %= n
        row = index // self.scan_shape[1]
        block = next(b for b in self.blocks if b.rows[0] <= row < b.rows[1])
        local = index - block.rows[0] * self.scan_shape[1]
        with cupy.cuda.Device(block.device):
            result = block.call("frame", local)
            cupy.cuda.runtime.deviceSynchronize()
        with cupy.cuda.Device(self.home):
            return _copy_to(result, block.device, self.home)

    def pixel_stack(self, rows: Any, cols: Any) -> Any:
        """Images of single detector pixels ``(n_pixels, scan_r, scan_c)`` float64 on the
        home device: every GPU gathers the pixels of its rows, the home device assembles
        them and converts once (the same operations as a dense one-GPU stack)."""
        import cupy

        if self.encoded:
            raise ValueError("pixel_stack needs dense blocks")
        rows = np.asarray(rows, dtype=np.int64)
        cols = np.asarray(cols, dtype=np.int64)

        def gather(block: ScanBlock) -> Any:
            return cupy.ascontiguousarray(block.data[:, :, cupy.asarray(rows), cupy.asarray(cols)])

        parts = self._on_each(gather)
        blocks = [b for b in self.blocks if b.n_rows]
        gathered = _place_rows(
            [(b.rows, b.device, p) for b, p in zip(blocks, parts)],
            self.home,
            (*self.scan_shape, int(rows.size)),
            self.dtype,
        )
        with cupy.cuda.Device(self.home):
            return cupy.ascontiguousarray(cupy.moveaxis(gathered, -1, 0)).astype(cupy.float64)

    def _rows_on_home(self, parts: list[Any]) -> Any:
        blocks = [b for b in self.blocks if b.n_rows]
        dtype = np.dtype(parts[0].dtype) if parts else np.dtype(np.uint64)
        return _place_rows(
            [(b.rows, b.device, p) for b, p in zip(blocks, parts)],
            self.home,
            self.scan_shape,
            dtype,
        )

    def close(self) -> None:
        """Drop every block (their device memory returns to each GPU's pool)."""
        for block in self.blocks:
            if block.encoded is not None:
                block.encoded.close()
        self.blocks = ()


def _finished(block: ScanBlock, work: Callable[[ScanBlock], Any]) -> Any:
    """Run ``work`` and wait for the GPU, so results can be copied from another device."""
    import cupy

    result = work(block)
    cupy.cuda.runtime.deviceSynchronize()
    return result


def _copy_to(array: Any, source: int, target: int) -> Any:
    """A contiguous copy of ``array`` (on GPU ``source``) on GPU ``target``."""
    import cupy

    with cupy.cuda.Device(source):
        array = cupy.ascontiguousarray(array)
    if source == target:
        return array
    with cupy.cuda.Device(target):
        out = cupy.empty(array.shape, dtype=array.dtype)
        if array.nbytes:
            out.data.copy_from_device(array.data, array.nbytes)
        return out


def _place_rows(
    parts: Sequence[tuple[tuple[int, int], int, Any]],
    target: int,
    shape: tuple[int, ...],
    dtype: Any,
) -> Any:
    """One array of ``shape`` on GPU ``target`` with each ``(rows, device, array)`` part
    copied into its rows (device to device; no host round trip)."""
    import cupy

    with cupy.cuda.Device(target):
        out = cupy.empty(shape, dtype=dtype)
        row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * np.dtype(dtype).itemsize
        for (r0, r1), device, array in parts:
            with cupy.cuda.Device(device):
                array = cupy.ascontiguousarray(array)
            nbytes = (r1 - r0) * row_bytes
            if array.nbytes != nbytes:
                raise ValueError(
                    f"GPU {device}'s part holds {array.nbytes} bytes, rows {r0}-{r1} need {nbytes}"
                )
            if nbytes:
                out[r0:r1].data.copy_from_device(array.data, nbytes)
        cupy.cuda.runtime.deviceSynchronize()
        return out


def run_per_device(items: Sequence[tuple[int, Any]], work: Callable[[Any], Any]) -> list[Any]:
    """``work(item)`` for every ``(device, item)`` at once, one thread per entry, each
    inside ``cupy.cuda.Device(device)``; results in input order. Every thread finishes
    before the first error (in input order) is raised, so no GPU is still writing into
    memory when the caller unwinds."""
    import cupy

    def run(device: int, item: Any) -> Any:
        with cupy.cuda.Device(device):
            return work(item)

    if len(items) == 1:
        return [run(*items[0])]
    with ThreadPoolExecutor(len(items), thread_name_prefix="quantem-gpu") as pool:
        futures = [pool.submit(run, device, item) for device, item in items]
        errors = [f.exception() for f in futures]
    for error in errors:
        if error is not None:
            raise error
    return [f.result() for f in futures]


# -- loading ---------------------------------------------------------------------------
def load(path: str | os.PathLike, *, devices: Any, **options: Any) -> Acquisition:
    """``io.load(path, backend="cuda", devices=...)``: the scan rows split over the GPUs.

    Options as the one-GPU loaders (:func:`quantem.stem4d.cuda.loaders.load_hdf5`,
    :func:`~quantem.stem4d.cuda.loaders.load_qem`) except ``device`` and ``scan_region``.
    ``acq.data`` is a :class:`ShardedData`; ``acq.metadata["load_stats"]["devices"]``
    lists each GPU's rows, bytes and pipeline seconds.
    """
    if "device" in options:
        raise ValueError("give either device= (one GPU) or devices= (sharded), not both")
    if options.get("scan_region") is not None:
        raise ValueError("a sharded load (devices=...) takes no scan_region")
    ids = parse_devices(devices, device_count())
    if is_qem(path):
        return _load_qem(path, ids, **options)
    return _load_hdf5(path, ids, **options)


def _device_stats(block_rows: tuple[int, int], device: int, stats: dict) -> dict[str, Any]:
    import cupy

    entry: dict[str, Any] = {"device": device, "rows": list(block_rows)}
    props = cupy.cuda.runtime.getDeviceProperties(device)
    name = props.get("name", b"")
    entry["name"] = name.decode() if isinstance(name, bytes) else str(name)
    uuid = props.get("uuid")
    if isinstance(uuid, (bytes, bytearray)):
        entry["uuid"] = format_gpu_uuid(uuid)  # as the report's environment names it
    entry.update(stats)
    return entry


def _load_hdf5(
    path: str | os.PathLike,
    devices: list[int],
    *,
    dtype: str = "native",
    apply_mask: bool = True,
    det_bin: int = 1,
    scan_shape: tuple[int, int] | None = None,
    fresh_index: bool = False,
    index_dir: str | os.PathLike | None = None,
    threads: int | None = None,
    batch_bytes: int | None = None,
    staging: str = "pread",
    verify_source: bool = False,
    load_options: Any = None,
) -> Acquisition:
    from quantem.stem4d.cuda import loaders
    from quantem.stem4d.cuda.hdf5_pipeline import DEFAULT_BATCH_BYTES
    from quantem.stem4d.cuda.staging import prestart_threads
    from quantem.stem4d.io.arina import expected_chunk_hashes, open_arina
    from quantem.stem4d.io.transforms import parse_loader_options

    prestart_threads(threads, devices=devices)
    batch_bytes = batch_bytes or DEFAULT_BATCH_BYTES
    options = parse_loader_options(load_options, dtype, apply_mask, det_bin)
    source = open_arina(path, scan_shape=scan_shape, index_dir=index_dir, fresh_index=fresh_index)
    options.check_detector(source.detector_shape)
    if verify_source:
        expected_chunk_hashes(source)  # refuses an index without checksums before reading
    scan_r, scan_c = (int(v) for v in source.scan_shape)
    rows = split_rows(scan_r, len(devices))

    def load_rows(block_rows: tuple[int, int]) -> tuple:
        r0, r1 = block_rows
        with loaders.releasing_on_error():
            frames, stats, info = loaders._decode_hdf5(
                source, options, threads, batch_bytes, staging,
                frame_range=(r0 * scan_c, r1 * scan_c), verify_source=verify_source,
            )  # fmt: skip
            return frames.reshape(r1 - r0, scan_c, *frames.shape[1:]), stats, info

    results = run_per_device(list(zip(devices, rows)), load_rows)
    info = _sum_totals([r[2] for r in results])
    first = results[0][0]
    blocks = []
    per_device = []
    for device, block_rows, (data, stats, _) in zip(devices, rows, results):
        load_stats = loaders.hdf5_load_stats(stats)
        blocks.append(ScanBlock(device, block_rows, data=data, load_stats=load_stats))
        per_device.append(_device_stats(block_rows, device, load_stats))
    det = tuple(int(v) for v in first.shape[-2:])
    sharded = ShardedData(blocks, (scan_r, scan_c), det, first.dtype)  # type: ignore[arg-type]
    metadata = dict(source.metadata)
    metadata.update(
        options.metadata(
            info, stored_dtype=source.dtype, stored_detector_shape=source.detector_shape
        )
    )
    metadata["load_stats"] = _combined_stats(per_device, "compressed_bytes")
    validity = options.finish_validity(source.validity)
    return Acquisition(
        sharded, metadata, validity, "cuda", representation="sharded", on_close=[sharded.close]
    )


def _sum_totals(parts: list[dict]) -> dict[str, Any]:
    """The finishing counters of every GPU's rows: integer counts add, anything else (the
    same detector crop on every GPU, ``det_bin_dropped``) is taken from the first."""
    total: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
                total[key] = int(total.get(key, 0)) + int(value)
            else:
                total.setdefault(key, value)
    return total


def _combined_stats(per_device: list[dict], bytes_key: str) -> dict[str, Any]:
    """``load_stats`` of a sharded load: totals plus one entry per GPU, each with its
    share of the bytes."""
    total_bytes = sum(int(d.get(bytes_key, 0)) for d in per_device)
    for entry in per_device:
        entry["bytes_share"] = (int(entry.get(bytes_key, 0)) / total_bytes) if total_bytes else 0.0
    return {
        bytes_key: total_bytes,
        "pipeline_seconds": max(float(d.get("pipeline_seconds", 0.0)) for d in per_device),
        "read_seconds": sum(float(d.get("read_seconds", 0.0)) for d in per_device),
        "devices": per_device,
    }


def _load_qem(
    path: str | os.PathLike,
    devices: list[int],
    *,
    representation: str = "dense",
    verify: bool = True,
    scan_region: Any = None,
    dtype: str = "native",
    apply_mask: bool = True,
    det_bin: int = 1,
    threads: int | None = None,
    scan_shape: tuple[int, int] | None = None,
    batch_bytes: int | None = None,
    load_options: Any = None,
) -> Acquisition:
    from quantem.stem4d.cuda import loaders
    from quantem.stem4d.cuda.qem_pipeline import DEFAULT_BATCH_BYTES
    from quantem.stem4d.cuda.staging import prestart_threads
    from quantem.stem4d.io.qem.reader import QemFile, dense_metadata, resolve_load_options

    prestart_threads(threads, devices=devices)
    batch_bytes = batch_bytes or DEFAULT_BATCH_BYTES
    if representation not in ("dense", "encoded"):
        raise ValueError(f"representation must be 'dense' or 'encoded', got {representation!r}")
    qem = QemFile(path, verify=False)
    try:
        options = resolve_load_options(qem, dtype, apply_mask, det_bin, scan_shape, load_options)
        scan_r, scan_c = (int(v) for v in qem.scan_shape)
        rows = split_rows(scan_r, len(devices))
        if representation == "encoded":
            if options.changes_layout(qem.dtype):
                raise ValueError(
                    "representation='encoded' keeps the stored counts: it takes no "
                    "scan_region, dtype or det_bin (load 'dense' for those)"
                )
            return _load_qem_encoded(qem, devices, rows, verify, threads, batch_bytes)

        def load_rows(block_rows: tuple[int, int]) -> tuple:
            r0, r1 = block_rows
            with loaders.releasing_on_error():
                frames, block_ids, _, stats = loaders._decode_qem_dense(
                    qem, (r0, r1, 0, scan_c), verify, threads, batch_bytes
                )
                frames, info = loaders.finish_in_place(options, frames, qem.validity)
                data = frames.reshape(r1 - r0, scan_c, *frames.shape[1:])
                return data, info, block_ids, stats

        results = run_per_device(list(zip(devices, rows)), load_rows)
        first = results[0][0]
        blocks, per_device, read_blocks = [], [], set()
        for device, block_rows, (data, _, block_ids, stats) in zip(devices, rows, results):
            # A block straddling two GPUs' rows is read and decoded by both.
            read_blocks.update(block_ids.tolist())
            load_stats = {
                "payload_bytes": stats.copied_bytes,
                "batches": stats.batches,
                "read_seconds": stats.read_seconds,
                "pipeline_seconds": stats.wall_seconds,
            }
            blocks.append(ScanBlock(device, block_rows, data=data, load_stats=load_stats))
            per_device.append(_device_stats(block_rows, device, load_stats))
        info = _sum_totals([r[1] for r in results])
        det = tuple(int(v) for v in first.shape[-2:])
        sharded = ShardedData(blocks, (scan_r, scan_c), det, first.dtype)  # type: ignore[arg-type]
        unique_blocks = np.array(sorted(read_blocks), dtype=np.int64)
        metadata = dense_metadata(qem, (scan_r, scan_c), options, info, unique_blocks, None)
        metadata["load_stats"] = _combined_stats(per_device, "payload_bytes")
        validity = options.finish_validity(qem.validity)
        return Acquisition(
            sharded, metadata, validity, "cuda", representation="sharded", on_close=[sharded.close]
        )
    finally:
        qem.close()


def _load_qem_encoded(
    qem: Any,
    devices: list[int],
    rows: list[tuple[int, int]],
    verify: bool,
    threads: int | None,
    batch_bytes: int,
) -> Acquisition:
    from quantem.stem4d.cuda import loaders
    from quantem.stem4d.cuda.encoded import EncodedPayload
    from quantem.stem4d.io.qem.reader import acquisition_metadata

    def load_rows(block_rows: tuple[int, int]) -> Any:
        with loaders.releasing_on_error():
            return EncodedPayload(
                qem, verify=verify, threads=threads, batch_bytes=batch_bytes, rows=block_rows
            )

    payloads = run_per_device(list(zip(devices, rows)), load_rows)
    blocks, per_device = [], []
    for device, block_rows, payload in zip(devices, rows, payloads):
        load_stats = {
            "payload_bytes": payload.nbytes,
            "batches": payload.stats.batches,
            "read_seconds": payload.stats.read_seconds,
            "pipeline_seconds": payload.stats.wall_seconds,
        }
        blocks.append(ScanBlock(device, block_rows, encoded=payload, load_stats=load_stats))
        per_device.append(_device_stats(block_rows, device, load_stats))
    sharded = ShardedData(blocks, qem.scan_shape, qem.detector_shape, qem.dtype)
    metadata = acquisition_metadata(qem, qem.scan_shape)
    metadata["resident_bytes"] = sum(p.nbytes for p in payloads)
    metadata["load_stats"] = _combined_stats(per_device, "payload_bytes")
    return Acquisition(
        sharded,
        metadata,
        qem.validity,
        "cuda",
        representation="sharded",
        on_close=[sharded.close],
    )


__all__ = ["ScanBlock", "ShardedData", "parse_devices", "split_rows"]
