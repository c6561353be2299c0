"""Helpers the benchmark scripts share (imported as ``_common``: scripts run from this folder)."""

from __future__ import annotations

import argparse
from pathlib import Path


def source_identity() -> str:
    """The tree these scripts belong to: its source fingerprint, and the git revision only
    when that commit's files give the same fingerprint (a copied tree's ``.git`` can name
    other code; ``harness.run.provenance``)."""
    from harness.run.provenance import (
        collect_git_state,
        collect_source_hashes,
        fingerprint_of,
        is_revision_verified,
    )

    checkout = Path(__file__).resolve().parent.parent
    hashes = collect_source_hashes(checkout)
    state = collect_git_state(checkout)
    revision = state["git_revision"]
    verified = is_revision_verified(checkout, revision, hashes)
    words = f"source fingerprint {fingerprint_of(hashes)[:16]}"
    if verified:
        return f"{words}, revision {revision[:12]}"
    return f"{words}, revision unverified ({(revision or 'none')[:12]} does not hold this code)"


def gpu_times(fn, reps: int = 5, warmup: int = 1) -> list[float]:
    """Seconds of ``reps`` calls of ``fn`` by CUDA events on the current stream, after
    ``warmup`` calls and a device synchronisation."""
    import cupy

    for _ in range(warmup):
        fn()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(reps):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return times


if __name__ == "__main__":
    argparse.ArgumentParser(
        description="Helpers the benchmark scripts import; running it prints the tree's identity."
    ).parse_args()
    print(source_identity())
