"""The dashboard in a real browser: Debian's Chromium driven by Playwright (issue 18).

No browser is downloaded: Playwright launches the system Chromium (``chromium`` on
PATH, or ``HARNESS_CHROMIUM``). Where none is installed these tests skip, saying so,
unless ``HARNESS_REQUIRE_BROWSER=1`` (CI sets it), where that is a failure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._dashboard_helpers import CRAFTED_ACQUISITION, RECORDS_PER_KEY, REPS, build_history

pytestmark = pytest.mark.slow


def chromium_path() -> str | None:
    return os.environ.get("HARNESS_CHROMIUM") or shutil.which("chromium")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    executable = chromium_path()
    if executable is None:
        if os.environ.get("HARNESS_REQUIRE_BROWSER") == "1":
            pytest.fail(
                "no chromium on PATH (apt-get install -y chromium) and HARNESS_REQUIRE_BROWSER=1"
            )
        pytest.skip("no system chromium on PATH (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield launched
        launched.close()


class Watched:
    """A page that records console errors, page errors and dialogs (alerts)."""

    def __init__(self, browser) -> None:
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", self._dialog)

    def _dialog(self, dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def open(self, path: Path) -> None:
        self.page.goto(path.as_uri())
        if "/dashboard/keys/" in path.as_posix():
            self.page.wait_for_selector("body[data-charts-ready=true]", timeout=30_000)


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[str]]]:
    root = tmp_path_factory.mktemp("browser")
    return root / "h", build_history(root)


def _key_page_of(root: Path, sha: str) -> Path:
    (page,) = [p for p in (root / "dashboard" / "keys").glob("*.html") if sha in p.read_text()]
    return page


def test_every_page_loads_without_console_errors(browser, history) -> None:
    root, _ = history
    watched = Watched(browser)
    pages = [root / "index.html", *sorted((root / "dashboard").rglob("*.html"))]
    # the index, two key pages, a page a record, two README views, the WebGPU explorer
    assert len(pages) == 1 + 2 + RECORDS_PER_KEY + 2 + 1
    for page in pages:
        watched.open(page)
        assert watched.errors == [], (page, watched.errors)
    assert watched.dialogs == []
    watched.page.close()


def test_each_chart_draws_its_points(browser, history) -> None:
    root, shas = history
    watched = Watched(browser)
    watched.open(_key_page_of(root, shas["nvme-a"][0]))
    charts = watched.page.locator(".chart")
    assert charts.count() == 4  # cold/cached x hdf5/qem
    for index in range(charts.count()):
        # two acquisitions: every record's median and every trial, as markers in the SVG
        drawn = watched.page.locator(f"#chart-{index} .scatterlayer .point").count()
        assert drawn == 2 * RECORDS_PER_KEY * (1 + REPS), index
    watched.page.close()


def test_a_click_on_a_point_opens_that_record(browser, history) -> None:
    root, shas = history
    watched = Watched(browser)
    watched.open(_key_page_of(root, shas["nvme-a"][0]))
    # the median markers of the first series of the first chart, one per record in order
    medians = watched.page.locator("#chart-0 .scatterlayer .trace").nth(2).locator(".point")
    assert medians.count() == RECORDS_PER_KEY
    box = medians.nth(1).bounding_box()
    assert box is not None
    watched.page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    watched.page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    watched.page.wait_for_url(f"**/dashboard/records/{shas['nvme-a'][1]}.html", timeout=10_000)
    assert watched.page.locator("h1 code.sha").inner_text() == shas["nvme-a"][1]
    assert watched.errors == []
    watched.page.close()


def test_a_crafted_report_renders_as_text_and_raises_no_alert(browser, history) -> None:
    root, shas = history
    watched = Watched(browser)
    record = root / "dashboard" / "records" / f"{shas['crafted'][0]}.html"
    watched.open(root / "index.html")
    assert "<img src=x onerror" in watched.page.locator(".tiles").inner_text()
    watched.open(record)
    assert CRAFTED_ACQUISITION in watched.page.locator("table.trials").inner_text()
    assert watched.page.evaluate("document.querySelectorAll('main script, main img').length") == 0
    watched.open(_key_page_of(root, shas["crafted"][0]))
    # hover a median of the crafted series (the second: "plain" sorts first) so that
    # plotly draws the crafted acquisition id in its label
    point = watched.page.locator("#chart-0 .scatterlayer .trace").nth(6).locator(".point").first
    box = point.bounding_box()
    assert box is not None
    watched.page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    watched.page.wait_for_selector(".hoverlayer .hovertext", timeout=10_000)
    hover = watched.page.locator(".hoverlayer .hovertext").first.text_content()
    assert "<script>alert('acq')</script>" in hover
    assert "alert('acq')" in watched.page.locator("#chart-0 .legend").text_content()
    assert watched.dialogs == [] and watched.errors == []
    watched.page.close()
