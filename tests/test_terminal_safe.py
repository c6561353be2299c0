"""Report text reaches a terminal or Markdown with its control characters escaped
(issue 39, defect 6).

A storage id ``"ok\\x1b]0;PWNED\\x07\\x1b[2J\\x1b[31mRED"`` or an acquisition id holding a
carriage return, ESC or ``"\\n| injected | row |"`` passes the schema. Printed raw, it
sets the terminal's title, clears the screen, or fakes a table row. Every command that
prints report text shows such characters as visible escapes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rich.console import Console

from harness.cli import main
from harness.history.store import register_reports
from harness.render import registration_renderer
from harness.report import dump_report
from harness.run.summary import print_summary
from harness.safe_text import has_control, terminal_text
from harness.testing import make_example_report

HOSTILE_STORAGE = "ok\x1b]0;PWNED\x07\x1b[2J\x1b[31mRED"
HOSTILE_ACQUISITIONS = ("scan\r\x1b[2Kfake", "a\n| injected | row |")
#: What must never reach the output: ESC, BEL, CR, and the injected row on a line of its own.
_RAW = re.compile(r"[\x1b\x07\r\x9b]|^\s*\| injected \| row \|", re.M)


def _assert_inert(text: str) -> None:
    assert not _RAW.search(text), text
    assert not has_control(text.replace("\n", "")), text  # newlines only between lines


def _report(seed: int, storage_id: str, **kwargs) -> bytes:
    doc = make_example_report(
        seed,
        reps=3,
        acquisition_ids=HOSTILE_ACQUISITIONS,
        storage_id=storage_id,
        device_name="GPU\x1b]0;title\x07",
        created_utc=f"2026-11-30T08:0{seed}:00Z",
        **kwargs,
    )
    doc["status"]["failures"] = []  # schema-valid as it is; the fields above are the test
    return dump_report(doc)


@pytest.fixture
def hostile(tmp_path: Path) -> dict:
    history = tmp_path / "h"
    paths, shas = [], []
    for seed, storage, slowdown in ((1, "plain", 1.0), (2, HOSTILE_STORAGE, 1.0),
                                    (3, HOSTILE_STORAGE, 1.6), (4, HOSTILE_STORAGE, 1.0)):  # fmt: skip
        data = _report(seed, storage, slowdown=slowdown)
        path = tmp_path / f"r{seed}.json"
        path.write_bytes(data)
        (result,) = register_reports(history, [data], render=registration_renderer("defer"))
        paths.append(path)
        shas.append(result.sha256)
    return {"history": history, "paths": paths, "shas": shas}


def _run(argv: list[str], capsys) -> str:
    main(argv)
    captured = capsys.readouterr()
    return captured.out + captured.err


def test_terminal_text_escapes_every_control_character() -> None:
    assert terminal_text(HOSTILE_STORAGE) == "ok\\x1b]0;PWNED\\x07\\x1b[2J\\x1b[31mRED"
    assert terminal_text("a\n| b |\r\t") == "a\\n| b |\\r\\t"
    assert terminal_text("\x9b31m \u202egnp.exe \x7f") == "\\x9b31m \\u202egnp.exe \\x7f"
    assert terminal_text("é ü 温度 C:\\data") == "é ü 温度 C:\\data"  # printable text as it is
    assert terminal_text(None) == "" and terminal_text(12) == "12"
    for code in [*range(0x20), *range(0x7F, 0xA0)]:
        assert not has_control(terminal_text(chr(code))), code


def test_history_list_and_show_escape_report_text(hostile: dict, capsys) -> None:
    where = ["--history-dir", str(hostile["history"])]
    listing = _run(["history", "list", *where], capsys)
    _assert_inert(listing)
    assert "ok\\x1b]0;PWNED\\x07" in listing
    for sha in hostile["shas"]:
        shown = _run(["history", "show", sha[:12], *where], capsys)
        _assert_inert(shown)
        assert "a\\n| injected | row |" in shown


def test_compare_text_and_markdown_escape_report_text(hostile: dict, capsys) -> None:
    where = ["--history-dir", str(hostile["history"])]
    first, second, slower, _ = hostile["shas"]
    for fmt in ("text", "markdown"):
        # cells (acquisition ids) and, against the plain storage, the differing fields
        for baseline, candidate in ((second, slower), (first, second)):
            out = _run(
                ["compare", candidate[:12], "--baseline", baseline[:12], "--format", fmt, *where],
                capsys,
            )
            _assert_inert(out)
    text = _run(
        ["compare", slower[:12], "--baseline", second[:12], "--format", "text", *where], capsys
    )
    assert "scan\\r\\x1b[2Kfake" in text


def test_history_changes_escapes_report_text(hostile: dict, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # the table uncut, so each id shows whole
    where = ["--history-dir", str(hostile["history"])]
    out = _run(["history", "changes", *where, "--repo", str(hostile["history"])], capsys)
    _assert_inert(out)
    assert "scan\\r\\x1b[2Kfake" in out


def test_the_run_summary_escapes_report_text(tmp_path: Path) -> None:
    import json

    doc = json.loads(_report(2, HOSTILE_STORAGE))
    doc["status"]["failures"] = ["source\x1b[2J changed"]
    for compact in (True, False):
        console = Console(file=(tmp_path / "out.txt").open("w"), width=400, force_terminal=False)
        print_summary(doc, console, compact=compact)
        console.file.close()
        out = (tmp_path / "out.txt").read_text()
        _assert_inert(out)
        assert "\\x1b[2J changed" in out


def test_the_markdown_index_escapes_report_text(hostile: dict) -> None:
    readme = (hostile["history"] / "README.md").read_text()
    _assert_inert(readme)
    assert "PWNED" in readme
