"""The built wheel is a namespace portion of ``quantem``: it ships no path that
electronmicroscopy's ``quantem`` 0.1.10 wheel ships (its ``quantem/__init__.py`` above all),
so installing both, in either order, overwrites nothing."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
UPSTREAM = REPO / "tests" / "data" / "quantem-0.1.10-wheel-paths.txt"


def upstream_paths() -> set[str]:
    names = {line for line in UPSTREAM.read_text().splitlines() if line}
    return {name for name in names if ".dist-info/" not in name}


def test_the_upstream_list_holds_its_package() -> None:
    paths = upstream_paths()
    assert "quantem/__init__.py" in paths
    assert any(path.startswith("quantem/core/") for path in paths)


def test_the_source_tree_has_no_quantem_init() -> None:
    assert not (REPO / "quantem" / "__init__.py").exists()
    assert (REPO / "quantem" / "stem4d" / "__init__.py").is_file()


def test_the_built_wheel_ships_no_upstream_path(tmp_path: Path) -> None:
    source = tmp_path / "src"
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, tracked):
        rel = Path(name.decode())
        if not (REPO / rel).is_file():
            continue
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, source / rel)
    out = tmp_path / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "--no-index", "-w", str(out), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("quantem_harness-*.whl")
    shipped = {name for name in zipfile.ZipFile(wheel).namelist() if ".dist-info/" not in name}
    assert "quantem/stem4d/__init__.py" in shipped
    assert "quantem/stem4d/cuda/lz4_bitshuffle.cu" in shipped
    clash = sorted(shipped & upstream_paths())
    assert clash == [], f"the wheel ships paths of quantem 0.1.10: {clash[:10]}"
    # No other top-level package of upstream's either.
    upstream_tops = {path.split("/")[1] for path in upstream_paths() if path.count("/") >= 2}
    ours = {path.split("/")[1] for path in shipped if path.startswith("quantem/")}
    assert ours == {"stem4d"}, ours
    assert not ours & upstream_tops
