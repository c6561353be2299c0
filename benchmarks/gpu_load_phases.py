"""Benchmark: where a warm ``backend="cuda"`` HDF5 load spends its time outside the pipeline.

For one ARINA master (``MASTER``), in this process: loads until the shards' registrations
are in use (the default staging's steady state), then ``--reps`` timed warm loads, each
with the device synchronised before and after. Every function named in :data:`PHASES` is
wrapped with a host timer for the timed loads (its host seconds per load, inclusive of
what it calls; the wrappers cost about a microsecond a call). Prints, as medians over the
loads: the wall time, the staged pipeline (``load_stats["pipeline_seconds"]``), each
phase (calls a load, milliseconds), the time from the load's return to the device being
idle, and the wall time no phase accounts for. Every load's uint64 sum is checked
against the first load's. ``--profile FILE`` writes a cProfile of ``--profile-reps`` more
loads (cumulative order), unwrapped.

    python benchmarks/gpu_load_phases.py /var/tmp/bench/fps2048_dose1000_rows512/full_master.h5
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import importlib
import pstats
import statistics
import time

#: ``(module, attribute)``: ``attribute`` may be ``Class.method``. Names are patched
#: where the load looks them up (a module's global, or a class's attribute).
PHASES = [
    ("quantem.stem4d.cuda.staging", "prestart_threads"),
    ("quantem.stem4d.io.arina", "open_arina"),
    ("quantem.stem4d.io.arina", "_sha256_file"),
    ("quantem.stem4d.io.arina", "_parsed_master"),
    ("quantem.stem4d.io.arina", "shard_stats"),
    ("quantem.stem4d.io.arina", "cached_shard_layout"),
    ("quantem.stem4d.io.arina", "load_or_build_frame_index"),
    ("quantem.stem4d.io.frame_index", "_remembered_facts"),
    ("quantem.stem4d.io.frame_index", "_read_sidecar_once"),
    ("quantem.stem4d.cuda.loaders", "zero_invalid_pixels"),
    ("quantem.stem4d.io.transforms", "LoadOptions.check_detector"),
    ("quantem.stem4d.cuda.loaders", "decode_source_to_device"),
    ("quantem.stem4d.cuda.hdf5_pipeline", "plan_batches"),
    ("quantem.stem4d.cuda.hdf5_pipeline", "load_plan"),
    ("quantem.stem4d.cuda.load_plan", "LoadPlan.registered"),
    ("quantem.stem4d.cuda.load_plan", "plan_span_reads"),
    ("quantem.stem4d.cuda.load_plan", "shard_spans"),
    ("quantem.stem4d.cuda.staging", "OpenFiles.__enter__"),
    ("quantem.stem4d.cuda.staging", "OpenFiles.__exit__"),
    ("quantem.stem4d.cuda.hdf5_pipeline", "_run_registered"),
    ("quantem.stem4d.cuda.hdf5_pipeline", "shard_spans"),
    ("quantem.stem4d.cuda.hdf5_pipeline", "plan_span_reads"),
    ("quantem.stem4d.cuda.registered_files", "RegisteredFiles.lookup"),
    ("quantem.stem4d.cuda.registered_files", "RegisteredFiles.count_load"),
    ("quantem.stem4d.cuda.registered_files", "RegisteredFiles.still_current"),
    ("quantem.stem4d.cuda.registered_files", "RegisteredFiles.give_back"),
    ("quantem.stem4d.cuda.mapped_staging", "run_registered"),
    ("quantem.stem4d.cuda.staging", "DeviceLanes.__init__"),
    ("quantem.stem4d.cuda.staging", "DeviceLanes.drain"),
    ("quantem.stem4d.cuda.lz4_bitshuffle", "ChunkDecoder.__init__"),
    ("quantem.stem4d.cuda.lz4_bitshuffle", "ChunkDecoder.decode"),
    ("quantem.stem4d.cuda.lz4_bitshuffle", "raise_first_error"),
    ("quantem.stem4d.cuda.loaders", "finish_in_place"),
    ("quantem.stem4d.cuda.loaders", "hdf5_load_stats"),
]

TIMES: dict[str, list[float]] = {}
CALLS: dict[str, int] = {}
ON = [False]


def _wrap(label: str, fn):
    @functools.wraps(fn)
    def timed(*args, **kwargs):
        if not ON[0]:
            return fn(*args, **kwargs)
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMES[label][-1] += time.perf_counter() - t0
            CALLS[label] += 1

    return timed


def install() -> list[str]:
    """Wrap every phase that exists in this tree; the labels of those wrapped."""
    labels = []
    for module_name, attribute in PHASES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # a tree from before that module
            continue
        owner, _, name = attribute.rpartition(".")
        holder = getattr(module, owner, None) if owner else module
        if holder is None or not hasattr(holder, name):
            continue
        label = f"{module_name.rsplit('.', 1)[-1]}.{attribute}"
        setattr(holder, name, _wrap(label, getattr(holder, name)))
        TIMES[label], CALLS[label] = [], 0
        labels.append(label)
    return labels


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("master", help="an ARINA *_master.h5")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--tag", default="")
    parser.add_argument("--profile", help="write a cProfile of more loads here")
    parser.add_argument("--profile-reps", type=int, default=3)
    args = parser.parse_args(argv)

    import cupy

    from quantem.stem4d.cuda import loaders

    def sync() -> None:
        cupy.cuda.Device().synchronize()

    labels = install()
    reference = None
    stagings = []
    for _ in range(4):  # pread, registering, registered: the steady state from the third
        with loaders.load_hdf5(args.master) as acq:
            sync()
            stagings.append(acq.metadata["load_stats"]["staging"])
            total = int(acq.data.sum(dtype=cupy.uint64).item())
            reference = total if reference is None else reference
            if total != reference:
                raise SystemExit(f"load sum {total} differs from the first load's {reference}")
    walls, pipelines, tails = [], [], []
    for _ in range(args.reps):
        for label in labels:
            TIMES[label].append(0.0)
        sync()
        ON[0] = True
        t0 = time.perf_counter()
        acq = loaders.load_hdf5(args.master)
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        ON[0] = False
        walls.append(t2 - t0)
        tails.append(t2 - t1)
        stats = acq.metadata["load_stats"]
        pipelines.append(stats["pipeline_seconds"])
        stagings.append(stats["staging"])
        total = int(acq.data.sum(dtype=cupy.uint64).item())
        acq.close()
        del acq
        if total != reference:
            raise SystemExit(f"load sum {total} differs from the first load's {reference}")
    median = statistics.median
    ms = 1e3
    print(f"{args.tag} {args.master}")
    print(f"  stagings: {stagings}")
    print(
        f"  wall {median(walls) * ms:8.2f} ms (min {min(walls) * ms:.2f}, max "
        f"{max(walls) * ms:.2f}); pipeline {median(pipelines) * ms:.2f} ms; outside it "
        f"{(median(walls) - median(pipelines)) * ms:.2f} ms; return to idle "
        f"{median(tails) * ms:.2f} ms"
    )
    for label in labels:
        if CALLS[label]:
            print(
                f"  {label:48s} {median(TIMES[label]) * ms:8.2f} ms  "
                f"({CALLS[label] / args.reps:g} calls a load)"
            )
    print(f"  sum {reference}")
    if args.profile:
        profiler = cProfile.Profile()
        for _ in range(args.profile_reps):
            sync()
            profiler.enable()
            acq = loaders.load_hdf5(args.master)
            sync()
            profiler.disable()
            acq.close()
            del acq
        with open(args.profile, "w") as out:
            pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(60)
            pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
