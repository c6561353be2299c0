"""The dashboard marks runs on a contended host and cells flagged against their baseline
(issue 35): on the key page's charts, the PNG plot and the tiles' sparklines, each kind
its own marker with its legend or tooltip, and none on quiet, unflagged points. The
truth is the reports themselves (``status.host_load``, ``comparison.cells``), made by
the harness's own comparison; the Chromium tests reuse tests/test_dashboard_browser.py's
system browser."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from harness.history.index_db import forget_index, open_index
from harness.history.layout import HistoryLayout
from harness.history.store import register_reports
from harness.history.verify import verify_history
from harness.render import registration_renderer
from harness.render.keys import collect_key_data
from harness.render.pages import FLAGGED_VERDICTS, collect_index_context
from harness.render.targets import RenderTargets
from harness.report import dump_report
from harness.testing import make_example_report
from tests._dashboard_helpers import (
    CONTENDED_RUNS,
    SLOWED_CELL,
    marked_reports,
    register_marked,
    render_history,
)


def _flagged_cells(doc: dict) -> set[tuple[str, str, str]]:
    cells = (doc.get("comparison") or {}).get("cells") or []
    return {
        (c["acquisition"], c["format"], c["cache_state"])
        for c in cells
        if c["verdict"] in FLAGGED_VERDICTS
    }


def _build(root: Path) -> tuple[Path, list[str], str]:
    """The marked key and one quiet record of another key; their SHA-256s."""
    history = root / "h"
    shas = register_marked(history)
    quiet = make_example_report(300, reps=3, storage_id="quiet-disk")
    quiet["status"]["host_load"] = "quiet"
    (result,) = register_reports(
        history, [dump_report(quiet)], render=registration_renderer("defer")
    )
    return history, shas, result.sha256


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], str]:
    return _build(tmp_path_factory.mktemp("marked"))


@pytest.fixture(scope="module")
def marked(registered) -> tuple[Path, list[str], str]:
    """``registered``, rendered (the browser tests)."""
    render_history(registered[0])
    return registered


def test_the_scenario_flags_exactly_the_slowed_cell() -> None:
    docs = marked_reports()
    assert [_flagged_cells(doc) for doc in docs] == [set(), set(), {SLOWED_CELL}, set()]
    assert [doc["status"]["host_load"] == "contended" for doc in docs] == list(CONTENDED_RUNS)


def _key_of(connection, sha: str) -> str:
    return connection.exec_driver_sql(
        "SELECT comparison_key FROM records WHERE sha256 = ?", (sha,)
    ).scalar_one()


def test_chart_data_mark_contended_runs_and_flagged_cells(registered) -> None:
    history, shas, _ = registered
    docs = marked_reports()
    engine = open_index(HistoryLayout.at(history).index_db, create=False)
    try:
        with engine.connect() as connection:
            data = collect_key_data(connection, _key_of(connection, shas[0]))
    finally:
        engine.dispose()
    assert data["records"]["sha"] == shas
    assert data["records"]["contended"] == list(CONTENDED_RUNS)
    flagged_points = 0
    for panel in data["panels"]:
        for series in panel["series"]:
            cell = (series["acquisition"], panel["format"], panel["cache_state"])
            for x, verdict, flagged in zip(series["x"], series["verdict"], series["flagged"]):
                cells = {
                    (c["acquisition"], c["format"], c["cache_state"]): c["verdict"]
                    for c in (docs[x].get("comparison") or {}).get("cells", [])
                }
                assert verdict == cells.get(cell), (cell, x)
                assert flagged == (cell in _flagged_cells(docs[x])), (cell, x)
                flagged_points += flagged
    assert flagged_points == 1


def test_sparkline_marks_the_contended_run_and_the_flagged_cell(registered) -> None:
    history, shas, quiet = registered
    layout = HistoryLayout.at(history)
    engine = open_index(layout.index_db, create=False)
    try:
        with engine.connect() as connection:
            keys = collect_index_context(connection, RenderTargets(layout.root))["keys"]
    finally:
        engine.dispose()
    (tile,) = [k for k in keys if k["latest_sha"] == shas[-1]]
    assert tile["spark_cell"] == " ".join(SLOWED_CELL)
    points = tile["spark_points"].split()
    marks = [(m["kind"], f"{m['x']},{m['y']}", m["title"]) for m in tile["spark_marks"]]
    (verdict,) = [c["verdict"] for c in marked_reports()[2]["comparison"]["cells"]
                  if (c["acquisition"], c["format"], c["cache_state"]) == SLOWED_CELL]  # fmt: skip
    assert marks == [
        ("contended", points[1], "contended host"),
        ("flagged", points[2], f"{verdict.replace('_', ' ')} vs its baseline"),
    ]
    (plain,) = [k for k in keys if k["latest_sha"] == quiet]
    assert plain["spark_points"] and plain["spark_marks"] == []


def test_verify_checks_the_marker_columns_against_the_records(tmp_path: Path) -> None:
    history, shas, _ = _build(tmp_path)
    index = HistoryLayout.at(history).index_db
    assert verify_history(history).ok
    forget_index(index)
    with sqlite3.connect(index) as connection:
        connection.execute("UPDATE records SET host_load = 'quiet' WHERE sha256 = ?", (shas[1],))
    found = [str(p) for p in verify_history(history).errors]
    assert any(shas[1] in p and "host_load" in p for p in found), found
    with sqlite3.connect(index) as connection:
        connection.execute(
            "UPDATE records SET host_load = 'contended' WHERE sha256 = ?", (shas[1],)
        )
        connection.execute("UPDATE summaries SET verdict = NULL")
    found = [str(p) for p in verify_history(history).errors]
    assert any(shas[2] in p and "summaries" in p for p in found), found


@pytest.mark.slow  # matplotlib
def test_the_plot_marks_them_too(registered) -> None:
    history, shas, _ = registered
    from matplotlib.figure import Figure

    drawn: list[dict] = []
    original = Figure.savefig

    def capture(self, *args, **kwargs):
        for axis in self.axes:
            for collection in axis.collections:
                if collection.get_offsets().shape[0] and collection.get_facecolors().size == 0:
                    drawn.append(
                        {
                            "title": axis.get_title(),
                            "x": [int(x) for x in collection.get_offsets()[:, 0]],
                        }
                    )
        labels = [t.get_text() for legend in self.legends for t in legend.get_texts()]
        drawn.append({"legend": labels})
        return original(self, *args, **kwargs)

    from harness.render import plots

    layout = HistoryLayout.at(history)
    engine = open_index(layout.index_db, create=False)
    Figure.savefig = capture
    try:
        with engine.connect() as connection:
            plots.render_plot(connection, _key_of(connection, shas[0]), history.parent / "plot.png")
    finally:
        Figure.savefig = original
        engine.dispose()
    legend = drawn.pop()["legend"]
    assert "contended host" in legend and "flagged vs baseline" in legend
    flagged = [d for d in drawn if d["x"] == [2]]
    contended = [d for d in drawn if d["x"] == [1]]
    assert len(flagged) == 1 and flagged[0]["title"].startswith(f"{SLOWED_CELL[2]} · hdf5")
    assert len(contended) == 2 * 4  # every series of every panel: 2 acquisitions, 4 panels
    assert len(drawn) == len(flagged) + len(contended)


# --- in Chromium ------------------------------------------------------------------------

from tests.test_dashboard_browser import Watched, browser  # noqa: E402,F401  (the fixture)

#: What the page's plotly traces of marks are named (their legend entries).
LEGENDS = {"contended": "contended host", "flagged": "flagged vs baseline"}


def _key_page(history: Path, sha: str) -> Path:
    (page,) = [p for p in (history / "dashboard" / "keys").glob("*.html") if sha in p.read_text()]
    return page


@pytest.mark.slow
def test_key_page_charts_mark_contended_runs_and_flagged_cells(browser, marked) -> None:  # noqa: F811
    history, shas, quiet = marked
    watched = Watched(browser)
    watched.open(_key_page(history, shas[0]))
    page = watched.page
    charts = page.locator(".chart")
    assert charts.count() == 4
    data = json.loads(page.locator("#key-data").text_content())
    symbols = set()
    for index in range(charts.count()):
        panel = data["panels"][index]
        traces = page.evaluate(
            f"""() => document.getElementById('chart-{index}').data.map((t) => ({{
                name: t.name, meta: t.meta || null, x: t.x,
                symbol: t.marker && t.marker.symbol, color: t.marker && t.marker.color}}))"""
        )
        groups = page.locator(f"#chart-{index} .scatterlayer .trace")
        assert groups.count() == len(traces)
        expected = {
            "contended": [x for x, hit in enumerate(CONTENDED_RUNS) if hit],
            "flagged": [2] if panel["id"] == f"{SLOWED_CELL[2]}-{SLOWED_CELL[1]}" else [],
        }
        for kind, xs in expected.items():
            mine = [(n, t) for n, t in enumerate(traces) if t["meta"] == kind]
            # one trace per series that has such a point, at exactly those records
            per_series = [xs for series in panel["series"] if xs]
            if kind == "flagged" and xs:
                per_series = [xs]  # only the slowed acquisition's series
            assert [t["x"] for _, t in mine] == per_series, (index, kind)
            for n, trace in mine:
                assert trace["name"] == LEGENDS[kind]
                assert groups.nth(n).locator(".point").count() == len(trace["x"])
                symbols.add((kind, trace["symbol"], trace["color"]))
            legend = page.locator(f"#chart-{index} .legend").text_content()
            assert (LEGENDS[kind] in legend) == bool(xs), (index, kind)
        assert charts.nth(index).get_attribute("data-contended") == str(
            sum(CONTENDED_RUNS) * len(panel["series"])
        )
    # the two kinds are told apart by symbol and colour, not only by name
    assert len({s[0] for s in symbols}) == 2
    assert len({s[1] for s in symbols}) == 2 and len({s[2] for s in symbols}) == 2
    # the hover names the mark
    flagged_chart = [p["id"] for p in data["panels"]].index(f"{SLOWED_CELL[2]}-{SLOWED_CELL[1]}")
    traces = page.evaluate(
        f"() => document.getElementById('chart-{flagged_chart}').data.map((t) => t.meta || null)"
    )
    # hovered by plotly itself: a trial drawn under the ring is as close to the mouse
    page.evaluate(
        f"""() => Plotly.Fx.hover(document.getElementById('chart-{flagged_chart}'),
            [{{curveNumber: {traces.index("flagged")}, pointNumber: 0}}])"""
    )
    page.wait_for_selector(".hoverlayer .hovertext", timeout=10_000)
    hover = page.locator(".hoverlayer .hovertext").first.text_content()
    assert "flagged vs baseline" in hover and "vs its baseline" in hover
    assert watched.errors == [] and watched.dialogs == []

    watched.open(_key_page(history, quiet))  # a quiet record without a baseline
    for index in range(page.locator(".chart").count()):
        metas = page.evaluate(
            f"() => document.getElementById('chart-{index}').data.map((t) => t.meta || null)"
        )
        assert metas.count(None) == len(metas)
        assert page.locator(f"#chart-{index}").get_attribute("data-flagged") == "0"
    watched.page.close()


@pytest.mark.slow
def test_tiles_mark_them_on_the_sparkline(browser, marked) -> None:  # noqa: F811
    history = marked[0]
    watched = Watched(browser)
    watched.open(history / "index.html")
    page = watched.page
    tile = page.locator(".tile", has_text="nvme-marked")
    contended = tile.locator("svg.spark rect.spark-contended")
    flagged = tile.locator("svg.spark circle.spark-flagged")
    assert contended.count() == 1 and flagged.count() == 1
    assert contended.locator("title").text_content() == "contended host"
    assert flagged.locator("title").text_content().endswith("vs its baseline")
    for mark in (contended, flagged):
        box = mark.bounding_box()
        assert box is not None and box["width"] > 4  # drawn, inside the sparkline
    strokes = {
        page.evaluate("(e) => getComputedStyle(e).stroke", mark.element_handle())
        for mark in (contended, flagged)
    }
    assert len(strokes) == 2
    plain = page.locator(".tile", has_text="quiet-disk")
    assert plain.locator("svg.spark rect, svg.spark circle.spark-flagged").count() == 0
    assert watched.errors == [] and watched.dialogs == []
    watched.page.close()
