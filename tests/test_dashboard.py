"""The static dashboard's HTML (the browser tests are in test_dashboard_browser.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.history.layout import HistoryLayout
from harness.render import keys as render_keys
from harness.render import registration_renderer
from harness.render.pages import script_json
from tests._dashboard_helpers import (
    CRAFTED_ACQUISITION,
    CRAFTED_DEVICE,
    RECORDS_PER_KEY,
    REPS,
    build_history,
    render_history,
)


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[str]]]:
    root = tmp_path_factory.mktemp("dash")
    return root / "h", build_history(root)


def _key_data(page: Path) -> dict:
    match = re.search(
        r'<script type="application/json" id="key-data">(.*?)</script>', page.read_text(), re.S
    )
    assert match, page
    return json.loads(match.group(1))


def test_every_record_and_key_has_a_page(history) -> None:
    root, shas = history
    for sha in shas["nvme-a"] + shas["crafted"]:
        page = root / "dashboard" / "records" / f"{sha}.html"
        assert page.is_file()
        text = page.read_text()
        # the link to the JSON evidence resolves to the stored record
        (href,) = re.findall(r'<a href="([^"]+\.json)">the record', text)
        assert (page.parent / href).resolve() == HistoryLayout.at(root).record_path(sha)
    assert len(list((root / "dashboard" / "keys").glob("*.html"))) == 2
    assert (root / "dashboard" / "assets" / "plotly.min.js").stat().st_size > 1_000_000


def test_overview_tiles_show_verdict_and_sparkline(history) -> None:
    root, _ = history
    html = (root / "index.html").read_text()
    tiles = re.findall(r'<a class="tile verdict-([^"]+)" href="dashboard/keys/(\w+)\.html"', html)
    assert len(tiles) == 2
    # each tile shows the verdict its newest record states (the example baseline run says pass)
    assert {verdict for verdict, _ in tiles} == {"pass", "no_baseline"}
    points = re.findall(r'<polyline points="([^"]+)"', html)
    assert sorted(len(p.split()) for p in points) == [2, RECORDS_PER_KEY]


def test_key_page_data_matches_the_index(history) -> None:
    root, shas = history
    (page,) = [
        p
        for p in (root / "dashboard" / "keys").glob("*.html")
        if shas["nvme-a"][0] in p.read_text()
    ]
    data = _key_data(page)
    assert data["records"]["sha"] == shas["nvme-a"]
    assert [p["id"] for p in data["panels"]] == [
        "cold-hdf5",
        "cold-qem",
        "cached-hdf5",
        "cached-qem",
    ]
    for panel in data["panels"]:
        assert [s["acquisition"] for s in panel["series"]] == ["scan-a", "scan-b"]
        for series in panel["series"]:
            assert series["x"] == list(range(RECORDS_PER_KEY))
            assert len(series["trials"]["x"]) == RECORDS_PER_KEY * REPS
            for low, mid, high in zip(series["p5"], series["median"], series["p95"]):
                assert low <= mid <= high
    # cold loads of 1.5-4.5 s print in s, cached ones of about 0.5 s in ms
    assert {p["id"]: p["unit"] for p in data["panels"]}["cached-hdf5"] == "ms"
    assert {p["id"]: p["unit"] for p in data["panels"]}["cold-hdf5"] == "s"


def test_record_page_shows_the_comparison_with_flagged_cells_first(history) -> None:
    root, shas = history
    text = (root / "dashboard" / "records" / f"{shas['nvme-a'][-1]}.html").read_text()
    assert 'id="comparison"' in text and "verdict <strong" in text
    rows = re.findall(r'<tr class="(flagged|)"><td>', text.split('id="comparison"')[1])
    assert rows and rows == sorted(rows, key=lambda r: r != "flagged")
    assert "flagged" in rows
    # the trials carry their cache-state evidence and product hashes
    assert "residency before" in text and "bytes read / file" in text
    assert text.count('<code class="sha">') >= 2 * 2 * 2 * REPS


def test_crafted_strings_are_escaped_everywhere(history) -> None:
    root, shas = history
    pages = [root / "index.html", *(root / "dashboard").rglob("*.html")]
    for page in pages:
        text = page.read_text()
        assert "<script>alert" not in text, page
        assert "<img src=x" not in text, page
        assert 'onerror="alert' not in text, page
    record = (root / "dashboard" / "records" / f"{shas['crafted'][0]}.html").read_text()
    assert "scan&lt;script&gt;alert(&#x27;acq&#x27;)&lt;/script&gt;" in record
    assert "GPU&lt;/script&gt;" in record


def test_script_json_cannot_end_its_block() -> None:
    text = script_json({"id": CRAFTED_DEVICE, "other": CRAFTED_ACQUISITION + "&"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"id": CRAFTED_DEVICE, "other": CRAFTED_ACQUISITION + "&"}


def test_change_points_are_detected_and_drawn_at_the_step(tmp_path: Path) -> None:
    from harness.history.store import register_reports
    from harness.report import dump_report
    from harness.testing import make_example_report

    history = tmp_path / "h"
    reports = [
        dump_report(
            make_example_report(
                seed,
                reps=3,
                noise=0.01,
                slowdown=1.5 if seed >= 6 else 1.0,
                created_utc=f"2026-11-30T08:{seed:02d}:00Z",
            )
        )
        for seed in range(12)
    ]
    results = register_reports(history, reports, render=registration_renderer("defer"))
    render_history(history)
    (page,) = (history / "dashboard" / "keys").glob("*.html")
    marks = _key_data(page)["change_points"]
    # every one of the 8 cells steps up by 50% at the 7th record, and only there
    assert len(marks) == 8 and {m["x"] for m in marks} == {6}
    assert all(45 < float(m["label"].split("%")[0]) < 55 for m in marks), marks
    assert results[6].sha256 in page.read_text()
    # a registration redraws the page with the stored change points, without detecting again
    register_reports(
        history, [dump_report(make_example_report(99, reps=3))], render=registration_renderer("now")
    )
    assert len(_key_data(page)["change_points"]) == 8


def test_git_order_places_records_by_commit(tmp_path: Path) -> None:
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@e",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@e",
        "PATH": "/usr/bin:/bin",
    }
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
    commits = []
    for n in range(3):
        subprocess.run(
            ["git", "-C", str(repo), "commit", "-q", "--allow-empty", "-m", str(n)],
            check=True,
            env=env,
        )
        commits.append(
            subprocess.run(
                ["git", "-C", str(repo), "rev-parse", "HEAD"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
    positions = render_keys.git_positions(repo)
    assert [positions[c] for c in commits] == [0, 1, 2]
    assert render_keys.git_positions(tmp_path / "not-a-repo") == {}


@pytest.mark.slow
def test_render_index_serves_on_localhost(history, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys
    import urllib.request

    root, _ = history
    repo = Path(__file__).resolve().parents[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness",
            "render",
            "index",
            "--history-dir",
            str(root),
            "--out",
            str(tmp_path / "site"),
            "--serve",
            "--port",
            "0",
            "--no-plots",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )
    try:
        assert server.stdout is not None
        lines = [server.stdout.readline(), server.stdout.readline()]
        (url,) = [line.split()[1] for line in lines if line.startswith("serving ")]
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url + "index.html", timeout=30) as response:
            assert b"Comparison keys" in response.read()
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_png_plots_read_at_150_dpi_with_at_most_four_series_a_panel(history) -> None:
    from PIL import Image

    from harness.render.plots import SERIES_PER_PANEL, _panels

    root, _ = history
    for png in (root / "plots").glob("*.png"):
        with Image.open(png) as image:
            assert round(image.info["dpi"][0]) == 150
            assert image.size[0] >= 1200  # reads on GitHub without zooming
    series = [{"acquisition": f"a{i}"} for i in range(6)]
    data = {"panels": [{"cache_state": "cold", "format": "hdf5", "unit": "ms", "series": series}]}
    split = _panels(data)
    assert [len(p["series"]) for p in split] == [4, 2]
    assert all(len(p["series"]) <= SERIES_PER_PANEL for p in split)
    assert split[0]["title"] == "cold · hdf5 (1/2)"
