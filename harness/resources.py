"""Where the harness finds its data folders: ``evidence_schema/`` and ``reports_templates/``.

They live at the top of the source tree (the layout is the architecture). A built wheel
carries copies under ``harness/_data/`` (see ``setup.py``), so a non-editable install
finds them there. The source tree wins when both exist, so an editable checkout always
uses the files it measures and fingerprints.
"""

from __future__ import annotations

from pathlib import Path

from harness.errors import HarnessError

#: Top-level data folders shipped inside the wheel as ``harness/_data/<name>``.
DATA_FOLDERS = ("evidence_schema", "reports_templates")

_PACKAGE_DIR = Path(__file__).resolve().parent


def data_folder(name: str) -> Path:
    """The folder ``name`` (one of :data:`DATA_FOLDERS`), from the source tree or the wheel."""
    if name not in DATA_FOLDERS:
        raise ValueError(f"unknown data folder {name!r}; expected one of {DATA_FOLDERS}")
    for candidate in (_PACKAGE_DIR.parent / name, _PACKAGE_DIR / "_data" / name):
        if candidate.is_dir():
            return candidate
    raise HarnessError(
        f"the harness data folder {name!r} is missing: expected {_PACKAGE_DIR.parent / name} "
        f"(source tree) or {_PACKAGE_DIR / '_data' / name} (installed wheel); reinstall quantem-harness"
    )
