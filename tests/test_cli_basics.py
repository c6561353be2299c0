"""Top-level CLI behaviour: --version, folders given for files, a closed stdout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main

REPO = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def test_version(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("harness ") and len(out.split()) >= 2


@pytest.mark.parametrize(
    "command", [["qem", "verify"], ["qem", "inspect"], ["qem", "header"], ["data", "info"]]
)
def test_a_folder_where_a_file_belongs_says_so(tmp_path: Path, capsys, command) -> None:
    assert main([*command, str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path}: is a directory" in err and "Traceback" not in err


def test_qem_subcommands_have_descriptions(capsys) -> None:
    for name in ("verify", "inspect", "header"):
        with pytest.raises(SystemExit):
            main(["qem", name, "--help"])
        text = capsys.readouterr().out
        assert len(text.split("\n\n")[1].split()) > 8, name  # a sentence, not only usage


def test_a_closed_stdout_exits_quietly(tmp_path: Path) -> None:
    from harness.history.store import register_reports
    from harness.render import registration_renderer
    from harness.report import dump_report
    from harness.testing import make_example_report

    history = tmp_path / "h"
    register_reports(
        history,
        [dump_report(make_example_report(seed)) for seed in range(3)],
        render=registration_renderer("defer"),
    )
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes (`| head` that exited)
    done = subprocess.run(
        [sys.executable, "-m", "harness", "history", "list", "--history-dir", str(history)],
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        timeout=120,
        check=False,
    )
    os.close(write)
    assert done.stderr == ""
    assert done.returncode == 141


def test_help_imports_no_compute_workload() -> None:
    """The CLI's workload choices are the registry's, read only when a compute command
    needs them: ``harness --help`` stays free of the workloads' imports."""
    code = (
        "import sys\n"
        "from harness.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "assert 'harness.run.compute.workloads' not in sys.modules, 'imported for --help'\n"
        "from harness.commands.run import COMPUTE_WORKLOADS\n"
        "from harness.run.compute.workloads import WORKLOADS\n"
        "assert list(COMPUTE_WORKLOADS) == list(WORKLOADS)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env())
    assert done.returncode == 0, done.stderr


def test_a_missing_dependency_is_named_without_a_traceback(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    # A device image without plotly gave a traceback when a run registered and rendered.
    from harness.testing import write_example_reports

    reports = write_example_reports(tmp_path / "r", [1])
    history = str(tmp_path / "h")
    assert main(["history", "register", "--history-dir", history, "--plots", "defer",
                 *map(str, reports)]) == 0  # fmt: skip
    monkeypatch.setitem(sys.modules, "plotly", None)
    status = main(["render", "index", "--history-dir", history])
    err = capsys.readouterr().err
    assert status == 1
    assert "'plotly'" in err and "Traceback" not in err
