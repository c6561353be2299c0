"""``harness run io-scale --backend webgpu``: loads and products timed in headless Chromium by
web/'s bundle, checked against the Python reader, in a record that ``harness compare`` takes.

Needs Debian's chromium and web/build/quantem-web.js (``npm ci && npm run build`` in web/;
CI builds it before pytest). Without them the test skips saying which is missing, unless
HARNESS_REQUIRE_BROWSER=1 (CI), where it fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.run import webgpu
from harness.run.demo import write_demo_suite
from harness.run.io_scale.config import IoScaleConfig
from harness.run.io_scale.kind import run_io_scale

SUITE = (("web-u16", (4, 5), (24, 20), "uint16", 3000.0),)


def _missing() -> str | None:
    if webgpu.chromium_path() is None:
        return "no system chromium on PATH (apt-get install -y chromium)"
    if not webgpu.BUNDLE.is_file():
        return f"{webgpu.BUNDLE} is missing (npm ci && npm run build in web/)"
    return None


@pytest.fixture(scope="module")
def browser_ready() -> None:
    reason = _missing()
    if reason is not None:
        if os.environ.get("HARNESS_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{reason} and HARNESS_REQUIRE_BROWSER=1")
        pytest.skip(reason)


@pytest.mark.slow
def test_webgpu_trials_are_exact_and_the_record_compares(tmp_path, browser_ready, capsys):
    from harness.cli import main
    from harness.report import parse_report

    suite = write_demo_suite(tmp_path / "suite", SUITE, frames_per_shard=8)
    config = dict(
        root=suite.root,
        manifest=suite.manifest,
        backend="webgpu",
        storage_id="test-disk",
        reps=1,
        load_only=True,
        progress=False,
        command=["test"],
    )
    first = run_io_scale(IoScaleConfig(output_dir=tmp_path / "a", **config))
    assert first.exit_code == 0, first.report["status"]["failures"]
    doc = parse_report(first.report_path)
    assert doc["conditions"]["timing_boundary"] == webgpu.TIMING_BOUNDARY
    assert {t["format"] for t in doc["trials"]} == {"qem"}
    for trial in doc["trials"]:
        assert trial["webgpu_products_exact"] is True
        assert trial["webgpu_bundle_sha256"] == webgpu.browser_page().bundle_sha256
        assert len(trial["sample_hashes_u32_le"]) == len(trial["sample_frames"]) == 3
        assert set(trial["stages"]) >= {"webgpu_checksum_upload_decode", "webgpu_masked_sum"}
        assert trial["stages"]["webgpu_open_validate"] <= trial["seconds"]
    second = run_io_scale(IoScaleConfig(output_dir=tmp_path / "b", **config))
    assert second.exit_code == 0
    assert main(["compare", str(second.report_path), "--baseline", str(first.report_path)]) in (
        0,
        2,
    )


@pytest.mark.slow
def test_a_product_unequal_to_quantems_is_a_correctness_failure(tmp_path, browser_ready):
    """The check can fail: a page whose masked sum is off by one is reported."""
    qem = Path(__file__).resolve().parents[1] / "web" / "fixtures" / "small-v1.qem"
    good = webgpu.measure_webgpu_load(qem, [0, 1], "cached")
    assert good.problems == []
    page = webgpu.browser_page().page
    page.evaluate(
        """() => {
            const original = quantemWeb.timedLoad;
            // the bundle's namespace is read-only: replace the global with a patched copy
            globalThis.quantemWeb = {
                ...quantemWeb,
                timedLoad: async (...args) => {
                    const doc = await original(...args);
                    doc.masked_sum[0] = String(BigInt(doc.masked_sum[0]) + 1n);
                    return doc;
                },
            };
        }"""
    )
    try:
        bad = webgpu.measure_webgpu_load(qem, [0, 1], "cached")
    finally:
        page.reload()
    assert bad.problems == ["small-v1.qem: webgpu masked_sum differs from quantem's"]
