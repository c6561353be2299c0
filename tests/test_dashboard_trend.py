"""The dashboard's first screen answers "did anything get slower?" (issue 35): each key's
tile shows its newest record against the previous one ("vs previous"), a one-record
sparkline shows its point, and the key page's x axis tells records apart. The
Chromium tests reuse tests/test_dashboard_browser.py's system browser."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.history.store import register_reports
from harness.render import registration_renderer
from harness.report import dump_report
from harness.testing import make_example_report
from tests._dashboard_helpers import render_history

RUNS = 5
SLOWDOWN = 1.5


def build_trend_history(root: Path) -> dict[str, list]:
    """Five runs of one key (the fifth 1.5 times slower than the fourth) and one run of
    another key; rendered. Returns the reports and SHA-256s per storage id."""
    history = root / "h"
    made: dict[str, list] = {"nvme-a": [], "single": []}
    for index in range(RUNS):
        doc = make_example_report(
            index,
            reps=3,
            storage_id="nvme-a",
            created_utc=f"2026-11-30T08:0{index}:00Z",
            git_revision="abcdef0" + f"{index:x}" * 33,
            slowdown=SLOWDOWN if index == RUNS - 1 else 1.0,
        )
        (result,) = register_reports(
            history, [dump_report(doc)], render=registration_renderer("defer")
        )
        made["nvme-a"].append((doc, result.sha256))
    doc = make_example_report(50, reps=3, storage_id="single")
    (result,) = register_reports(history, [dump_report(doc)], render=registration_renderer("defer"))
    made["single"].append((doc, result.sha256))
    render_history(history)
    return made


@pytest.fixture(scope="module")
def trend(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list]]:
    root = tmp_path_factory.mktemp("trend")
    return root / "h", build_trend_history(root)


def _tile(html: str, storage: str) -> str:
    tiles = re.findall(r'<a class="tile.*?</a>', html, flags=re.S)
    (tile,) = [t for t in tiles if storage in t]
    return tile


def test_tile_compares_the_newest_record_with_the_previous_one(trend) -> None:
    root, made = trend
    html = (root / "index.html").read_text()
    tile = _tile(html, "nvme-a")
    (previous_doc, previous_sha), (latest_doc, _) = made["nvme-a"][-2:]
    assert "vs previous" in tile and previous_sha[:12] in tile
    # the largest change it states follows from the two records' medians
    changes = [
        (now["median"] / before["median"] - 1) * 100
        for now, before in zip(latest_doc["summaries"], previous_doc["summaries"])
    ]
    largest = max(changes, key=abs)
    assert f"largest {largest:+.1f}%" in tile
    slower = sum(c > 20 for c in changes)
    assert f"{slower} of {len(changes)} cells more than 20% slower" in tile
    assert 'class="badge"' not in tile  # no explicit baseline: no badge saying no_baseline


def test_a_one_record_sparkline_shows_its_point(trend) -> None:
    root, _ = trend
    tile = _tile((root / "index.html").read_text(), "single")
    assert "none yet (one record)" in tile
    (points,) = re.findall(r'<polyline points="([^"]*)"', tile)
    assert len(points.split()) == 1
    assert re.search(r'<circle class="spark-last" cx="[0-9.]+" cy="[0-9.]+"', tile)


# --- in Chromium ------------------------------------------------------------------------

from tests.test_dashboard_browser import Watched, browser  # noqa: E402,F401  (the fixture)


@pytest.mark.slow
def test_first_screen_shows_each_keys_trend_and_change_vs_previous(browser, trend) -> None:  # noqa: F811
    root, made = trend
    watched = Watched(browser)
    watched.open(root / "index.html")
    page = watched.page
    height = page.viewport_size["height"]
    tiles = page.locator(".tile")
    assert tiles.count() == 2
    for index in range(tiles.count()):
        tile = tiles.nth(index)
        for part in (".tile-trend", "svg.spark"):
            box = tile.locator(part).bounding_box()
            assert box is not None and box["y"] + box["height"] <= height, part  # first screen
        assert tile.locator(".tile-trend").inner_text().startswith("vs previous")
    slowed = page.locator(".tile", has_text="nvme-a")
    text = slowed.locator(".tile-trend").inner_text()
    assert made["nvme-a"][-2][1][:12] in text and "cells more than 20% slower" in text
    assert slowed.locator(".tile-trend").get_attribute("data-state") == "slower"
    assert slowed.locator("svg.spark polyline").get_attribute("points").count(",") == RUNS
    single = page.locator(".tile", has_text="single")
    assert single.locator("svg.spark circle").bounding_box()["width"] > 0
    assert watched.errors == [] and watched.dialogs == []


@pytest.mark.slow
def test_key_page_x_axis_tells_records_apart(browser, trend) -> None:  # noqa: F811
    root, made = trend
    sha = made["nvme-a"][0][1]
    (page_path,) = [p for p in (root / "dashboard" / "keys").glob("*.html") if sha in p.read_text()]
    watched = Watched(browser)
    watched.open(page_path)
    ticks = watched.page.eval_on_selector_all(
        "#chart-0 .xtick text", "elements => elements.map((e) => e.textContent)"
    )
    assert len(ticks) == RUNS and len(set(ticks)) == RUNS  # every record its own label
    assert ticks[0].startswith("#1 abcdef0") and "11-30" in ticks[0]
    assert "Change points" in watched.page.content()
    assert watched.errors == []


def test_readme_states_the_trend_too(trend) -> None:
    root, made = trend
    readme = (root / "README.md").read_text()
    row = next(line for line in readme.splitlines() if "nvme-a" in line)
    assert f"vs `{made['nvme-a'][-2][1][:12]}`" in row and "cells >20% slower" in row
    single = next(line for line in readme.splitlines() if "| single |" in line)
    assert "| one record |" in single
