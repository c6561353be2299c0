"""Rendered Markdown and HTML escape text taken from reports (issue 6, bad input)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.history.store import register_reports
from harness.render import registration_renderer
from harness.report import dump_report
from harness.safe_text import has_control
from harness.templating import escape_markdown
from harness.testing import make_example_report

CRAFTED_ACQUISITION = "evil](javascript:alert(1)) <script>alert(2)</script> | *x* `y`\n# heading"
CRAFTED_STORAGE = '<img src=x onerror="alert(3)"> [link](http://example.invalid) |cell| _u_'
CRAFTED_DEVICE = "GPU\r\n\r\n<iframe src=//example.invalid>"


@pytest.fixture
def crafted_history(tmp_path: Path) -> Path:
    doc = make_example_report(
        1,
        acquisition_ids=(CRAFTED_ACQUISITION, "plain"),
        storage_id=CRAFTED_STORAGE,
        device_name=CRAFTED_DEVICE,
    )
    history = tmp_path / "h"
    register_reports(history, [dump_report(doc)], render=registration_renderer("defer"))
    return history


def _unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def test_markdown_escapes_crafted_ids(crafted_history: Path) -> None:
    readme = (crafted_history / "README.md").read_text()
    for raw in ("<script", "<img", "<iframe", "\n# heading"):
        assert raw not in readme
    # the only links are the template's own: every bracket from a report is escaped
    link_texts = set(re.findall(r"(?<!\\)\[([^\]]*)\]\(", readme))
    assert link_texts <= {"dashboard", "index.json", "timings.csv", "plot"}
    assert r"evil\](javascript" in readme
    assert "&lt;script&gt;" in readme and "&lt;img src=x" in readme
    table_lines = [line for line in readme.splitlines() if line.startswith("|")]
    header_cells = {}
    for line in table_lines:
        if line.startswith("|---"):
            continue
        # every row of a table has as many cell separators as its header
        if line.startswith("| key ") or line.startswith("| record"):
            current = _unescaped_pipes(line)
            header_cells[line[:8]] = current
        else:
            assert _unescaped_pipes(line) in header_cells.values(), line


def test_html_autoescapes_crafted_ids(crafted_history: Path) -> None:
    html = (crafted_history / "index.html").read_text()
    for raw in ("<script", "<img", "<iframe"):
        assert raw not in html
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=&#34;alert(3)&#34;&gt;" in html


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("scan-a", "scan-a"),
        ("a|b", r"a\|b"),
        ("[x](y)", r"\[x\](y)"),
        ("*bold* _it_ `code`", r"\*bold\* \_it\_ \`code\`"),
        ("<b>&</b>", "&lt;b&gt;&amp;&lt;/b&gt;"),
        ("line\nbreak\r\n# h", r"line break \# h"),
        ("![img](x)", r"\!\[img\](x)"),
        ("ok\x1b]0;PWNED\x07\x1b[2J", r"ok\\x1b\]0;PWNED\\x07\\x1b\[2J"),
        (None, ""),
    ],
)
def test_escape_markdown(text: str | None, expected: str) -> None:
    assert escape_markdown(text) == expected


@given(st.text(max_size=200))
@settings(max_examples=300, deadline=None)
def test_escaped_markdown_has_no_active_characters(text: str) -> None:
    escaped = escape_markdown(text)
    assert "\n" not in escaped and "\r" not in escaped and "<" not in escaped and ">" not in escaped
    assert not has_control(escaped), (text, escaped)
    for char in "|[]`*_":
        # every active character follows an odd run of backslashes (so it is itself escaped)
        for match in re.finditer(re.escape(char), escaped):
            run = len(escaped[: match.start()]) - len(escaped[: match.start()].rstrip("\\"))
            assert run % 2 == 1, (text, escaped)
