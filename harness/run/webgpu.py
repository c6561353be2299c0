"""The ``webgpu`` backend of ``harness run io-scale``: ``.qem`` loads and products timed in
headless Chromium by the repository's browser code (``web/``, bundled by ``npm run build``).

Timing boundary: in the page, after the file's bytes are in page memory (the read from
disk and the transfer into the page are not timed): validation, block checksums (XXH3 in
WebAssembly), upload and decode on the WebGPU device with its status read back. The
products that follow (masked sum of a bright-field disk, centre of mass, pattern sum) are
recorded as stages. Each trial is checked against the Python reader: the sample frames'
hashes (as for native trials), and the products equal quantem's exactly.

The browser is Debian's ``chromium`` (``$HARNESS_CHROMIUM`` or ``chromium`` on PATH) driven
by Playwright; ``--enable-unsafe-webgpu`` exposes a WebGPU adapter in headless mode (on a
machine without a GPU, SwiftShader's software Vulkan: a correctness baseline, not a speed
claim). One browser and one page serve a whole run, so pipelines compile once.
"""

from __future__ import annotations

import atexit
import base64
import functools
import hashlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.run import proc_io, trials
from quantem.stem4d.errors import BackendUnavailableError

#: The browser bundle built by ``npm run build`` in web/.
BUNDLE = Path(__file__).resolve().parents[2] / "web" / "build" / "quantem-web.js"
CHROMIUM_ARGS = ("--no-sandbox", "--enable-unsafe-webgpu")
TIMING_BOUNDARY = (
    "webgpu:in-page-after-file-bytes-in-memory-to-decoded-counts-on-device "
    "(validate, block checksums, upload, decode, status read back; products as stages)"
)


def chromium_path() -> str | None:
    return os.environ.get("HARNESS_CHROMIUM") or shutil.which("chromium")


def bright_field_disk(detector_shape: tuple[int, int]) -> dict[str, Any]:
    """The product's detector: a disk at the detector's centre, a quarter of its side."""
    det_r, det_c = detector_shape
    return {
        "kind": "disk",
        "center": [(det_r - 1) / 2, (det_c - 1) / 2],
        "radius": min(det_r, det_c) / 4,
    }


class BrowserPage:
    """One headless Chromium page with the bundle loaded, kept for the process."""

    def __init__(self) -> None:
        if not BUNDLE.is_file():
            raise BackendUnavailableError(
                f"the webgpu backend is unavailable: {BUNDLE} is missing "
                "(run `npm ci && npm run build` in web/)"
            )
        executable = chromium_path()
        if executable is None:
            raise BackendUnavailableError(
                "the webgpu backend is unavailable: no chromium on PATH "
                "(apt-get install -y chromium, or set HARNESS_CHROMIUM)"
            )
        from playwright.sync_api import sync_playwright  # heavy: only for this backend

        self._playwright = sync_playwright().start()
        self._browser = self._playwright.chromium.launch(
            executable_path=executable, args=list(CHROMIUM_ARGS)
        )
        self.page = self._browser.new_page()
        # file:// is a secure context, as navigator.gpu needs
        self.page.goto(BUNDLE.parent.joinpath("contract.html").as_uri())
        self.adapter = self.page.evaluate(
            """async () => {
                const gpu = navigator.gpu;
                if (!gpu) return null;
                const a = await gpu.requestAdapter();
                return a ? `${a.info.vendor} ${a.info.architecture}`.trim() : null;
            }"""
        )
        self.browser_version = self._browser.version
        # the bundle is built from web/ by npm, outside the source fingerprint: record it
        self.bundle_sha256 = hashlib.sha256(BUNDLE.read_bytes()).hexdigest()

    def close(self) -> None:
        self._browser.close()
        self._playwright.stop()


@functools.cache
def browser_page() -> BrowserPage:
    """The process's page (made on first use, closed at exit)."""
    BUNDLE.parent.joinpath("contract.html").write_text(
        '<!doctype html><meta charset="utf-8"><script src="quantem-web.js"></script>\n'
    )
    page = BrowserPage()
    atexit.register(page.close)
    return page


def require_webgpu() -> None:
    """BackendUnavailableError saying why, unless a WebGPU adapter is there."""
    page = browser_page()
    if page.adapter is None:
        raise BackendUnavailableError(
            "the webgpu backend is unavailable: headless chromium exposes no WebGPU adapter "
            f"(flags {' '.join(CHROMIUM_ARGS)})"
        )


@functools.cache
def python_products(qem_path: Path, detector_shape: tuple[int, int]) -> dict[str, list]:
    """What quantem computes for the trial's products (the truth each trial must equal)."""
    from quantem.stem4d.detector import prepare
    from quantem.stem4d.detector.masks import disk_mask
    from quantem.stem4d.io.qem.reader import load_qem

    spec = bright_field_disk(detector_shape)
    session = prepare(load_qem(qem_path))
    mask = disk_mask(detector_shape, spec["center"], spec["radius"])
    com = session.center_of_mass(mask)
    return {
        "masked_sum": [str(int(v)) for v in np.asarray(session.masked_sum_exact(mask)).ravel()],
        "com_row": [None if np.isnan(v) else float(v) for v in np.asarray(com[0]).ravel()],
    }


@dataclass
class WebGpuLoad:
    """One webgpu trial: the measurement, the sample frames' counts and what differed."""

    measurement: trials.Measurement
    sample_counts: list[np.ndarray]
    shape: list[int]
    record_extra: dict[str, Any]
    problems: list[str] = field(default_factory=list)


def measure_webgpu_load(qem_path: Path, frames: list[int], cache_state: str) -> WebGpuLoad:
    """One load of ``qem_path`` in the page, in ``cache_state`` (which applies to the
    untimed read of the file from disk)."""
    page = browser_page()
    residency = trials.prepare_cache_state(cache_state, [qem_path])
    before = proc_io.read_io_counters()
    data = Path(qem_path).read_bytes()
    delta = proc_io.read_io_counters() - before
    from quantem.stem4d.io.qem.reader import QemFile

    with QemFile(qem_path, verify=False) as qem:
        detector_shape = tuple(int(n) for n in qem.detector_shape)
    spec = bright_field_disk(detector_shape)
    doc = page.page.evaluate(
        "([data, name, frames, spec]) => quantemWeb.timedLoad(data, name, frames, spec)",
        [base64.b64encode(data).decode("ascii"), Path(qem_path).name, list(frames), spec],
    )
    if "skipped" in doc:
        raise BackendUnavailableError(f"the webgpu backend is unavailable: {doc['skipped']}")
    shape = [int(n) for n in doc["shape"]]
    counts = [
        np.asarray(values, dtype=np.uint32).reshape(shape[2:]) for values in doc["sample_frames"]
    ]
    reference = python_products(Path(qem_path), detector_shape)
    problems = [
        f"{Path(qem_path).name}: webgpu {name} differs from quantem's"
        for name in ("masked_sum", "com_row")
        if doc[name] != reference[name]
    ]
    measurement = trials.Measurement(
        cache_state=cache_state,
        seconds=float(doc["load_seconds"]),
        stages={name: float(value) for name, value in doc["stages"].items()},
        residency_before=residency.fraction,
        read_bytes=max(0, delta.read_bytes),
        file_bytes=residency.file_bytes,
        extra={
            "rchar": delta.rchar,
            "residency_method": residency.method,
            "io_read_bytes_before": before.read_bytes,
            "io_read_bytes_after": before.read_bytes + delta.read_bytes,
        },
    )
    record_extra = {
        "webgpu_adapter": doc["adapter"],
        "webgpu_browser": page.browser_version,
        "webgpu_bundle_sha256": page.bundle_sha256,
        "webgpu_products_exact": not problems,
    }
    return WebGpuLoad(measurement, counts, shape, record_extra, problems)
