"""Benchmark of the CUDA backend: floors, the naive path, and ours, in one run.

Measures on the current GPU (docs/performance/results.md records the runs):

* floors: parallel pread of the compressed chunk bytes into pinned memory (warm page cache,
  and cold after per-file eviction), the host-to-device copy of those bytes, and a
  device-to-device copy of the decoded size;
* the naive path: h5py + hdf5plugin decode of one shard on the CPU, then ``cupy.asarray``,
  extrapolated to the whole acquisition;
* ours: HDF5 warm load (page cache and process warm), HDF5 cold load (after
  ``posix_fadvise(DONTNEED)`` per file, confirmed by a ``mincore`` residency probe), QEM
  warm load, QEM decode-kernel throughput on the resident payload, BF ``masked_sum`` on the
  dense and on the encoded representation, peak GPU memory of the encoded load.

Data: the synthetic ARINA generator (``quantem.io.synthetic``) writes the first
``--generate-shards`` shards of the full acquisition model in parallel processes; when the
acquisition has more shards than that, the remaining shards are byte copies of the
generated ones (cycled, with their frame-number attributes rewritten), so the full-size
file set has the generator's chunk statistics without generating every frame. The
``.qem`` file is converted from the full acquisition (loaded on the GPU, copied to the
host, written with ``save_qem``).

Usage::

    python benchmarks/gpu_load.py --dir /tmp/bench --scan 512 512 --det 192 192 \
        --frames-per-shard 2048 --generate-shards 16 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import numpy as np
from _common import gpu_times

RESULTS: dict = {}
JSON_PATH: list[Path] = []


def say(key: str, value, unit: str = "", note: str = "") -> None:
    """Print one figure and keep it (rewritten to --json at once, so a cut run keeps it)."""
    RESULTS[key] = value
    shown = f"{value:.4f}" if isinstance(value, float) else str(value)
    print(f"{key:<44} {shown:>14} {unit:<6} {note}", flush=True)
    if JSON_PATH:
        JSON_PATH[0].write_text(json.dumps(RESULTS, sort_keys=True, indent=1, default=str) + "\n")


# -- data ---------------------------------------------------------------------------------
def generate(args) -> tuple[Path, int]:
    """Write the full acquisition: generated shards, then copies of them (see the module doc)."""
    from quantem.io import arina_layout as layout
    from quantem.io import synthetic

    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    full_model = synthetic.SyntheticModel(
        tuple(args.scan), tuple(args.det), args.dtype, args.dose, 0
    )
    n = full_model.n_frames
    per = args.frames_per_shard
    n_shards = -(-n // per)
    made = min(args.generate_shards, n_shards)
    names = [layout.shard_file_name("full", i + layout.SHARD_FIRST_INDEX) for i in range(n_shards)]
    master = out / f"full{layout.MASTER_SUFFIX}"
    if not master.exists():
        # bitshuffle compresses with OpenMP; one thread per worker process, or the 16
        # workers' spinning thread teams make compression ~100x slower.
        os.environ["OMP_NUM_THREADS"] = "1"
        t0 = time.perf_counter()
        ranges = [(i * per, min((i + 1) * per, n)) for i in range(made)]
        with ProcessPoolExecutor(args.processes) as pool:
            futures = [
                pool.submit(synthetic._write_shard, full_model, str(out / names[i]), a, b)
                for i, (a, b) in enumerate(ranges)
            ]
            for f in futures:
                f.result()
        say(
            "generate_seconds",
            time.perf_counter() - t0,
            "s",
            f"{made} shards x {per} frames, {args.processes} processes",
        )
        import h5py

        for i in range(made, n_shards):
            src = out / names[i % made]
            dst = out / names[i]
            a, b = i * per, min((i + 1) * per, n)
            if b - a != per:  # a short last shard cannot be a copy: generate it
                synthetic._write_shard(full_model, str(dst), a, b)
                continue
            shutil.copyfile(src, dst)
            with h5py.File(dst, "r+") as f:
                dset = f[layout.SHARD_DATASET]
                dset.attrs["image_nr_low"] = np.uint64(a + 1)
                dset.attrs["image_nr_high"] = np.uint64(b)
        synthetic._write_master(full_model, master, names, per, True)
        os.sync()
    return master, made


def open_source(master: Path):
    """``quantem.io.arina.open_arina``, or (while it is missing) a minimal stand-in.

    The stand-in reads the chunk offsets with h5py's ``chunk_iter`` and returns an object
    with the attributes ``hdf5_pipeline`` uses; loads then go straight through the pipeline
    (printed as such) instead of ``quantem.io.load``.
    """
    try:
        from quantem.io.arina import open_arina
    except ImportError:
        open_arina = None
    if open_arina is not None:
        return open_arina(master), True
    from types import SimpleNamespace

    import h5py

    from quantem.io import arina_layout as layout

    with h5py.File(master, "r") as f:
        group = f[layout.DATA_GROUP]
        names = sorted(k for k in group if layout.SHARD_LINK_PATTERN.match(k))
        shard_paths = [str(master.parent / group.get(k, getlink=True).filename) for k in names]
        mask = f[layout.DETECTOR_GROUP + "/detectorSpecific/" + layout.PIXEL_MASK][()]
        scan = tuple(int(v) for v in group.attrs[layout.SCAN_SHAPE_ATTR])
    shard, offset, nbytes = [], [], []
    dtype = det = None
    for i, path in enumerate(shard_paths):
        with h5py.File(path, "r") as f:
            dset = f[layout.SHARD_DATASET]
            dtype, det = dset.dtype, dset.shape[1:]
            rows = []
            dset.id.chunk_iter(
                lambda info, rows=rows: rows.append(
                    (info.chunk_offset[0], info.byte_offset, info.size)
                )
            )
            rows.sort()
            shard += [i] * len(rows)
            offset += [r[1] for r in rows]
            nbytes += [r[2] for r in rows]
    index = SimpleNamespace(
        frame_shard=np.array(shard, np.int32), frame_offset=np.array(offset, np.int64),
        frame_nbytes=np.array(nbytes, np.int64),
    )  # fmt: skip
    source = SimpleNamespace(
        index=index, shard_paths=shard_paths, detector_shape=tuple(det), dtype=np.dtype(dtype),
        n_frames=len(shard), scan_shape=scan, pixel_mask=mask, validity=mask == 0,
    )  # fmt: skip
    return source, False


# -- page cache ---------------------------------------------------------------------------
def resident_fraction(paths) -> float:
    """Fraction of the files' pages in the page cache (the io-scale runner's probe)."""
    from harness.run.cache import probe_residency

    return probe_residency(paths).fraction


def evict(paths) -> None:
    """Per-file eviction exactly as the io-scale runner does it (fdatasync, then DONTNEED)."""
    from harness.run.cache import evict_files

    evict_files(paths)


# -- floors -------------------------------------------------------------------------------
def pread_floor(source, pinned_buf, threads) -> float:
    from quantem.cuda import hdf5_pipeline, staging
    from quantem.errors import ArinaFormatError

    index = source.index
    reads = hdf5_pipeline.plan_reads(
        np.asarray(index.frame_shard), np.asarray(index.frame_offset, dtype=np.int64),
        np.asarray(index.frame_nbytes, dtype=np.int64), staging.READ_PIECE_BYTES,
    )  # fmt: skip
    view = memoryview(pinned_buf)
    with (
        staging.OpenFiles(source.shard_paths, ArinaFormatError) as files,
        ThreadPoolExecutor(threads) as pool,
    ):
        t0 = time.perf_counter()
        list(pool.map(lambda r: files.read_into(view[r[2] : r[2] + r[3]], r[0], r[1]), reads))
        return time.perf_counter() - t0


def wall_time(fn, reps: int) -> list[float]:
    import cupy

    times = []
    for _ in range(reps):
        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        result = fn()
        cupy.cuda.Device().synchronize()
        times.append(time.perf_counter() - t0)
        if hasattr(result, "close"):
            result.close()
        del result
    return times


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--scan", type=int, nargs=2, default=[512, 512])
    parser.add_argument("--det", type=int, nargs=2, default=[192, 192])
    parser.add_argument("--dtype", default="uint16")
    parser.add_argument("--dose", type=float, default=40000.0)
    parser.add_argument("--frames-per-shard", type=int, default=2048)
    parser.add_argument("--generate-shards", type=int, default=16)
    parser.add_argument("--processes", type=int, default=os.cpu_count())
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--cold-reps", type=int, default=2)
    parser.add_argument("--skip-qem", action="store_true")
    parser.add_argument(
        "--naive-frames", type=int, default=512, help="frames of one shard for the naive path"
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.json:
        JSON_PATH.append(Path(args.json))

    import cupy

    from quantem import io
    from quantem.cuda import detector_kernels as dk
    from quantem.cuda import pinned
    from quantem.io.synthetic import SyntheticModel

    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    say("device", props["name"].decode())
    threads = args.threads or min(32, os.cpu_count() or 4)
    say("host_cores", os.cpu_count())

    master, made = generate(args)
    t0 = time.perf_counter()
    source, have_arina = open_source(master)
    say("open_arina_seconds", time.perf_counter() - t0, "s", "frame index (first open builds it)")
    if not have_arina:
        say("note", "quantem.io.arina missing: HDF5 loads timed through hdf5_pipeline directly")

    def load_hdf5(staging="pread"):
        if have_arina:
            return io.load(master, backend="cuda", staging=staging)
        from quantem.acquisition import Acquisition
        from quantem.cuda.hdf5_pipeline import decode_source_to_device

        frames, stats = decode_source_to_device(source)
        data = frames.reshape(*source.scan_shape, *frames.shape[1:])
        meta = {"load_stats": {"read_seconds": stats.read_seconds}}
        return Acquisition(data, meta, source.validity, "cuda")

    files = [*source.shard_paths, str(master)]
    compressed = int(np.asarray(source.index.frame_nbytes).sum())
    decoded = (
        int(source.n_frames) * int(np.prod(source.detector_shape)) * np.dtype(source.dtype).itemsize
    )
    say("shape", [*source.scan_shape, *source.detector_shape])
    say("n_shards", len(source.shard_paths), "", f"{made} generated, the rest copies")
    say("compressed_bytes", compressed, "B")
    say("decoded_bytes", decoded, "B")

    # Warm the page cache.
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda p: Path(p).read_bytes() and None, source.shard_paths))
    say("residency_warm", resident_fraction(source.shard_paths))

    # Floors.
    with pinned.borrow(1, compressed) as (buf,):
        floors = sorted(pread_floor(source, buf, threads) for _ in range(args.reps))
        say(
            "floor_pread_pinned_warm_s",
            statistics.median(floors),
            "s",
            f"{compressed / statistics.median(floors) / 1e9:.2f} GB/s",
        )
        dev_buf = cupy.empty(compressed, dtype=cupy.uint8)
        h2d = gpu_times(
            lambda: cupy.cuda.runtime.memcpyAsync(
                dev_buf.data.ptr, buf.ctypes.data, compressed, 1, 0
            ),
            args.reps,
        )
        say(
            "floor_h2d_s",
            statistics.median(h2d),
            "s",
            f"{compressed / statistics.median(h2d) / 1e9:.2f} GB/s",
        )
        dev_buf = None
        cold_floors = []
        for _ in range(args.cold_reps):
            evict(files)
            res = resident_fraction(source.shard_paths)
            cold_floors.append(pread_floor(source, buf, threads))
        say("residency_after_evict", res)
        say(
            "floor_pread_pinned_cold_s",
            statistics.median(cold_floors),
            "s",
            f"{compressed / statistics.median(cold_floors) / 1e9:.2f} GB/s",
        )
    a = cupy.empty(decoded, dtype=cupy.uint8)
    b = cupy.empty(decoded, dtype=cupy.uint8)
    a.fill(1)
    d2d = gpu_times(
        lambda: cupy.cuda.runtime.memcpyAsync(b.data.ptr, a.data.ptr, decoded, 3, 0), args.reps
    )
    say(
        "floor_d2d_decoded_size_s",
        statistics.median(d2d),
        "s",
        f"{2 * decoded / statistics.median(d2d) / 1e12:.2f} TB/s (read+write)",
    )
    a = b = None
    cupy.get_default_memory_pool().free_all_blocks()

    # Naive path: h5py + hdf5plugin on the CPU, then cupy.asarray, one shard, in a fresh
    # process as a user would run it (default environment, and with OMP_NUM_THREADS=1).
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda p: Path(p).read_bytes() and None, source.shard_paths))
    naive_code = (
        "import time,sys,h5py,hdf5plugin,cupy\n"
        "cupy.zeros(1); t=time.perf_counter()\n"
        "f=h5py.File(sys.argv[1],'r'); h=f['/entry/data/data'][:int(sys.argv[2])]; g=cupy.asarray(h)\n"
        "cupy.cuda.Device().synchronize(); print(time.perf_counter()-t, h.shape[0])\n"
    )
    naive_runs = {}
    for label, omp in (("default_env", None), ("omp1", "1")):
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
        if omp:
            env["OMP_NUM_THREADS"] = omp
        proc = subprocess.run(
            [sys.executable, "-c", naive_code, source.shard_paths[0], str(args.naive_frames)],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        seconds, frames_in_shard = proc.stdout.split()
        naive_runs[label] = (float(seconds), int(frames_in_shard))
        say(f"naive_one_shard_{label}_s", float(seconds), "s", f"{frames_in_shard} frames")
    naive, per_shard_frames = min(naive_runs.values())
    naive_full = naive * source.n_frames / per_shard_frames
    say("naive_extrapolated_full_s", naive_full, "s", "best of the two, linear in frames")

    # Ours: HDF5 warm.
    warm0 = time.perf_counter()
    first = load_hdf5("pread")  # the reference products come from the pread staging
    say(
        "hdf5_first_load_s",
        time.perf_counter() - warm0,
        "s",
        "includes kernel compile / pinned alloc",
    )
    stats = first.metadata["load_stats"]
    model = SyntheticModel(tuple(args.scan), tuple(args.det), args.dtype, args.dose, 0)
    rr, cc = np.mgrid[: args.det[0], : args.det[1]]
    cy, cx = model.bf_center
    bf = (rr - cy) ** 2 + (cc - cx) ** 2 <= model.bf_radius**2
    bf &= source.validity
    say("bf_mask_pixels", int(bf.sum()))
    dense_bf = gpu_times(lambda: dk.masked_sum(first.data, bf), 20, 3)
    say("bf_masked_sum_dense_s", statistics.median(dense_bf), "s")
    ref_bf = dk.masked_sum(first.data, bf).get()
    first.close()
    # Back to back: the pread staging (the default), then the mapped staging (DMA from
    # page-cache pages), each checked against the reference BF image.
    for variant_name in ("pread", "mapped"):
        variant = wall_time(lambda: load_hdf5(variant_name), args.reps)  # noqa: B023
        say(
            f"hdf5_warm_load_{variant_name}_staging_s",
            statistics.median(variant),
            "s",
            f"min {min(variant):.4f}",
        )
    with load_hdf5("mapped") as probe:
        say("hdf5_mapped_staging_ran", probe.metadata["load_stats"].get("staging", "?"))
        mapped_ok = bool(cupy.array_equal(dk.masked_sum(probe.data, bf), cupy.asarray(ref_bf)))
    say("hdf5_mapped_bf_equals_reference", mapped_ok)
    warm = wall_time(lambda: load_hdf5(), args.reps)
    w = statistics.median(warm)
    say("hdf5_warm_load_s", w, "s", f"min {min(warm):.4f}; {decoded / w / 1e9:.1f} GB/s decoded")
    say("hdf5_warm_over_pread_floor", w / statistics.median(floors), "x")
    say(
        "hdf5_pipeline_read_s_per_load",
        stats["read_seconds"],
        "s",
        "summed over batches, first load",
    )
    say("speedup_over_naive", naive_full / w, "x")

    colds = []
    for _ in range(args.cold_reps):
        evict(files)
        res = resident_fraction(source.shard_paths)
        colds.extend(wall_time(lambda: load_hdf5(), 1))
    say("residency_before_cold_load", res)
    c = statistics.median(colds)
    say("hdf5_cold_load_s", c, "s")
    say("hdf5_cold_over_cold_pread_floor", c / statistics.median(cold_floors), "x")

    if not args.skip_qem:
        from quantem.acquisition import Acquisition
        from quantem.io.qem.writer import save_qem

        qem_path = Path(args.dir) / "full.qem"
        if not qem_path.exists():
            t0 = time.perf_counter()
            with load_hdf5() as acq:
                host = acq.data.get()
            meta = {"pixel_mask": np.asarray(source.pixel_mask)}
            save_qem(Acquisition(host, meta, source.validity, "cpu"), qem_path)
            del host
            say("qem_convert_s", time.perf_counter() - t0, "s", "GPU load + D2H + save_qem")
        q_frames = int(source.n_frames)
        q_decoded = decoded
        say(
            "qem_file_bytes",
            qem_path.stat().st_size,
            "B",
            f"{compressed / qem_path.stat().st_size:.2f}x smaller than the HDF5 chunks",
        )
        qem_path.read_bytes()
        q_first = io.load(qem_path, backend="cuda")
        with load_hdf5() as h:
            same = bool(cupy.array_equal(h.data, q_first.data))
        say("qem_equals_hdf5_on_gpu", same)
        q_first.close()
        qwarm = wall_time(lambda: io.load(qem_path, backend="cuda"), args.reps)
        q = statistics.median(qwarm)
        say(
            "qem_warm_load_s",
            q,
            "s",
            f"min {min(qwarm):.4f}; {q_decoded / q / 1e9:.1f} GB/s decoded",
        )
        qv = wall_time(lambda: io.load(qem_path, backend="cuda", verify=False), args.reps)
        say("qem_warm_load_noverify_s", statistics.median(qv), "s")

        pool_ = cupy.get_default_memory_pool()
        pool_.free_all_blocks()
        base_free = cupy.cuda.runtime.memGetInfo()[0]
        enc = io.load(qem_path, backend="cuda", representation="encoded")
        payload = enc.encoded.nbytes
        say(
            "qem_resident_payload_bytes",
            payload,
            "B",
            f"{q_decoded / payload:.2f}x smaller than decoded",
        )
        peak_load = pool_.total_bytes()
        ids = np.arange(enc.encoded.n_blocks)
        enc_bf = gpu_times(lambda: enc.encoded.masked_sum(bf), 10, 2)
        say("bf_masked_sum_encoded_s", statistics.median(enc_bf), "s", f"{q_frames} frames")
        same_bf = bool(np.array_equal(enc.encoded.masked_sum(bf).get(), ref_bf))
        say("bf_encoded_equals_dense", same_bf)
        peak_query = pool_.total_bytes()
        used_now = base_free - cupy.cuda.runtime.memGetInfo()[0]
        say(
            "encoded_peak_pool_bytes_load",
            peak_load,
            "B",
            f"payload + {(peak_load - payload) / 2**30:.3f} GiB",
        )
        say(
            "encoded_peak_pool_bytes_bf_query",
            peak_query,
            "B",
            f"payload + {(peak_query - payload) / 2**30:.3f} GiB",
        )
        say("encoded_card_used_delta_bytes", used_now, "B", "cudaMemGetInfo difference")
        # Decode throughput on the resident payload, in batches of blocks that fit a buffer.
        batch = max(
            1, (4 << 30) // (enc.encoded.block_frames * int(np.prod(source.detector_shape)) * 2)
        )
        sub = ids[:batch]
        sub_bytes = (
            min(len(sub) * enc.encoded.block_frames, q_frames)
            * int(np.prod(source.detector_shape))
            * 2
        )
        dec = gpu_times(lambda: enc.encoded.decode_blocks(sub), args.reps)
        say(
            "qem_decode_kernel_s",
            statistics.median(dec),
            "s",
            f"{len(sub)} blocks, {sub_bytes / statistics.median(dec) / 1e12:.3f} TB/s decoded",
        )
        enc.close()
    say("bf_reference_checksum", int(ref_bf.sum()))
    if args.json:
        Path(args.json).write_text(
            json.dumps(RESULTS, sort_keys=True, indent=1, default=str) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
