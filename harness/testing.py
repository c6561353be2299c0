"""Builders of valid example reports for tests (no real loads needed).

``make_example_report()`` returns a complete, schema-valid ``loading.json`` document
whose trial timings are drawn from a seeded generator; keyword arguments change the
measured conditions, and ``updates`` sets any field by dotted path
(``{"environment.storage.storage_id": "x", "trials.0.seconds": 2.0}``). Summaries are
recomputed from the trials unless ``updates`` touches them, so a document stays
consistent. Used by the history, comparison and runner tests.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from typing import Any

from harness.report import (
    BENCHMARK,
    PROTOCOL_VERSION,
    SCHEMA_NAME,
    SCHEMA_VERSION,
    summarise_trials,
)


def fake_sha256(text: str) -> str:
    """A deterministic SHA-256 hex string standing for ``text`` (e.g. a source file)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def make_example_report(
    seed: int = 0,
    *,
    acquisition_ids: Sequence[str] = ("scan-a", "scan-b"),
    formats: Sequence[str] = ("hdf5", "qem"),
    cache_states: Sequence[str] = ("cold", "cached"),
    reps: int = 5,
    base_seconds: float = 0.5,
    slowdown: float = 1.0,
    noise: float = 0.02,
    backend: str = "cpu",
    representation: str = "dense",
    device_name: str = "Example CPU",
    device_uuid: str | None = None,
    storage_id: str = "test-nvme",
    timing_boundary: str = "host-array-returned",
    allocator_policy: str = "default",
    correctness: str = "passed",
    git_revision: str = "0123456789abcdef0123456789abcdef01234567",
    created_utc: str = "2026-11-30T08:00:00Z",
    baseline: Mapping[str, Any] | None = None,
    updates: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Return a schema-valid report document.

    Parameters
    ----------
    seed
        Seeds the trial timings; different seeds give different (byte-distinct) reports.
    slowdown
        Multiplies every trial time (e.g. 1.5 for a 50% slower candidate).
    noise
        Relative standard deviation of trial times around their cell's mean.
    updates
        Dotted-path assignments applied last (list indices as numbers).
    """
    rng = random.Random(seed)
    acquisitions = []
    trials = []
    for a, acquisition_id in enumerate(acquisition_ids):
        shape = [8, 8, 64, 64]
        acquisitions.append(
            {
                "id": acquisition_id,
                "filename": f"{acquisition_id}/data_master.h5",
                "source_master_sha256": fake_sha256(f"master:{acquisition_id}"),
                "shape": shape,
                "dtype": "uint16",
                "source_bytes": 2_000_000 + a,
                "qem_bytes": 700_000 + a,
                "first_observation": {"seconds": round(base_seconds * 3, 6), "index_seconds": 0.05},
                "indexed_product_sha256": fake_sha256(f"product:{acquisition_id}"),
                "products_consistent": correctness == "passed",
            }
        )
        for f, fmt in enumerate(formats):
            for cache_state in cache_states:
                mean = (
                    base_seconds * (1 + a) * (1 + 0.5 * f) * (3.0 if cache_state == "cold" else 1.0)
                )
                for index in range(reps):
                    seconds = max(1e-6, mean * slowdown * (1 + noise * rng.gauss(0.0, 1.0)))
                    trials.append(
                        {
                            "acquisition": acquisition_id,
                            "format": fmt,
                            "cache_state": cache_state,
                            "trial_index": index,
                            "label": cache_state,
                            "kept": True,
                            "seconds": round(seconds, 6),
                            "stages": {
                                "read": round(seconds * 0.6, 6),
                                "decode": round(seconds * 0.4, 6),
                            },
                            "residency_before": 0.0 if cache_state == "cold" else 1.0,
                            "read_bytes": 2_000_000 if cache_state == "cold" else 0,
                            "file_bytes": 2_000_000,
                            "product_sha256": fake_sha256(f"product:{acquisition_id}"),
                            "shape": shape,
                            "dtype": "uint16",
                        }
                    )
    failed = correctness != "passed"
    doc: dict[str, Any] = {
        "schema": SCHEMA_NAME,
        "schema_version": SCHEMA_VERSION,
        "protocol_version": PROTOCOL_VERSION,
        "benchmark": BENCHMARK,
        "created_utc": created_utc,
        "command": [
            "harness",
            "run",
            "io-scale",
            "ROOT",
            "--backend",
            backend,
            "--seed",
            str(seed),
        ],
        "status": {
            "execution": "completed",
            "correctness": correctness,
            "source_stability": "stable",
            "performance": "no_baseline" if baseline is None else "pass",
            "exit_code": 1 if failed else 0,
            "failures": ["indexed product differs from the manifest"] if failed else [],
        },
        "baseline": dict(baseline) if baseline is not None else None,
        "provenance": {
            "git_revision": git_revision,
            "git_dirty": False,
            "diff_sha256": None,
            "source_fingerprint_start": fake_sha256("tree"),
            "source_fingerprint_end": fake_sha256("tree"),
            "modules": [
                {
                    "name": "quantem.stem4d.io.arina",
                    "path": "quantem/stem4d/io/arina.py",
                    "sha256": fake_sha256("arina"),
                }
            ],
            "python": "3.11.9",
            "packages": {"numpy": "2.1.0", "h5py": "3.12.1"},
        },
        "environment": {
            "device": {
                "kind": "cpu" if backend != "cuda" else "gpu",
                "name": device_name,
                "uuid": device_uuid,
                "driver": None,
                "cuda_runtime": None,
                "cupy_version": None,
            },
            "host": {
                "hostname": "bench-host",
                "cpu_model": "Example CPU",
                "cores": 2,
                "ram_bytes": 24 << 30,
            },
            "storage": {
                "storage_id": storage_id,
                "filesystem": "ext4",
                "mount_source": "/dev/nvme0n1p1",
                "read_ahead_kb": 128,
            },
        },
        "conditions": {
            "backend": backend,
            "representation": representation,
            "timing_boundary": timing_boundary,
            "allocator_policy": allocator_policy,
            "compiler_cache_dir": None,
            "reps": reps,
            "load_only": True,
            "cache_states": list(cache_states),
        },
        "acquisitions": acquisitions,
        "trials": trials,
        "summaries": [],
        "conversion": None,
        "cold_reload_runs": [],
        "profile": None,
        "memory": {
            "peak_rss_bytes": 500_000_000,
            "gpu_allocated_peak_bytes": None,
            "gpu_reserved_peak_bytes": None,
            "gpu_card_used_peak_bytes": None,
            "resident_bytes": None,
        },
    }
    updates = dict(updates or {})
    for path, value in updates.items():
        if not path.startswith("summaries"):
            set_path(doc, path, value)
    doc["summaries"] = summarise_trials(doc["trials"])
    for path, value in updates.items():
        if path.startswith("summaries"):
            set_path(doc, path, value)
    return doc


def set_path(doc: Any, dotted: str, value: Any) -> None:
    """Assign ``value`` at a dotted path (numeric parts index lists); a missing key is created."""
    parts = dotted.split(".")
    target = doc
    for part in parts[:-1]:
        target = target[int(part)] if isinstance(target, list) else target[part]
    last = parts[-1]
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value


def delete_path(doc: Any, dotted: str) -> None:
    """Remove the key (or list item) at a dotted path."""
    parts = dotted.split(".")
    target = doc
    for part in parts[:-1]:
        target = target[int(part)] if isinstance(target, list) else target[part]
    del target[int(parts[-1]) if isinstance(target, list) else parts[-1]]


def write_example_reports(folder: Any, seeds: Sequence[int], **kwargs: Any) -> list[Any]:
    """Write ``make_example_report(seed)`` for each seed as ``<folder>/report-<seed>.json``."""
    from pathlib import Path

    from harness.report import dump_report

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for seed in seeds:
        path = folder / f"report-{seed}.json"
        path.write_bytes(dump_report(make_example_report(seed, **kwargs)))
        paths.append(path)
    return paths
