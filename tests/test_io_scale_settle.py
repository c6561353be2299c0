"""Cached trials after a settle load (cuda's registered staging), tested on the CPU.

On the H100 a cuda cached trial measured 97 ms where a reload in a loop took 26 ms: the
cold trial before it releases the files' page-cache registrations, so every cached trial
registered them again, while its floor (DMA from registered pages) leaves registering out.
A profile with ``settle_cached`` makes one untimed load before each cached trial. Here a
loader that is slow on the second load after an eviction stands in for registering.
"""

from __future__ import annotations

import dataclasses
import itertools
import shutil
import time

import pytest
from _run_helpers import real_disk_dir

from harness.report import parse_report
from harness.run import backends, cache, provenance
from harness.run.demo import write_demo_suite
from harness.run.io_scale.config import IoScaleConfig
from harness.run.io_scale.kind import run_io_scale

SUITE = (("settle-u16", (8, 8), (32, 32), "uint16", 5000.0),)
#: What the stand-in "registration" costs: far above a cached load of this tiny suite.
REGISTER_SECONDS = 0.08


class Registering(backends.BackendProfile):
    """The CPU profile with a registration-like cost on the first load after an eviction."""

    def load(self, path, fmt, settings, *, fresh_index=False):
        LOADS.append((str(path), fmt))
        # files register from their second load after an eviction (the first, cold, is
        # staged by pread), as quantem's registered staging does
        if EVICTED:
            EVICTED[0] += 1
            if EVICTED[0] == 2:
                time.sleep(REGISTER_SECONDS)
        return super().load(path, fmt, settings, fresh_index=fresh_index)


LOADS: list[tuple[str, str]] = []
#: Loads since the last eviction (empty: none since the run began).
EVICTED: list[int] = []


@pytest.fixture
def suite(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "collect_source_hashes", lambda checkout, modules=None: {})
    folder = real_disk_dir(tmp_path)
    written = write_demo_suite(folder / "suite", SUITE, frames_per_shard=24)
    evict = cache.evict_file

    def evict_and_note(path):
        EVICTED[:] = [0]
        return evict(path)

    monkeypatch.setattr(cache, "evict_file", evict_and_note)
    LOADS.clear()
    EVICTED.clear()
    yield folder, written
    if not str(folder).startswith(str(tmp_path)):
        shutil.rmtree(folder, ignore_errors=True)


def _run(monkeypatch, folder, written, settle: bool, name: str):
    base = backends.PROFILES["cpu"]
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    fields["settle_cached"] = settle
    monkeypatch.setitem(backends.PROFILES, "cpu", Registering(**fields))
    LOADS.clear()
    config = IoScaleConfig(
        root=written.root, manifest=written.manifest, backend="cpu", storage_id="test-disk",
        output_dir=folder / name, reps=3, load_only=True, progress=False, command=["test"],
    )  # fmt: skip
    outcome = run_io_scale(config)
    assert outcome.exit_code == 0, outcome.report["status"]["failures"]
    return parse_report(outcome.report_path), list(LOADS)


def _cached_hdf5_median(doc) -> float:
    (row,) = [
        s for s in doc["summaries"] if s["format"] == "hdf5" and s["cache_state"] == "cached"
    ]
    return row["median"]


def test_cached_trials_pay_the_registration_without_a_settle_load(suite, monkeypatch):
    folder, written = suite
    doc, _ = _run(monkeypatch, folder, written, settle=False, name="plain")
    # the defect: each cached trial follows a cold trial's eviction and pays for it
    assert _cached_hdf5_median(doc) >= REGISTER_SECONDS
    assert all("settle" not in t for t in doc["trials"])


def test_a_settle_load_precedes_each_cached_trial_and_is_recorded(suite, monkeypatch):
    folder, written = suite
    doc, loads = _run(monkeypatch, folder, written, settle=True, name="settled")
    assert _cached_hdf5_median(doc) < REGISTER_SECONDS
    cached = [t for t in doc["trials"] if t["cache_state"] == "cached"]
    cold = [t for t in doc["trials"] if t["cache_state"] == "cold"]
    assert cached and cold
    for trial in cached:
        # the untimed load paid what the timed one no longer does, and the record keeps it
        assert trial["settle"]["seconds"] >= REGISTER_SECONDS, trial["settle"]
    assert all("settle" not in t for t in cold)
    # one extra load per cached trial, of the same file, right before it
    _, plain_loads = _run(monkeypatch, folder, written, settle=False, name="plain")
    assert len(loads) - len(plain_loads) == len(cached)
    doubled = sum(1 for a, b in itertools.pairwise(loads) if a == b)
    assert doubled >= len(cached)


def test_only_cuda_settles_by_default():
    assert backends.PROFILES["cuda"].settle_cached
    assert not backends.PROFILES["cpu"].settle_cached
    # the procedure is part of what the records compare on
    assert "untimed load" in backends.PROFILES["cuda"].allocator_policy
