"""The dashboard of a 10,000-record history: render time, page sizes, overview load time.

Goals (issue 18): the whole render under 30 s on 2 cores, every page under 5 MB, the
overview interactive in under 2 s in Chromium. The history is the one of
``harness run self`` (harness/selfbench/stages.py: example reports of 40 trials over 4
comparison keys).
The measured numbers are printed (``-s``) and recorded in archive/performance-diary.md;
the render is held to the goal itself (CI runs this test alone on 2 cores), the key
page's charts to 10 times the overview's goal, the sizes to theirs. Besides the wall
time, the CPU time of the render (its own process and the record-page workers) is
printed: on a loaded machine it says what an idle one of 2 cores would take (about half
of it, the work being split over the processes).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

RECORDS = int(os.environ.get("HARNESS_SCALE_RECORDS", "10000"))
PAGE_LIMIT_BYTES = 5_000_000
RENDER_GOAL_S = 30.0
#: The assertion's limit: the goal itself. CI runs this test alone on 2 cores; the render
#: took 12.4 s on the 2-core dev VM at load 3.9 (archive/performance-diary.md, "Dashboard at scale, after
#: the parallel record pages"). On a host shared with other work it can exceed it.
RENDER_LIMIT_S = RENDER_GOAL_S
OVERVIEW_GOAL_S = 2.0
REPO = Path(__file__).resolve().parents[1]


def _build(history: Path) -> None:
    from harness.selfbench.stages import build_history

    assert len(set(build_history(history, RECORDS, processes=2))) == RECORDS


def test_a_10000_record_dashboard_renders_in_time_and_size(tmp_path: Path) -> None:
    from harness.history.index_db import open_index
    from harness.history.layout import HistoryLayout
    from harness.render import render_all

    history = tmp_path / "h"
    _build(history)
    layout = HistoryLayout.at(history)
    engine = open_index(layout.index_db, create=False)
    try:
        cpu_before = _cpu_seconds()
        start = time.perf_counter()
        render_all(layout, engine, plots="all", full=True)
        render_s = time.perf_counter() - start
        render_cpu = _cpu_seconds() - cpu_before
    finally:
        engine.dispose()
    # the overview, one page per key and per record (assets/ holds the static explorer)
    pages = [history / "index.html"]
    pages += [p for p in (history / "dashboard").rglob("*.html") if "assets" not in p.parts]
    assert len(pages) == 1 + 4 + RECORDS
    sizes = {p: p.stat().st_size for p in pages}
    biggest = max(sizes, key=sizes.get)
    key_sizes = [sizes[p] for p in pages if p.parent.name == "keys"]
    metrics = {
        "records": RECORDS,
        "render_all_s": round(render_s, 1),
        "render_cpu_s": round(render_cpu, 1),
        "load_average": [round(x, 1) for x in os.getloadavg()],
        "pages": len(pages),
        "largest_page": f"{biggest.relative_to(history)} {sizes[biggest]} B",
        "key_page_bytes_max": max(key_sizes),
        "record_page_bytes_median": sorted(sizes[p] for p in pages if p.parent.name == "records")[
            RECORDS // 2
        ],
        "overview_bytes": sizes[history / "index.html"],
        "dashboard_bytes_total": sum(
            f.stat().st_size for f in (history / "dashboard").rglob("*") if f.is_file()
        ),
    }
    metrics.update(_overview_in_chromium(history))
    print("\nDASHBOARD-SCALE " + json.dumps(metrics, sort_keys=True))
    assert sizes[biggest] < PAGE_LIMIT_BYTES, metrics
    assert render_s < RENDER_LIMIT_S, metrics
    if "overview_interactive_s" in metrics:
        assert metrics["overview_interactive_s"] < OVERVIEW_GOAL_S, metrics
        assert metrics["key_page_charts_s"] < 10 * OVERVIEW_GOAL_S, metrics


def _cpu_seconds() -> float:
    """User and system CPU of this process and of its finished children (the page workers)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def _overview_in_chromium(history: Path) -> dict[str, float]:
    """Time the overview to DOMContentLoaded and a key page until its charts are drawn."""
    executable = os.environ.get("HARNESS_CHROMIUM") or shutil.which("chromium")
    if executable is None:
        if os.environ.get("HARNESS_REQUIRE_BROWSER") == "1":
            pytest.fail("no chromium on PATH and HARNESS_REQUIRE_BROWSER=1")
        return {}
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        start = time.perf_counter()
        page.goto((history / "index.html").as_uri(), wait_until="domcontentloaded")
        page.locator(".tile").first.click(trial=True)  # actionable: visible, stable, enabled
        overview = time.perf_counter() - start
        key = sorted((history / "dashboard" / "keys").glob("*.html"))[0]
        start = time.perf_counter()
        page.goto(key.as_uri())
        page.wait_for_selector("body[data-charts-ready=true]", timeout=60_000)
        charts = time.perf_counter() - start
        browser.close()
    assert errors == []
    return {"overview_interactive_s": round(overview, 2), "key_page_charts_s": round(charts, 2)}
