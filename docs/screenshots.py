"""Redraw docs/images/dashboard-*.png from the example dashboard of a docs build.

Usage: ``python -m sphinx -b html docs /tmp/site && python docs/screenshots.py /tmp/site``
(needs Playwright and the system Chromium, as the browser tests do). The key page shown
is the example's ``lab-nvme`` key, which holds a run on a contended host and a run with
flagged cells (docs/conf.py), so that its marks are in the picture. The images are saved
with a 256-colour palette (Pillow, which matplotlib brings), a third of their RGB size.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

IMAGES = Path(__file__).resolve().parent / "images"
#: The storage id of the example key whose page is shown.
SHOWN_KEY_STORAGE = "lab-nvme"


def _save_small(png: bytes, path: Path) -> None:
    import io

    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


def main(site: str) -> int:
    from playwright.sync_api import sync_playwright

    root = Path(site) / "example-dashboard"
    key_pages = sorted((root / "dashboard" / "keys").glob("*.html"))
    (shown,) = [p for p in key_pages if SHOWN_KEY_STORAGE in p.read_text(encoding="utf-8")]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=shutil.which("chromium"), args=["--no-sandbox"]
        )
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto((root / "index.html").as_uri())
        _save_small(page.screenshot(), IMAGES / "dashboard-overview.png")
        page.goto(shown.as_uri())
        page.wait_for_selector("body[data-charts-ready=true]")
        page.set_viewport_size({"width": 1280, "height": 1100})
        _save_small(page.screenshot(), IMAGES / "dashboard-key.png")
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
