"""The documentation site builds (Sphinx + MyST, warnings as errors) and links resolve offline."""

from __future__ import annotations

import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"] or "")
        for name in ("href", "src"):
            if tag in ("a", "img", "link", "script") and values.get(name):
                self.links.append(values[name] or "")


def _parse(path: Path) -> _Links:
    parser = _Links()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            str(REPO / "docs"),
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(out)},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_every_internal_link_and_anchor_resolves(site: Path) -> None:
    pages = [p for p in site.rglob("*.html") if "_modules" not in p.parts]
    cache: dict[Path, set[str]] = {}
    broken = []
    for page in pages:
        for link in _parse(page).links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:")):
                continue  # external: not checked (no network needed)
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(site)}: {link} (no such file)")
                continue
            if parts.fragment and target.suffix == ".html":
                if target not in cache:  # each page parsed for its anchors once
                    cache[target] = _parse(target).ids
                ids = cache[target]
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{page.relative_to(site)}: {link} (no such anchor)")
    assert not broken, "\n".join(broken[:40])


def test_results_api_and_dashboard_are_part_of_the_site(site: Path) -> None:
    assert (site / "performance" / "results.html").is_file()
    api = (site / "api.html").read_text(encoding="utf-8")
    assert "render_all" in api and "compare_reports" in api
    dashboard = (site / "dashboard.html").read_text(encoding="utf-8")
    assert 'href="example-dashboard/index.html"' in dashboard
    overview = (site / "example-dashboard" / "index.html").read_text(encoding="utf-8")
    assert len(re.findall(r'class="tile ', overview)) == 2
