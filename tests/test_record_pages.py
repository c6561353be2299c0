"""Record pages: the same bytes from worker processes as in-process, unchanged pages left
alone, damaged ones replaced, and a worker's error reported with the file it names."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.history.index_db import open_index
from harness.history.layout import HistoryLayout
from harness.render import record_pages
from harness.render.record_pages import write_record_pages
from harness.render.targets import RenderTargets
from tests._dashboard_helpers import build_history


@pytest.fixture
def history(tmp_path: Path) -> Path:
    build_history(tmp_path, render=False)
    return tmp_path / "h"


def _write(history: Path, out: Path, *, processes: int, rewrite: bool = True) -> int:
    layout = HistoryLayout.at(history)
    engine = open_index(layout.index_db, create=False)
    try:
        with engine.begin() as connection:
            return write_record_pages(
                connection, layout, RenderTargets(out), None, rewrite=rewrite, processes=processes
            )
    finally:
        engine.dispose()


def _pages(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (root / "dashboard" / "records").glob("*.html")}


def test_worker_processes_write_the_same_pages(
    history: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # json_href is relative to the page, so both renders go to folders at the same depth
    assert _write(history, history.parent / "one", processes=1) == 6
    monkeypatch.setattr(record_pages, "PARALLEL_PAGES", 1)
    monkeypatch.setattr(record_pages, "PAGES_PER_TASK", 2)
    assert _write(history, history.parent / "two", processes=2) == 6
    one, two = _pages(history.parent / "one"), _pages(history.parent / "two")
    assert len(one) == 6 and one == two
    assert not list((history.parent / "two" / "dashboard").glob(".records.*"))


def test_a_rewrite_keeps_unchanged_pages_and_replaces_damaged_ones(history: Path) -> None:
    out = history.parent / "out"
    _write(history, out, processes=1)
    folder = out / "dashboard" / "records"
    pages = sorted(folder.glob("*.html"))
    before = {p.name: (p.stat().st_ino, p.read_bytes()) for p in pages}
    pages[0].write_bytes(b"damaged")
    pages[1].unlink()
    assert _write(history, out, processes=1, rewrite=True) == 2
    after = {p.name: (p.stat().st_ino, p.read_bytes()) for p in folder.glob("*.html")}
    assert {name: data for name, (_, data) in after.items()} == {
        name: data for name, (_, data) in before.items()
    }
    untouched = [p.name for p in pages[2:]]
    assert all(after[name][0] == before[name][0] for name in untouched)  # not rewritten
    # without rewrite only a missing page is written
    pages[2].unlink()
    pages[3].write_bytes(b"kept as it is")
    assert _write(history, out, processes=1, rewrite=False) == 1
    assert pages[3].read_bytes() == b"kept as it is"


def test_a_record_a_worker_cannot_read_gets_the_fallback_page_and_is_named(
    history: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record whose bytes no longer parse (damaged after registration; verify reports it
    as tampered) no longer stops the render (issue 39): its page, drawn in a worker
    process, is the fallback page, and the parent learns which record and why."""
    layout = HistoryLayout.at(history)
    record = sorted(layout.root.joinpath("records").rglob("*.json"))[0]
    os.chmod(record, 0o644)
    record.write_bytes(b'{"truncated": ')
    monkeypatch.setattr(record_pages, "PARALLEL_PAGES", 1)
    monkeypatch.setattr(record_pages, "PAGES_PER_TASK", 1)
    out = history.parent / "out"
    engine = open_index(layout.index_db, create=False)
    try:
        with engine.begin() as connection:
            pages = record_pages.start_record_pages(
                connection, layout, RenderTargets(out), None, rewrite=True, processes=2
            )
            try:
                assert pages.finish() == 6
            finally:
                pages.close()
    finally:
        engine.dispose()
    ((sha256, error),) = pages.failures
    assert record.name.startswith(sha256) and "truncated JSON" in error
    page = (out / "dashboard" / "records" / f"{sha256}.html").read_bytes()
    assert record_pages.FALLBACK_MARKER in page and b"{&#34;truncated&#34;: " in page
    assert not list((out / "dashboard").glob(".records.*"))


@pytest.mark.parametrize(
    "value",
    ["", "plain-id", "a&b", "<script>", 'say "hi"', "it's", "é ü", 12, 0.5, -3e-07, None],
)
def test_record_html_escapes_exactly_as_html_escape(value: object) -> None:
    from html import escape

    from harness.render.record_html import text, value_html

    assert text(value) == escape(str(value), quote=True)
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        assert value_html(value) == escape(str(value), quote=True)
