"""The import rules of docs/architecture.md, checked with import-linter (pyproject.toml).

The contracts live in ``[tool.importlinter]``; this test runs them on the tree and
shows that each kind of contract does catch a violation (on a throwaway pair of
packages), so a passing run means the rules hold, not that nothing was checked.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
LINT = (
    "import sys; from importlinter.cli import lint_imports; "
    "sys.exit(lint_imports(config_filename=sys.argv[1]))"
)


def _lint(cwd: Path, config: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run(
        [sys.executable, "-c", LINT, str(config)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_import_contracts_hold():
    done = _lint(REPO, REPO / "pyproject.toml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout
    for contract in (
        "quantem never imports harness",
        "no import cycles among quantem.stem4d",
        "no import cycles among harness",
        "harness layers",
        "harness.run layers",
    ):
        assert contract in done.stdout


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def _layer_files(contract_id: str) -> dict[str, str]:
    """An empty file for every module a containers' layers contract places (pyproject.toml)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == contract_id]
    (container,) = contract["containers"]
    folder = Path(*container.split("."))
    names = [m.strip() for layer in contract["layers"] for m in layer.replace("|", ":").split(":")]
    return {
        str(
            folder / name / "__init__.py"
            if (REPO / folder / name).is_dir()
            else folder / f"{name}.py"
        ): ""
        for name in names
    }


def test_the_contracts_catch_violations(tmp_path):
    """The same contract file on packages that break each rule: every contract breaks."""
    # every module the layers contracts place (empty), then the rule breakers over them
    _write(tmp_path, {**_layer_files("harness-layers"), **_layer_files("run-layers")})
    _write(
        tmp_path,
        {
            "quantem/stem4d/__init__.py": "",
            # quantem importing harness, and a cycle io <-> cuda hidden in a function
            "quantem/stem4d/io.py": "import harness.cli\n\n\ndef load():\n"
            "    import quantem.stem4d.cuda.loaders\n",
            "quantem/stem4d/cuda/__init__.py": "",
            "quantem/stem4d/cuda/loaders.py": "import quantem.stem4d.io\n",
            "harness/__init__.py": "",
            "harness/cli.py": "import harness.commands\n",
            "harness/commands/__init__.py": "import harness.run\n",
            "harness/selfbench/__init__.py": "",
            "harness/run/__init__.py": "import harness.history\n",
            "harness/run/a.py": "import harness.run.b\n",
            "harness/run/b.py": "import harness.run.a\n",  # a cycle
            "harness/run/trials.py": "import harness.run.io_scale\n",  # a part over a kind
            "harness/history/__init__.py": "",
            "harness/history/store.py": "import harness.history.rebuild\nimport harness.run\n",
            "harness/history/rebuild.py": "",
        },
    )
    config = tmp_path / "pyproject.toml"
    config.write_text((REPO / "pyproject.toml").read_text())
    done = _lint(tmp_path, config)
    assert done.returncode != 0
    assert "quantem never imports harness BROKEN" in done.stdout, done.stdout
    assert "no import cycles among harness packages and modules BROKEN" in done.stdout
    assert "no import cycles among quantem.stem4d packages and modules BROKEN" in done.stdout
    assert "harness.run layers" in done.stdout
    assert "harness.run.trials is not allowed to import harness.run.io_scale" in done.stdout
    assert "harness.history is not allowed to import harness.run" in done.stdout
    # exhaustive: a module of harness/run that no layer places breaks the contract
    listed = done.stdout.split("not listed as layers:")[1]
    assert "harness.run.a" in listed and "harness.run.b" in listed
    assert "harness layers" in done.stdout and "Contracts: 0 kept, 5 broken" in done.stdout


def _function_local_harness_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.ImportFrom) and (inner.module or "").startswith("harness"):
                found.append(f"{path.name}:{inner.lineno} from {inner.module}")
            elif isinstance(inner, ast.Import):
                found += [
                    f"{path.name}:{inner.lineno} import {a.name}"
                    for a in inner.names
                    if a.name.startswith("harness")
                ]
    return found


def test_run_modules_import_the_harness_at_the_top():
    """harness/run imports harness modules at module level: a local import hides an arrow.

    Lazy imports of heavy optional libraries (cupy, rich, psutil) inside functions stay.
    ``provenance`` imports the ``harness`` package itself to find where it was loaded from.
    """
    found = []
    for path in sorted((REPO / "harness" / "run").rglob("*.py")):
        found += [
            f
            for f in _function_local_harness_imports(path)
            if not (path.name == "provenance.py" and f.endswith(" import harness"))
        ]
    assert not found, found


def _named_in(doc: str, path: str) -> bool:
    """Whether ``doc`` names the module at ``path`` (as `name.py`) or its package (`name/`)."""
    file = Path(path)
    return (f"`{file.parent.name}/" if file.name == "__init__.py" else f"`{file.name}`") in doc


def test_the_architecture_doc_names_every_placed_module():
    """docs/architecture.md names every module and package the layers contracts place
    (and, the contracts being exhaustive, every one of the folder tree)."""
    doc = (REPO / "docs" / "architecture.md").read_text()
    placed = [*_layer_files("harness-layers"), *_layer_files("run-layers")]
    assert _named_in(doc, "harness/run/webgpu.py") and not _named_in(doc, "harness/run/x.py")
    missing = [path for path in placed if not _named_in(doc, path)]
    assert not missing, f"docs/architecture.md does not name {missing}"
