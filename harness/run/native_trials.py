"""Trials of the native backend: one ``qem-native-load`` process per load.

The native program reads only ``.qem``, so a native run measures the QEM cells. The
trial's time is the process's wall time (launch included: that is what a user of a
separate reader pays); its stages are the launch overhead and the program's own
stage times (``native_open``, ``native_verify``, ``native_decode``, ``native_total``);
its physical reads are the program's own ``/proc/self/io`` counters. Correctness:
the program's SHA-256 of each sample frame (as little-endian uint32) must equal the
Python reader's for the same file, and the manifest's when it lists them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.run import trials

if TYPE_CHECKING:
    from harness.run.io_scale import AcquisitionState, IoScaleRun


def sample_frames_of(state: AcquisitionState) -> list[int]:
    """The manifest's sample frames, else first, middle and last frame."""
    if state.selected.sample_frames is not None:
        return list(state.selected.sample_frames)
    n = state.shape[0] * state.shape[1]
    return sorted({0, n // 2, n - 1})


def python_sample_hashes(run: IoScaleRun, state: AcquisitionState) -> None:
    """Hash the sample frames with the Python reader (untimed) and check the product."""
    import quantem.io
    from harness.native import hash_frame_u32_le

    frames = sample_frames_of(state)
    n = state.shape[0] * state.shape[1]
    if max(frames) >= n:
        run._fail_correctness(
            f"{state.selected.id}: sample frame {max(frames)} is outside the {n} frames"
        )
        return
    acquisition = quantem.io.load(state.qem_path, backend="cpu", apply_mask=False)
    try:
        run._check_product(state, acquisition, "python qem reference load", "qem")
        flat = acquisition.data.reshape(n, *acquisition.data.shape[2:])
        hashes = [hash_frame_u32_le(flat[i]) for i in frames]
    finally:
        acquisition.close()
    expected = state.selected.sample_hashes_u32_le
    if expected is not None and list(expected) != hashes:
        bad = [f for f, a, b in zip(frames, hashes, expected) if a != b]
        run._fail_correctness(
            f"{state.selected.id}: Python sample-frame hashes differ from the manifest's for frames {bad}"
        )
    state.python_sample_hashes = hashes


def measure_native_load(
    run: IoScaleRun, state: AcquisitionState, cache_state: str
) -> tuple[trials.Measurement, dict[str, Any]]:
    """One native trial; returns the measurement and extra record fields."""
    from harness.native import io_read_bytes, run_native_load

    files = [state.qem_path]
    residency = trials.prepare_cache_state(cache_state, files)
    frames = sample_frames_of(state)
    doc = run_native_load(run.config.native_binary, state.qem_path, frames, run.config.threads)
    read_bytes = io_read_bytes(doc)
    stages = {"launch": float(doc["launch_seconds"])}
    stages.update({f"native_{name}": float(value) for name, value in doc["stages"].items()})
    hashes = list(doc.get("sample_hashes_u32_le") or [])
    if hashes != state.python_sample_hashes:
        run._fail_correctness(
            f"{state.selected.id}: native sample-frame hashes {hashes} differ from the Python "
            f"reader's {state.python_sample_hashes} (frames {frames})"
        )
    native_shape = [int(n) for n in doc.get("shape", [])]
    if native_shape and native_shape != state.shape:
        run._fail_correctness(f"{state.selected.id}: native shape {native_shape} != {state.shape}")
    measurement = trials.Measurement(
        cache_state=cache_state,
        seconds=float(doc["wall_seconds"]),
        stages=stages,
        residency_before=residency.fraction,
        read_bytes=max(0, read_bytes or 0),
        file_bytes=residency.file_bytes,
        extra={
            "residency_method": residency.method,
            # the program's own /proc/self/io, read at its start and end
            "io_read_bytes_before": (doc.get("io_before") or {}).get("read_bytes"),
            "io_read_bytes_after": (doc.get("io_after") or {}).get("read_bytes"),
        },
    )
    extra = {
        "sample_frames": frames,
        "sample_hashes_u32_le": hashes,
        "native_peak_rss_bytes": doc.get("peak_rss_bytes"),
        "native_resident_bytes": doc.get("resident_bytes"),
        "native_io_counted": read_bytes is not None,
    }
    return measurement, extra
