"""Redraw docs/images/dashboard-*.png from the example dashboard of a docs build.

Usage: ``python -m sphinx -b html docs /tmp/site && python docs/screenshots.py /tmp/site``
(needs Playwright and the system Chromium, as the browser tests do).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

IMAGES = Path(__file__).resolve().parent / "images"


def main(site: str) -> int:
    from playwright.sync_api import sync_playwright

    root = Path(site) / "example-dashboard"
    key_pages = sorted((root / "dashboard" / "keys").glob("*.html"))
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=shutil.which("chromium"), args=["--no-sandbox"]
        )
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto((root / "index.html").as_uri())
        page.screenshot(path=str(IMAGES / "dashboard-overview.png"))
        page.goto(key_pages[0].as_uri())
        page.wait_for_selector("body[data-charts-ready=true]")
        page.set_viewport_size({"width": 1280, "height": 1100})
        page.screenshot(path=str(IMAGES / "dashboard-key.png"))
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
