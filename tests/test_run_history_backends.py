"""A run opens its history once, by folder or by URL, and uses it through the backend
contract alone (issue 33): ``run io-scale --demo`` and ``run compute`` register their
report and find their baseline by SHA-256 prefix the same way in a folder
(``--history-dir``) and on a PostgreSQL server (``--history-url``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _postgres import postgres_socket, postgres_url  # noqa: F401 (fixtures)

from harness.cli import main
from harness.errors import EXIT_OK, EXIT_USAGE
from harness.history.records import sha256_bytes

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ["folder", pytest.param("server", marks=pytest.mark.slow)]


@pytest.fixture(params=BACKENDS)
def history_arguments(request, tmp_path: Path) -> list[str]:
    """``--history-dir H`` for a fresh folder, or ``--history-url URL`` for a fresh,
    set-up database."""
    if request.param == "folder":
        return ["--history-dir", str(tmp_path / "h")]
    url = request.getfixturevalue("postgres_url")
    assert main(["history", "init-db", url]) == EXIT_OK
    return ["--history-url", url]


def _listed(history_arguments: list[str], capsys) -> list[str]:
    capsys.readouterr()
    assert main(["history", "list", *history_arguments]) == EXIT_OK
    return [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]


@pytest.mark.slow  # two demo runs: seconds
def test_io_scale_demo_registers_and_finds_its_baseline(
    history_arguments: list[str], tmp_path: Path, capsys
) -> None:
    common = ["run", "io-scale", "--demo", "--load-only", "--reps", "1", *history_arguments]
    assert main([*common, "--output-dir", str(tmp_path / "a")]) in (0, 2)
    out = capsys.readouterr().out
    first = sha256_bytes((tmp_path / "a" / "loading.json").read_bytes())
    assert f"stored {first}" in out and "journal head " in out
    # the next run to try is named by prefix, in this same history
    assert f"--baseline {first[:12]}" in out and history_arguments[0] in out
    assert _listed(history_arguments, capsys) == [first[:12]]

    assert main([*common, "--output-dir", str(tmp_path / "b"), "--baseline", first[:12],
                 "--regression-percent", "100000"]) in (0, 2)  # fmt: skip
    second = json.loads((tmp_path / "b" / "loading.json").read_bytes())
    assert second["baseline"]["sha256"] == first
    assert second["status"]["performance"] in ("pass", "review")
    newer = sha256_bytes((tmp_path / "b" / "loading.json").read_bytes())
    assert _listed(history_arguments, capsys) == [first[:12], newer[:12]]
    assert not (tmp_path / "harness-history").exists()  # the demo's default folder: unused
    assert main(["history", "verify", *history_arguments]) == EXIT_OK


def test_an_unknown_baseline_prefix_is_refused_before_measuring(
    history_arguments: list[str], tmp_path: Path, capsys
) -> None:
    out = tmp_path / "out"
    argv = ["run", "io-scale", "--demo", "--output-dir", str(out), "--baseline", "abcdef12"]
    assert main([*argv, *history_arguments]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "abcdef12" in err and ("no record" in err or "no such history folder" in err)
    assert not (out / "loading.json").exists()


def test_both_locations_are_refused(tmp_path: Path, capsys) -> None:
    url = "postgresql+psycopg://x@/y"
    common = ["run", "io-scale", "--demo", "--output-dir", str(tmp_path / "out")]
    assert main([*common, "--history-dir", str(tmp_path / "h"), "--history-url", url]) == EXIT_USAGE
    assert "not both" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_unreachable_server_is_refused_before_anything_is_measured(
    tmp_path: Path, capsys
) -> None:
    url = f"postgresql+psycopg://nobody@/none?host={tmp_path}"  # no server listens there
    out = tmp_path / "out"
    code = main(["run", "io-scale", "--demo", "--output-dir", str(out), "--history-url", url])
    assert code not in (0, 2, EXIT_USAGE)
    assert "connecting" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.slow  # two compute runs: seconds
def test_compute_registers_and_finds_its_baseline(
    history_arguments: list[str], tmp_path: Path, capsys
) -> None:
    master = ROOT / "tests" / "data" / "srtio3" / "srtio3_focus_high_master.h5"
    common = ["run", "compute", "virtual", "--source", str(master), "--backend", "cpu",
              "--storage-id", "test", "--reps", "1", *history_arguments]  # fmt: skip
    assert main([*common, "--output-dir", str(tmp_path / "a")]) in (0, 2)
    out = capsys.readouterr().out
    first = sha256_bytes((tmp_path / "a" / "compute.json").read_bytes())
    assert f"stored {first}" in out and "journal head " in out
    assert main([*common, "--output-dir", str(tmp_path / "b"), "--baseline", first[:12],
                 "--regression-percent", "100000"]) in (0, 2)  # fmt: skip
    second = json.loads((tmp_path / "b" / "compute.json").read_bytes())
    assert second["baseline"]["sha256"] == first
    newer = sha256_bytes((tmp_path / "b" / "compute.json").read_bytes())
    assert _listed(history_arguments, capsys) == [first[:12], newer[:12]]
