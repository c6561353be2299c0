"""Before its fresh children load on cuda, the parent hands its cached device memory back:
on an 80 GB card a child found no room for a 19 GB acquisition while the parent's CuPy pool
held its freed loads (seen on the device)."""

from __future__ import annotations

import contextlib
import sys
import types

from harness.run.fresh import process


class _Pool:
    def __init__(self, log):
        self.log = log

    def free_all_blocks(self):
        self.log.append("freed")


def _fake_cupy(monkeypatch, log):
    module = types.ModuleType("cupy")
    module.get_default_memory_pool = lambda: _Pool(log)
    monkeypatch.setitem(sys.modules, "cupy", module)


def test_the_pool_is_freed_after_the_reference_and_before_any_child(monkeypatch, tmp_path):
    log: list[str] = []
    _fake_cupy(monkeypatch, log)
    monkeypatch.setattr(process, "expected_bf", lambda path, backend: log.append("ref") or "h")

    def spawn(path, backend, env):
        log.append("child")
        return {"product_sha256": "h", "seconds": 1.0, "cpu_seconds": 0.5, "parts": {}}

    monkeypatch.setattr(process, "spawn_one", spawn)
    monkeypatch.setattr(process, "processes_mapping", lambda files: [])
    monkeypatch.setattr(
        process.trials,
        "prepare_cache_state",
        lambda state, files: types.SimpleNamespace(fraction=1.0),
    )
    import quantem.stem4d.cuda

    monkeypatch.setattr(quantem.stem4d.cuda, "release_registered_files", lambda files: None)
    log_failures = types.SimpleNamespace(correctness=lambda message: log.append(message))
    # the cell's summary may need fields this stub child leaves out
    with contextlib.suppress(KeyError, TypeError):
        process.measure_fresh_processes(
            log_failures, "a", "hdf5", tmp_path / "m.h5", [], "cuda", 2, tmp_path
        )
    assert log[:4] == ["ref", "freed", "child", "child"]


def test_the_cpu_backend_leaves_cupy_alone(monkeypatch):
    log: list[str] = []
    _fake_cupy(monkeypatch, log)
    process.release_device_pool("cpu")
    assert log == []
    process.release_device_pool("cuda")
    assert log == ["freed"]
