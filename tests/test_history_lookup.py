"""One lookup rule for a report named on the command line (`run --baseline`,
`compare --baseline` and CANDIDATE, `history show`): harness.history.lookup."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import UsageError
from harness.history.backend import load_reference
from harness.history.folder_history import FolderHistory
from harness.history.lookup import MIN_PREFIX_DIGITS
from harness.history.store import register_reports
from harness.render import registration_renderer
from harness.report import dump_report
from harness.testing import make_example_report


@pytest.fixture
def history(tmp_path: Path) -> tuple[Path, list]:
    root = tmp_path / "h"
    results = register_reports(
        root,
        [dump_report(make_example_report(s)) for s in range(2)],
        render=registration_renderer("defer"),
    )
    return root, results


def _run_baseline(reference: str, history_dir: Path | None) -> str:
    """What `harness run --baseline` says (the runner calls exactly this)."""
    with pytest.raises(UsageError) as info:
        load_reference(FolderHistory(history_dir) if history_dir else None, reference)
    return str(info.value)


def _compare_baseline(reference: str, history_dir: Path, capsys) -> str:
    argv = ["compare", "--baseline", reference, "--history-dir", str(history_dir), "X.json"]
    assert main(argv) == 64
    return capsys.readouterr().err


def test_run_and_compare_refuse_a_short_prefix_alike(history, capsys) -> None:
    root, results = history
    short = results[0].sha256[: MIN_PREFIX_DIGITS - 2]
    message = _run_baseline(short, root)
    assert "no such report file, and not a SHA-256 prefix (4 to 64 hex digits)" in message
    assert (
        "no such report file, and not a SHA-256 prefix (4 to 64 hex digits)"
        in _compare_baseline(short, root, capsys)
    )
    full = load_reference(FolderHistory(root), results[0].sha256[:MIN_PREFIX_DIGITS])
    assert full.sha256 == results[0].sha256
    upper = load_reference(FolderHistory(root), results[0].sha256[:8].upper(), what="--baseline")
    assert upper.sha256 == results[0].sha256 and upper.path.name == f"{upper.sha256}.json"


def test_a_missing_file_says_the_file_is_missing(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nowhere" / "loading.json"
    message = _run_baseline(str(missing), None)
    assert message == f"{missing}: no such report file"
    argv = ["compare", "--baseline", str(missing), str(missing)]
    assert main(argv) == 64
    err = capsys.readouterr().err
    assert "no such report file" in err and "SHA-256 prefix" not in err
    assert "is a folder" in _run_baseline(str(tmp_path), None)


def test_a_missing_history_folder_says_so(tmp_path: Path, capsys) -> None:
    message = _run_baseline("abcdef", tmp_path / "no-history")
    assert "no such history folder" in message
    assert "no such history folder" in _compare_baseline("abcdef", tmp_path / "no-history", capsys)
    assert "no history (--history-dir)" in _run_baseline("abcdef", None)


def test_ambiguous_prefix_with_planted_names(tmp_path: Path) -> None:
    root = tmp_path / "h"
    (result,) = register_reports(
        root, [dump_report(make_example_report(1))], render=registration_renderer("defer")
    )
    twin = result.path.with_name(result.sha256[:6] + "f" * 58 + ".json")
    twin.write_bytes(b"{}")
    message = _run_baseline(result.sha256[:6], root)
    assert f"SHA-256 prefix {result.sha256[:6]} is ambiguous" in message
    assert "2 records" in message
