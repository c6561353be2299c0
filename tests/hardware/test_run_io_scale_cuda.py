"""io-scale on the cuda backend: device timing boundary, products equal to the CPU's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _run_helpers import real_disk_dir  # tests/ is on sys.path through its conftest

from harness.run import provenance
from harness.run.demo import write_demo_suite
from harness.run.io_scale.config import IoScaleConfig
from harness.run.io_scale.kind import run_io_scale

SUITE = (
    ("gpu-u8", (8, 8), (48, 48), "uint8", 2000.0),
    ("gpu-u16", (8, 8), (48, 48), "uint16", 20000.0),
)


@pytest.fixture(autouse=True)
def _no_tree_fingerprint(monkeypatch):
    monkeypatch.setattr(provenance, "collect_source_hashes", lambda checkout, modules=None: {})


def _run(folder: Path, suite, backend: str, **options):
    config = IoScaleConfig(
        root=suite.root,
        manifest=suite.manifest,
        backend=backend,
        storage_id="hardware-test",
        output_dir=folder / f"out-{backend}-{options.get('representation', 'dense')}",
        reps=2,
        load_only=True,
        progress=False,
        command=["test"],
        **options,
    )
    return run_io_scale(config)


@pytest.mark.parametrize("representation", ["dense", "encoded"])
def test_cuda_run_matches_cpu_products(tmp_path, representation):
    from harness.report import parse_report

    folder = real_disk_dir(tmp_path)
    suite = write_demo_suite(folder / "suite", SUITE, frames_per_shard=32)
    cpu = _run(folder, suite, "cpu")
    gpu = _run(folder, suite, "cuda", representation=representation)
    assert cpu.exit_code == 0, cpu.report["status"]["failures"]
    assert gpu.exit_code == 0, gpu.report["status"]["failures"]
    doc = parse_report(gpu.report_path)
    assert doc["environment"]["device"]["kind"] == "gpu"
    assert doc["environment"]["device"]["uuid"]
    assert doc["conditions"]["timing_boundary"].startswith("cuda:")
    assert doc["memory"]["gpu_reserved_peak_bytes"] > 0
    cpu_products = {a["id"]: a["indexed_product_sha256"] for a in cpu.report["acquisitions"]}
    gpu_products = {a["id"]: a["indexed_product_sha256"] for a in doc["acquisitions"]}
    assert gpu_products == cpu_products
    assert all(t["label"] == t["cache_state"] for t in doc["trials"]), json.dumps(
        [
            (t["label"], t["residency_before"], t["read_bytes"], t["file_bytes"])
            for t in doc["trials"]
        ]
    )


@pytest.mark.parametrize("representation", ["dense", "encoded"])
def test_cuda_run_with_devices_0_records_the_device(tmp_path, representation):
    """``--devices 0``: the sharded path on one GPU; products equal the one-GPU run's, the
    comparison key differs (devices joined it), every trial names its GPU and bytes."""
    from harness.comparability import collect_differences
    from harness.report import parse_report

    folder = real_disk_dir(tmp_path)
    suite = write_demo_suite(folder / "suite", SUITE, frames_per_shard=32)
    one = _run(folder, suite, "cuda", representation=representation)
    (folder / "sharded").mkdir()
    sharded = _run(folder / "sharded", suite, "cuda", representation=representation, devices=(0,))
    assert sharded.exit_code == 0, sharded.report["status"]["failures"]
    doc = parse_report(sharded.report_path)
    assert [d["id"] for d in doc["conditions"]["devices"]] == [0]
    assert doc["conditions"]["devices"][0]["uuid"] == doc["environment"]["device"]["uuid"]
    assert [d.field for d in collect_differences(one.report, doc)] == ["conditions.devices"]
    products = {a["id"]: a["indexed_product_sha256"] for a in one.report["acquisitions"]}
    assert {a["id"]: a["indexed_product_sha256"] for a in doc["acquisitions"]} == products
    for trial in doc["trials"]:
        (entry,) = trial["devices"]
        assert entry["device"] == 0 and entry["bytes_share"] == 1.0 and entry["bytes"] > 0
        assert entry["stages"]["loader_pipeline"] > 0
