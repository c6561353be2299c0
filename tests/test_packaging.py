"""A non-editable install carries the schemas and templates the harness reads."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from harness.resources import DATA_FOLDERS, data_folder

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_data_folders_resolve_to_the_source_tree_in_a_checkout():
    for name in DATA_FOLDERS:
        assert data_folder(name) == REPO_ROOT / name
    with pytest.raises(ValueError, match="unknown data folder"):
        data_folder("nope")


@pytest.mark.slow
def test_built_wheel_carries_the_data_and_the_installed_harness_finds_it(tmp_path):
    wheel_dir = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(wheel_dir),
            str(REPO_ROOT),
        ],
        check=True,
    )
    (wheel,) = wheel_dir.glob("quantem_harness-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in DATA_FOLDERS:
        expected = {
            f"harness/_data/{name}/{p.relative_to(REPO_ROOT / name).as_posix()}"
            for p in (REPO_ROOT / name).rglob("*")
            if p.is_file()
        }
        assert expected and expected <= names, sorted(expected - names)
    assert any(n.startswith("quantem/stem4d/cuda/") and n.endswith(".cu") for n in names)
    migrations = {
        f"harness/history/migrations/{chain}{name}"
        for chain in ("", "evidence/")
        for name in ("env.py", "script.py.mako", "alembic.ini")
    } | {
        p.relative_to(REPO_ROOT).as_posix()
        for p in (REPO_ROOT / "harness/history/migrations").glob("**/versions/*.py")
    }
    assert len(migrations) > 9 and migrations <= names, sorted(migrations - names)

    target = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    code = (
        "from harness.report import SCHEMA_PATH;"
        "from harness.run.manifest import SCHEMA_PATH as M;"
        "from harness.templating import TEMPLATES_DIR as T;"
        "print(SCHEMA_PATH.is_file(), M.is_file(), T.is_dir(), SCHEMA_PATH)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.startswith("True True True"), result.stdout + result.stderr
    assert str(target) in result.stdout
