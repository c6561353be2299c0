"""Benchmark of the CUDA backend's loads: floors at their best, ours, naive paths, in one run.

For one ARINA acquisition (``--data DIR``: any acquisition, its ``*_master.h5`` found in
DIR; or ``--dir DIR``: synthetic layouts written there, see below) it measures, on the
current GPU:

* floors, each at the best method found in a sweep (the method is printed): parallel
  ``pread`` of all compressed chunk bytes into one pinned buffer (piece size x thread
  count), warm and cold; the host-to-device copy of those bytes; read and copy overlapped
  with no decode (our staging engine with an empty launch);
* ours: HDF5 warm load (process and page cache warm) for a sweep of batch size, read
  piece size and reader count, with the pipeline's timeline (GPU idle, waits); cold load
  after ``posix_fadvise(DONTNEED)`` per file (``mincore`` residency printed);
* the naive path: h5py + hdf5plugin decode of frames of one shard on the CPU, then
  ``cupy.asarray``, extrapolated linearly to the whole acquisition;
* correctness in the same run: every decoded frame of the GPU load equals the cpu
  backend's load (``--check-cpu``, on by default for the first layout);
* first load in a fresh process: ahead-of-time fatbins, NVRTC with an empty kernel cache
  (a machine that never ran the package), NVRTC with a warm cache;
* ``.qem`` (``--qem``): conversion, warm load and its floors, the rANS kernel's decoded
  throughput on the resident payload, BF ``masked_sum`` dense and encoded.

Synthetic layouts (``--dir``): ``--layout FRAMES_PER_SHARD:DOSE[:SCAN_ROWS]`` (repeatable)
writes the 512 x 512 x 192 x 192 uint16 model's first ``--distinct`` frames once per dose
(``quantem.stem4d.io.synthetic``, in parallel processes) and lays them out cyclically over the
whole scan, ``FRAMES_PER_SHARD`` frames per shard, with h5py's direct chunk writes, so a
layout of 3 GB of chunks is written at disk speed.

Usage::

    python benchmarks/gpu_load.py --data /data/acq --json out.json
    python benchmarks/gpu_load.py --dir /var/tmp/bench --layout 10000:40000 \
        --layout 1000:40000 --layout 2048:1000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import numpy as np
from _common import gpu_times, source_identity

from quantem.stem4d.cuda import hdf5_pipeline, registered_files
from quantem.stem4d.cuda.registered_files import release_registered_files

RESULTS: dict = {}
JSON_PATH: list[Path] = []
MiB = 1 << 20


def say(key: str, value, unit: str = "", note: str = "") -> None:
    """Print one figure and keep it (rewritten to --json at once, so a cut run keeps it)."""
    RESULTS[key] = value
    shown = f"{value:.4f}" if isinstance(value, float) else str(value)
    print(f"{key:<52} {shown:>14} {unit:<4} {note}", flush=True)
    if JSON_PATH:
        JSON_PATH[0].write_text(json.dumps(RESULTS, sort_keys=True, indent=1, default=str) + "\n")


def median(values) -> float:
    return float(statistics.median(values))


# -- synthetic layouts ----------------------------------------------------------------
def _encode_range(model, start: int, stop: int) -> list[bytes]:
    from quantem.stem4d.io.synthetic import encode_chunk

    return [encode_chunk(frame) for frame in model.make_frames(start, stop)]


_CHUNKS: list[bytes] = []


def _set_chunks(chunks: list[bytes]) -> None:
    _CHUNKS[:] = chunks


def _write_layout_shard(path: str, model, start: int, stop: int) -> None:
    import h5py
    import hdf5plugin

    from quantem.stem4d.io import arina_layout as layout

    det_r, det_c = model.detector_shape
    with h5py.File(path, "w") as f:
        dset = f.create_dataset(
            layout.SHARD_DATASET, shape=(stop - start, det_r, det_c), dtype=model.dtype,
            chunks=(1, det_r, det_c), **hdf5plugin.Bitshuffle(nelems=0, cname="lz4"),
        )  # fmt: skip
        dset.attrs["image_nr_low"] = np.uint64(start + 1)
        dset.attrs["image_nr_high"] = np.uint64(stop)
        for frame in range(start, stop):
            dset.id.write_direct_chunk((frame - start, 0, 0), _CHUNKS[frame % len(_CHUNKS)])


def write_layout(root: Path, per_shard: int, dose: float, rows: int, args) -> Path:
    """A synthetic acquisition: ``--distinct`` generated frames laid out cyclically."""
    from quantem.stem4d.io import arina_layout as layout
    from quantem.stem4d.io import synthetic

    out = root / f"fps{per_shard}_dose{int(dose)}_rows{rows}"
    master = out / f"full{layout.MASTER_SUFFIX}"
    if master.exists():
        return master
    out.mkdir(parents=True, exist_ok=True)
    model = synthetic.SyntheticModel((rows, args.scan[1]), tuple(args.det), args.dtype, dose, 0)
    n = model.n_frames
    distinct = min(args.distinct, n)
    os.environ["OMP_NUM_THREADS"] = "1"  # bitshuffle's OpenMP teams, one per process
    t0 = time.perf_counter()
    step = -(-distinct // args.processes)
    with ProcessPoolExecutor(args.processes) as pool:
        parts = pool.map(
            _encode_range, [model] * args.processes,
            range(0, distinct, step), [min(a + step, distinct) for a in range(0, distinct, step)],
        )  # fmt: skip
        chunks = [c for part in parts for c in part]
    n_shards = -(-n // per_shard)
    names = [layout.shard_file_name("full", i + layout.SHARD_FIRST_INDEX) for i in range(n_shards)]
    with ProcessPoolExecutor(args.processes, initializer=_set_chunks, initargs=(chunks,)) as pool:
        futures = [
            pool.submit(
                _write_layout_shard, str(out / names[i]), model,
                i * per_shard, min((i + 1) * per_shard, n),
            )
            for i in range(n_shards)
        ]  # fmt: skip
        for future in futures:
            future.result()
    synthetic._write_master(model, master, names, per_shard, True)
    os.sync()
    say(
        "generate_seconds", time.perf_counter() - t0, "s",
        f"{n_shards} shards x {per_shard} frames, dose {dose:g}, {distinct} distinct frames",
    )  # fmt: skip
    return master


def find_master(directory: Path) -> Path:
    from quantem.stem4d.io import arina_layout as layout

    masters = sorted(directory.glob(f"*{layout.MASTER_SUFFIX}"))
    if len(masters) != 1:
        raise SystemExit(
            f"error: {directory}: expected one *{layout.MASTER_SUFFIX}, found {len(masters)}"
        )
    return masters[0]


# -- page cache -----------------------------------------------------------------------
def resident_fraction(paths) -> float:
    from harness.run.cache import probe_residency

    return probe_residency(paths).fraction


def evict(paths) -> None:
    from harness.run.cache import evict_files

    evict_files(paths)


def warm_cache(paths, threads: int) -> None:
    def touch(path):
        with open(path, "rb") as f:
            while f.read(64 * MiB):
                pass

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(touch, paths))


# -- floors ---------------------------------------------------------------------------
def pread_all(source, buf, threads: int, piece: int, spans: bool = True) -> float:
    """Seconds to pread every chunk byte into ``buf``: the chunk spans the staging reads
    (``spans``: gaps of up to ``hdf5_pipeline.SPAN_GAP_BYTES`` read through), or each run
    of adjacent chunks on its own (the earlier floor), in reads of at most ``piece``."""
    from quantem.stem4d.cuda import hdf5_pipeline, staging
    from quantem.stem4d.errors import ArinaFormatError

    index = source.index
    args = (
        np.asarray(index.frame_shard), np.asarray(index.frame_offset, dtype=np.int64),
        np.asarray(index.frame_nbytes, dtype=np.int64), piece,
    )  # fmt: skip
    reads = hdf5_pipeline.plan_span_reads(*args)[0] if spans else hdf5_pipeline.plan_reads(*args)
    view = memoryview(buf)
    with (
        staging.OpenFiles(source.shard_paths, ArinaFormatError) as files,
        ThreadPoolExecutor(threads) as pool,
    ):
        t0 = time.perf_counter()
        list(pool.map(lambda r: files.read_into(view[r[2] : r[2] + r[3]], r[0], r[1]), reads))
        return time.perf_counter() - t0


def staging_only(source, threads: int, batch_bytes: int) -> float:
    """Our staging engine with a launch that does nothing: read + copy, overlapped."""
    from quantem.stem4d.cuda import hdf5_pipeline, staging
    from quantem.stem4d.cuda.staging import plan_batches
    from quantem.stem4d.errors import ArinaFormatError

    index = source.index
    shard = np.asarray(index.frame_shard)
    offset = np.asarray(index.frame_offset, dtype=np.int64)
    nbytes = np.asarray(index.frame_nbytes, dtype=np.int64)
    plans = [
        staging.Batch(
            hdf5_pipeline.plan_reads(
                shard[a:b], offset[a:b], nbytes[a:b], staging.READ_PIECE_BYTES
            ),
            int(nbytes[a:b].sum()),
        )
        for a, b in plan_batches(nbytes, batch_bytes)
    ]
    with staging.OpenFiles(source.shard_paths, ArinaFormatError) as files:
        t0 = time.perf_counter()
        staging.run_staged(files, plans, lambda i, d, s: None, threads=threads)
        return time.perf_counter() - t0


def registered_copy_only(source, batch_bytes: int) -> float:
    """The registered staging's copies with a launch that does nothing: the batches
    copied by DMA from the (already registered) page-cache pages of the shards."""
    import cupy

    from quantem.stem4d.cuda import hdf5_pipeline, mapped_staging
    from quantem.stem4d.cuda.staging import OpenFiles, plan_batches
    from quantem.stem4d.errors import ArinaFormatError

    index = source.index
    shard = np.asarray(index.frame_shard)
    offset = np.asarray(index.frame_offset, dtype=np.int64)
    nbytes = np.asarray(index.frame_nbytes, dtype=np.int64)
    plans, slot = [], 1
    for a, b in plan_batches(nbytes, batch_bytes):
        reads, _, data = hdf5_pipeline.plan_span_reads(
            shard[a:b], offset[a:b], nbytes[a:b], 1 << 62
        )
        plans.append(reads)
        slot = max(slot, data)
    cache = registered_files.registered_files()
    used, lo, hi = hdf5_pipeline.shard_spans(shard, offset, nbytes)
    with OpenFiles(source.shard_paths, ArinaFormatError) as files:
        leases = {}
        try:
            for f, a, b in zip(used.tolist(), lo.tolist(), hi.tolist()):
                entry = cache.lookup(files.fds[f], files.paths[f], a, b)
                leases[f] = entry or cache.register(files.fds[f], files.paths[f], a, b)
            cupy.cuda.Device().synchronize()
            t0 = time.perf_counter()
            mapped_staging.run_registered(
                plans, slot, lambda f, o: leases[f].address_of(o), lambda i, d, s: None
            )
            return time.perf_counter() - t0
        finally:
            for entry in leases.values():
                cache.give_back(entry)


def wall_time(fn, reps: int) -> tuple[list[float], object]:
    """Wall seconds of ``reps`` calls (device synchronised); the last result's stats."""
    import cupy

    times = []
    last = None
    for _ in range(reps):
        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        result = fn()
        cupy.cuda.Device().synchronize()
        times.append(time.perf_counter() - t0)
        last = dict(getattr(result, "metadata", {}).get("load_stats", {}))
        if hasattr(result, "close"):
            result.close()
        del result
    return times, last


FRESH_CODE = """
import json, sys, time
t0 = time.perf_counter()
import cupy
cupy.zeros(1); cupy.cuda.Device().synchronize()
t1 = time.perf_counter()
from quantem.stem4d import io
from quantem.stem4d.cuda.module_loader import kernel_provenance
kind = sys.argv[2]
kwargs = {"staging": "pread"} if kind == "hdf5-pread" else {}
def load():
    acq = io.load(sys.argv[1], backend="cuda", **kwargs)
    cupy.cuda.Device().synchronize()
    return acq
prof = None
if len(sys.argv) > 3:
    import cProfile
    prof = cProfile.Profile(); prof.enable()
import os
cache = os.environ.get("CUPY_CACHE_DIR", "")
def cached():
    return sum(len(f) for _, _, f in os.walk(cache)) if cache and os.path.isdir(cache) else 0
n_cached = cached()
t2 = time.perf_counter(); a = load(); t3 = time.perf_counter(); a.close()
n_compiled = cached() - n_cached
if prof is not None:
    import pstats
    prof.disable()
    with open(sys.argv[3], "w") as f:
        pstats.Stats(prof, stream=f).sort_stats("cumulative").print_stats(40)
later, stagings = [], [a.metadata.get("load_stats", {}).get("staging")]
for _ in range(3):  # the second load (registering, by default), then process-warm ones
    t4 = time.perf_counter(); b = load(); later.append(time.perf_counter() - t4); b.close()
    stagings.append(b.metadata.get("load_stats", {}).get("staging"))
paths = sorted({r["path"] for r in kernel_provenance()})
stats = a.metadata.get("load_stats", {})
print(json.dumps({"init": t1 - t0, "first": t3 - t2, "second": later[0], "warm": min(later[1:]),
                  "paths": paths, "stagings": stagings, "cupy_cache_files_before": n_cached,
                  "cupy_kernels_compiled_by_first_load": n_compiled,
                  "staging": stats.get("staging"), "fallback": stats.get("staging_fallback")}))
"""


def fresh_process(
    path: Path, kind: str, cache_dir: Path, aot: bool, profile: str = "", env_extra=None
) -> dict:
    env = dict(os.environ, CUPY_CACHE_DIR=str(cache_dir), **(env_extra or {}))
    if not aot:
        env["QUANTEM_CUDA_NO_AOT"] = "1"
    else:
        env.pop("QUANTEM_CUDA_NO_AOT", None)
    proc = subprocess.run(
        [sys.executable, "-c", FRESH_CODE, str(path), kind, *([profile] if profile else [])],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- one acquisition ------------------------------------------------------------------
def bench_hdf5(master: Path, tag: str, args, full: bool) -> dict:
    import cupy

    from quantem.stem4d.cuda import detector_kernels as dk
    from quantem.stem4d.cuda import loaders, pinned, staging
    from quantem.stem4d.io.arina import open_arina

    threads = args.threads or min(32, os.cpu_count() or 4)
    t0 = time.perf_counter()
    source = open_arina(master)
    say(f"{tag}.open_arina_s", time.perf_counter() - t0, "s", "frame index (first open builds it)")
    files = [*source.shard_paths, str(master)]
    nbytes = np.asarray(source.index.frame_nbytes)
    compressed = int(nbytes.sum())
    say(
        f"{tag}.shape",
        [*source.scan_shape, *source.detector_shape],
        "",
        np.dtype(source.dtype).name,
    )
    say(f"{tag}.n_shards", len(source.shard_paths))
    say(
        f"{tag}.chunk_bytes_mean",
        float(nbytes.mean()),
        "B",
        f"min {int(nbytes.min())} max {int(nbytes.max())}",
    )
    say(f"{tag}.compressed_bytes", compressed, "B")
    warm_cache(files, threads)
    say(f"{tag}.residency_warm", resident_fraction(source.shard_paths))

    # Floors: pread sweep, H2D, overlapped read + copy.
    sweep_pieces = [16, 64] if args.short else [2, 8, 16, 64] if full else [8, 64]
    sweep_threads = [16] if args.short else [8, 16] if full else [16]
    best = (np.inf, 0, 0)
    from quantem.stem4d.cuda.hdf5_pipeline import plan_span_reads

    index = source.index
    span_bytes = plan_span_reads(
        np.asarray(index.frame_shard), np.asarray(index.frame_offset, dtype=np.int64),
        nbytes.astype(np.int64), 64 * MiB,
    )[2]  # fmt: skip
    say(
        f"{tag}.span_bytes",
        span_bytes,
        "B",
        f"chunk spans read (x{span_bytes / compressed:.4f} the chunk bytes)",
    )
    with pinned.borrow(1, span_bytes) as (buf,):
        pread_all(source, buf, threads, 64 * MiB)  # touch the pinned pages once
        if not args.short:
            runs = median([pread_all(source, buf, 16, 2 * MiB, spans=False) for _ in range(3)])
            say(
                f"{tag}.pread_chunk_runs_2MiB_16t_s",
                runs,
                "s",
                f"{compressed / runs / 1e9:.1f} GB/s (the earlier floor's method)",
            )
        for piece in sweep_pieces:
            for n_threads in sweep_threads:
                t = median([pread_all(source, buf, n_threads, piece * MiB) for _ in range(3)])
                say(
                    f"{tag}.pread_spans_{piece}MiB_{n_threads}t_s",
                    t,
                    "s",
                    f"{compressed / t / 1e9:.1f} GB/s",
                )
                best = min(best, (t, piece, n_threads))
        pread_floor, best_piece, best_threads = best
        say(f"{tag}.floor_pread_warm_s", pread_floor, "s",
            f"{compressed / pread_floor / 1e9:.1f} GB/s of chunk bytes ({best_piece} MiB pieces of the spans, {best_threads} threads)")  # fmt: skip
        dev_buf = cupy.empty(compressed, dtype=cupy.uint8)
        h2d = median(gpu_times(
            lambda: cupy.cuda.runtime.memcpyAsync(dev_buf.data.ptr, buf.ctypes.data, compressed, 1, 0),
            5,
        ))  # fmt: skip
        say(
            f"{tag}.floor_h2d_s",
            h2d,
            "s",
            f"{compressed / h2d / 1e9:.1f} GB/s, one copy from pinned",
        )
        dev_buf = None
        cold_floor = None
        if args.cold_reps:
            colds = []
            for _ in range(args.cold_reps):
                evict(files)
                res = resident_fraction(source.shard_paths)
                colds.append(pread_all(source, buf, best_threads, best_piece * MiB))
            cold_floor = median(colds)
            say(f"{tag}.floor_pread_cold_s", cold_floor, "s",
                f"{compressed / cold_floor / 1e9:.2f} GB/s, residency before {res:.4f}")  # fmt: skip
            warm_cache(files, threads)
    floor = max(pread_floor, h2d)
    say(f"{tag}.floor_max_pread_h2d_s", floor, "s")

    # Ours: default, then the sweep.
    def load(batch=None, piece=None, readers=None, slots=None, kind=None):
        saved = (staging.READ_PIECE_BYTES, staging.READERS, staging.PINNED_SLOTS)
        staging.READ_PIECE_BYTES = (piece * MiB) if piece else saved[0]
        staging.READERS = readers or saved[1]
        staging.PINNED_SLOTS = slots or saved[2]
        try:
            kwargs = {"batch_bytes": batch * MiB} if batch else {}
            if kind:
                kwargs["staging"] = kind
            return loaders.load_hdf5(master, **kwargs)
        finally:
            staging.READ_PIECE_BYTES, staging.READERS, staging.PINNED_SLOTS = saved

    release_registered_files(source.shard_paths)
    t0 = time.perf_counter()
    first = load()
    cupy.cuda.Device().synchronize()
    say(f"{tag}.first_load_in_process_s", time.perf_counter() - t0, "s",
        f"staging {first.metadata['load_stats'].get('staging')}, registered "
        f"{first.metadata['load_stats'].get('registered_bytes')} B, fallback "
        f"{first.metadata['load_stats'].get('staging_fallback')}")  # fmt: skip
    t0 = time.perf_counter()
    second = load()
    cupy.cuda.Device().synchronize()
    say(f"{tag}.second_load_in_process_s", time.perf_counter() - t0, "s",
        f"staging {second.metadata['load_stats'].get('staging')}, registered "
        f"{second.metadata['load_stats'].get('registered_bytes')} B, fallback "
        f"{second.metadata['load_stats'].get('staging_fallback')}")  # fmt: skip
    say(f"{tag}.default_settings", f"staging {hdf5_pipeline.DEFAULT_STAGING}, from load "
        f"{registered_files.registered_files().register_from}, batch "
        f"{loaders.DEFAULT_BATCH_BYTES // MiB} MiB, piece {staging.READ_PIECE_BYTES // MiB} MiB, "
        f"readers {staging.READERS}, slots {staging.PINNED_SLOTS}, registration budget "
        f"{registered_files.budget_bytes()} B")  # fmt: skip
    with load(kind="pread") as by_pread:
        same = bool(cupy.array_equal(by_pread.data, first.data)) and bool(
            cupy.array_equal(by_pread.data, second.data)
        )
    second.close()
    say(f"{tag}.default_equals_pread_on_gpu", same, "",
        "the first two default loads and a pread load: every decoded frame, bit for bit")  # fmt: skip
    model_mask = None
    det = tuple(int(v) for v in source.detector_shape)
    rr, cc = np.mgrid[: det[0], : det[1]]
    model_mask = (
        (rr - det[0] / 2) ** 2 + (cc - det[1] / 2) ** 2 <= (det[0] / 8) ** 2
    ) & source.validity
    ref_bf = dk.masked_sum(first.data, model_mask).get()
    if full and not args.short:
        say(
            f"{tag}.bf_masked_sum_dense_s",
            median(gpu_times(lambda: dk.masked_sum(first.data, model_mask), 20, 3)),
            "s",
        )
    if full and args.check_cpu:
        from quantem.stem4d import io

        t0 = time.perf_counter()
        cpu = io.load(master, backend="cpu")
        say(f"{tag}.cpu_load_s", time.perf_counter() - t0, "s", "cpu backend, for the check")
        gpu = first.data
        equal = True
        rows = gpu.shape[0]
        for r in range(0, rows, 16):
            if not np.array_equal(gpu[r : r + 16].get(), np.asarray(cpu.data[r : r + 16])):
                equal = False
                break
        say(f"{tag}.gpu_frames_equal_cpu_backend", equal, "", "every decoded frame")
        cpu.close() if hasattr(cpu, "close") else None
        del cpu
    first.close()

    staging.PROFILE = True
    # (name, batch MiB, piece MiB, readers, pinned slots, staging)
    variants = [
        ("default", None, None, None, None, None),
        ("pread", None, None, None, None, "pread"),
        ("registered_b32", 32, None, None, None, "registered"),
        ("registered_b64", 64, None, None, None, "registered"),
        ("registered_b256", 256, None, None, None, "registered"),
    ]
    if args.short:
        variants = [v for v in variants if v[0] in ("default", "pread", "registered_b256")]
    elif full:  # pread's best of the earlier sweep
        variants += [("pread_b256_p16_r3_s4", 256, 16, 3, 4, "pread")]
    results = {}
    for name, batch, piece, readers, slots, kind in variants:
        times, ls = wall_time(lambda: load(batch, piece, readers, slots, kind), args.reps)  # noqa: B023
        st = ls.get("stages", {})
        say(f"{tag}.warm_{name}_s", median(times), "s",
            f"x{median(times) / floor:.2f} floor; min {min(times):.4f}; staging {ls.get('staging')} "
            f"fallback {ls.get('staging_fallback')}; pipeline {ls.get('pipeline_seconds', 0):.4f}; "
            f"batches {ls.get('batches')}; gpu idle {st.get('gpu_compute_idle_s', 0):.4f} "
            f"h2d busy {st.get('gpu_h2d_busy_s', 0):.4f} compute busy {st.get('gpu_compute_busy_s', 0):.4f} "
            f"span {st.get('gpu_span_s', 0):.4f} first copy at {st.get('gpu_first_copy_s', 0):.4f} "
            f"main wait {st.get('host_main_wait_read_s', 0):.4f} slot wait {st.get('host_slot_wait_s', 0):.4f} "
            f"enqueue {st.get('host_enqueue_s', 0):.4f} registration wait {st.get('host_wait_registration_s', 0):.4f}")  # fmt: skip
        results[name] = median(times)
    staging.PROFILE = False
    if not args.short:
        t = median([registered_copy_only(source, loaders.DEFAULT_BATCH_BYTES) for _ in range(3)])
        say(f"{tag}.floor_h2d_from_registered_pages_s", t, "s",
            f"{compressed / t / 1e9:.1f} GB/s: the batches copied from the registered "
            "page-cache pages, no decode")  # fmt: skip
    for batch in [64, 256] if full and not args.short else []:
        t = median([staging_only(source, threads, batch * MiB) for _ in range(3)])
        say(f"{tag}.floor_overlapped_read_copy_b{batch}_s", t, "s", "staging engine, no decode")
    # The first load of files not yet registered, process warm (what a first load pays
    # for the registration, apart from compiling kernels and allocating).
    regs = []
    for _ in range(0 if args.short else 3):
        release_registered_files(source.shard_paths)
        times, ls = wall_time(lambda: load(), 1)
        regs.append(times[0])
    if regs:
        say(f"{tag}.registering_load_s", median(regs) if regs else float("nan"), "s",
            f"{[round(x, 4) for x in regs]}; +{(median(regs) if regs else float('nan')) - results['default']:.4f} s over the warm "
            f"default; registered {ls.get('registered_bytes')} B; staging {ls.get('staging')}; "
            f"registration wait {ls.get('stages', {}).get('host_wait_registration_s', 0):.4f}")  # fmt: skip
    best_name = min(results, key=results.get)
    say(
        f"{tag}.warm_best",
        best_name,
        "",
        f"{results[best_name]:.4f} s = x{results[best_name] / floor:.2f} floor",
    )
    say(f"{tag}.warm_default_over_floor", results["default"] / floor, "x")
    with load() as probe:
        same = bool(np.array_equal(dk.masked_sum(probe.data, model_mask).get(), ref_bf))
    say(f"{tag}.repeat_load_bf_equal", same)

    if args.cold_reps and cold_floor is not None:
        colds = []
        for _ in range(args.cold_reps):
            evict(files)  # harness.run.cache releases the registrations first
            res = resident_fraction(source.shard_paths)
            cold_times, cold_stats = wall_time(lambda: load(), 1)
            colds.extend(cold_times)
        c = median(colds)
        say(
            f"{tag}.cold_load_s",
            c,
            "s",
            f"x{c / cold_floor:.2f} the cold pread; residency before {res:.4f}; staging "
            f"{cold_stats.get('staging')} ({cold_stats.get('staging_fallback')})",
        )
        warm_cache(files, threads)

    if full and not args.skip_naive:
        # Naive: h5py + hdf5plugin on the CPU then cupy.asarray, one shard, fresh process.
        code = (
            "import time,sys,h5py,hdf5plugin,cupy\n"
            "cupy.zeros(1); t=time.perf_counter()\n"
            "f=h5py.File(sys.argv[1],'r'); h=f['/entry/data/data'][:int(sys.argv[2])]; g=cupy.asarray(h)\n"
            "cupy.cuda.Device().synchronize(); print(time.perf_counter()-t, h.shape[0])\n"
        )
        runs = []
        for omp in (None, "1"):
            env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
            if omp:
                env["OMP_NUM_THREADS"] = omp
            out = subprocess.run([sys.executable, "-c", code, source.shard_paths[0], str(args.naive_frames)],
                                 env=env, capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
            runs.append((float(out[0]), int(out[1])))
        naive = min(r[0] / r[1] for r in runs) * source.n_frames
        say(f"{tag}.naive_h5py_cupy_extrapolated_s", naive, "s", f"{runs}")
        say(f"{tag}.ours_over_naive", results["default"] / naive, "x")
    return {
        "floor": floor,
        "warm": results["default"],
        "ref_bf": ref_bf,
        "source": source,
        "mask": model_mask,
    }


def bench_fresh(master: Path, tag: str, out_dir: Path, quick: bool = False) -> None:
    """First loads in fresh processes, each in a known CuPy kernel-cache state.

    ``empty``: a CuPy cache folder nothing ran in (a machine that never ran the package,
    with this package's ahead-of-time fatbins); ``filled``: the same folder after that run.
    The pairs repeat (``quick``: twice, else three times) in alternating order; then pread
    staging, registering from load 2, and NVRTC with an empty cache; ``.qem`` likewise.
    Not ``quick``: also a profiled first load and NVRTC with a warm cache."""
    import tempfile

    runs = []
    pairs = 2 if quick else 3
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        tmp = Path(tmp)
        for k in range(pairs):
            runs.append(("aot_empty_cache", fresh_process(master, "hdf5", tmp / f"e{k}", True)))
            runs.append(("aot_filled_cache", fresh_process(master, "hdf5", tmp / f"e{k}", True)))
        filled = tmp / "e0"
        runs.append(("aot_pread_filled_cache", fresh_process(master, "hdf5-pread", filled, True)))
        runs.append(("aot_register_from_2_filled_cache", fresh_process(
            master, "hdf5", filled, True, env_extra={"QUANTEM_REGISTER_FROM_LOAD": "2"})))  # fmt: skip
        if os.environ.get("OUT") and not quick:  # the device run's output folder
            fresh_process(master, "hdf5", filled, True, os.environ["OUT"] + "/first_load.txt")
        runs.append(("nvrtc_empty_cache", fresh_process(master, "hdf5", tmp / "nvrtc", False)))
        if not quick:
            runs.append(("nvrtc_warm_cache", fresh_process(master, "hdf5", tmp / "nvrtc", False)))
    qem = master.parent / "full.qem"
    if qem.exists():
        with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
            tmp = Path(tmp)
            for k in range(pairs):
                runs.append(("qem_aot_empty_cache", fresh_process(qem, "qem", tmp / f"q{k}", True)))
                runs.append(
                    ("qem_aot_filled_cache", fresh_process(qem, "qem", tmp / f"q{k}", True))
                )
            if not quick:
                if os.environ.get("OUT"):  # a profiled first load (filled cache)
                    out = os.environ["OUT"] + "/first_load_qem.txt"
                    fresh_process(qem, "qem", tmp / "q0", True, out)
                runs.append(("qem_nvrtc_empty_cache", fresh_process(qem, "qem", tmp / "nv", False)))
    for name, r in runs:
        # The goal compares the first load with a process-warm one (the best of loads 3
        # and 4 of the same process).
        say(f"{tag}.fresh_{name}_first_minus_warm_s", r["first"] - r["warm"], "s",
            f"first {r['first']:.3f} second {r['second']:.3f} warm {r['warm']:.3f} init "
            f"{r['init']:.3f} paths {r['paths']} stagings {r.get('stagings')} fallback "
            f"{r.get('fallback')} cupy cache files before {r.get('cupy_cache_files_before')}, "
            f"compiled by the first load {r.get('cupy_kernels_compiled_by_first_load')}")  # fmt: skip


def bench_qem(master: Path, tag: str, hd: dict, args) -> None:
    import cupy

    from quantem.stem4d import io
    from quantem.stem4d.acquisition import Acquisition
    from quantem.stem4d.cuda import loaders, pinned
    from quantem.stem4d.io.qem.writer import save_qem

    source = hd["source"]
    qem_path = master.parent / "full.qem"
    if not qem_path.exists():
        t0 = time.perf_counter()
        with loaders.load_hdf5(master) as acq:
            host = acq.data.get()
        save_qem(
            Acquisition(
                host, {"pixel_mask": np.asarray(source.pixel_mask)}, source.validity, "cpu"
            ),
            qem_path,
        )
        del host
        say(f"{tag}.qem_convert_s", time.perf_counter() - t0, "s", "GPU load + D2H + save_qem")
        time.sleep(registered_files.RACY_NS / 1e9 + 0.1)  # a file just written is racy
    size = qem_path.stat().st_size
    qem_path.read_bytes()
    buf_floor = []
    with pinned.borrow(1, size) as (buf,):
        fd = os.open(qem_path, os.O_RDONLY)
        view = memoryview(buf)
        try:
            best = (np.inf, 0)
            for piece in (8, 64):
                pieces = [(o, min(piece * MiB, size - o)) for o in range(0, size, piece * MiB)]
                for _ in range(3):
                    with ThreadPoolExecutor(16) as pool:
                        t0 = time.perf_counter()
                        list(
                            pool.map(
                                lambda p: os.preadv(fd, [view[p[0] : p[0] + p[1]]], p[0]), pieces
                            )
                        )
                        buf_floor.append((time.perf_counter() - t0, piece))
            best = min(buf_floor)
        finally:
            os.close(fd)
        dev = cupy.empty(size, dtype=cupy.uint8)
        h2d = median(
            gpu_times(
                lambda: cupy.cuda.runtime.memcpyAsync(dev.data.ptr, buf.ctypes.data, size, 1, 0), 5
            )
        )
        dev = None
    floor = max(best[0], h2d)
    say(
        f"{tag}.qem_floor_pread_s",
        best[0],
        "s",
        f"{size / best[0] / 1e9:.1f} GB/s, {best[1]} MiB pieces, 16 threads",
    )
    say(f"{tag}.qem_floor_h2d_s", h2d, "s")
    first = io.load(qem_path, backend="cuda")
    with loaders.load_hdf5(master) as h:
        say(f"{tag}.qem_equals_hdf5_on_gpu", bool(cupy.array_equal(h.data, first.data)))
    first.close()
    times, ls = wall_time(lambda: io.load(qem_path, backend="cuda"), args.reps)
    say(f"{tag}.qem_warm_load_s", median(times), "s",
        f"x{median(times) / floor:.2f} floor; min {min(times):.4f}; {ls}")  # fmt: skip
    from quantem.stem4d.cuda import qem_pipeline

    saved = qem_pipeline.DEFAULT_STAGING
    registered = io.load(qem_path, backend="cuda")
    qem_pipeline.DEFAULT_STAGING = "pread"
    try:
        with io.load(qem_path, backend="cuda") as by_pread:
            same = bool(cupy.array_equal(by_pread.data, registered.data))
            kinds = (registered.metadata["load_stats"]["staging"],
                     by_pread.metadata["load_stats"]["staging"])  # fmt: skip
        registered.close()
        del registered
        say(f"{tag}.qem_registered_equals_pread", same, "", f"stagings {kinds}")
        times, ls = wall_time(lambda: io.load(qem_path, backend="cuda"), args.reps)
    finally:
        qem_pipeline.DEFAULT_STAGING = saved
    say(f"{tag}.qem_warm_load_pread_s", median(times), "s",
        f"x{median(times) / floor:.2f} floor; {ls}")  # fmt: skip
    regs = []
    for _ in range(3):
        release_registered_files([qem_path])
        times, ls = wall_time(lambda: io.load(qem_path, backend="cuda"), 1)
        regs.append(times[0])
    say(f"{tag}.qem_registering_load_s", median(regs), "s",
        f"{[round(x, 4) for x in regs]}; {ls}")  # fmt: skip
    times, _ = wall_time(lambda: loaders.load_qem(qem_path, batch_bytes=64 * MiB), args.reps)
    say(f"{tag}.qem_warm_load_b64_s", median(times), "s", f"x{median(times) / floor:.2f} floor")
    times, _ = wall_time(lambda: io.load(qem_path, backend="cuda", verify=False), args.reps)
    say(f"{tag}.qem_warm_load_noverify_s", median(times), "s")
    enc = io.load(qem_path, backend="cuda", representation="encoded")
    bf = hd["mask"]
    t = median(gpu_times(lambda: enc.encoded.masked_sum(bf), 10, 2))
    say(f"{tag}.bf_masked_sum_encoded_s", t, "s")
    say(
        f"{tag}.bf_encoded_equals_hdf5",
        bool(np.array_equal(enc.encoded.masked_sum(bf).get(), hd["ref_bf"])),
    )
    ids = np.arange(enc.encoded.n_blocks)
    det_px = int(np.prod(source.detector_shape))
    batch = max(1, (4 << 30) // (enc.encoded.block_frames * det_px * 2))
    sub = ids[:batch]
    out_bytes = min(len(sub) * enc.encoded.block_frames, int(source.n_frames)) * det_px * 2
    dec = median(gpu_times(lambda: enc.encoded.decode_blocks(sub), args.reps))
    say(
        f"{tag}.qem_decode_kernel_s",
        dec,
        "s",
        f"{len(sub)} blocks, {out_bytes / dec / 1e12:.3f} TB/s decoded",
    )
    enc.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, help="an ARINA acquisition's folder")
    parser.add_argument("--dir", type=Path, help="where synthetic layouts are written")
    parser.add_argument("--layout", action="append", default=[],
                        help="FRAMES_PER_SHARD:DOSE[:SCAN_ROWS] (repeatable; with --dir)")  # fmt: skip
    parser.add_argument("--scan", type=int, nargs=2, default=[512, 512])
    parser.add_argument("--det", type=int, nargs=2, default=[192, 192])
    parser.add_argument("--dtype", default="uint16")
    parser.add_argument("--distinct", type=int, default=2048)
    parser.add_argument("--processes", type=int, default=os.cpu_count())
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--cold-reps", type=int, default=None, help="default 1 (0 with --short)")
    parser.add_argument("--no-check-cpu", dest="check_cpu", action="store_false")
    parser.add_argument(
        "--qem", action="store_true", help="also convert and time .qem (first acquisition)"
    )
    parser.add_argument(
        "--fresh", action="store_true", help="first loads in fresh processes (first acquisition)"
    )
    parser.add_argument(
        "--fresh-quick", action="store_true", help="--fresh with fewer processes (no profile)"
    )
    parser.add_argument(
        "--short", action="store_true",
        help="a short run: two pread floors, no cold loads unless --cold-reps, the default, pread and 256 MiB "
        "registered warm loads only",
    )  # fmt: skip
    parser.add_argument("--naive-frames", type=int, default=512)
    parser.add_argument("--skip-naive", action="store_true", help="no h5py + cupy naive path")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.cold_reps is None:
        args.cold_reps = 0 if args.short else 1
    if args.json:
        JSON_PATH.append(Path(args.json))
    if (args.data is None) == (args.dir is None):
        parser.error("give exactly one of --data DIR and --dir DIR")

    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    say("device", props["name"].decode())
    say("host_cores", os.cpu_count())
    say("revision", source_identity())
    if args.data is not None:
        masters = [(find_master(args.data), "data")]
    else:
        masters = []
        for spec in args.layout or ["10000:40000"]:
            parts = spec.split(":")
            per, dose = int(parts[0]), float(parts[1])
            rows = int(parts[2]) if len(parts) > 2 else args.scan[0]
            masters.append(
                (write_layout(args.dir, per, dose, rows, args), f"fps{per}_d{int(dose)}_r{rows}")
            )
    for k, (master, tag) in enumerate(masters):
        hd = bench_hdf5(master, tag, args, full=k == 0)
        if k == 0 and args.qem:
            bench_qem(master, tag, hd, args)
        if k == 0 and (args.fresh or args.fresh_quick):
            bench_fresh(master, tag, master.parent, quick=args.fresh_quick)
        cupy.get_default_memory_pool().free_all_blocks()
    return 0


if __name__ == "__main__":
    sys.exit(main())
