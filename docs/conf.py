"""Sphinx configuration: the docs/ folder as one site (MyST Markdown, API from docstrings).

Built by ``tests/test_docs.py`` (and CI) with warnings as errors; ``_example`` adds a
small example history's dashboard to the site so that the docs can link to it, and the
committed evidence records are copied beside the results page that links them.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))

project = "quantem-harness"
author = "quantem-harness developers"
copyright = "2026, quantem-harness developers"
extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "performance/evidence", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["colon_fence", "deflist"]
# Headings get anchors, so that a link to page.md#section is checked like the page.
myst_heading_anchors = 4
html_theme = "furo"
html_title = "quantem-harness"
html_static_path: list[str] = []
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "description"
autodoc_mock_imports = ["cupy", "torch"]
napoleon_numpy_docstring = True
napoleon_google_docstring = False
nitpicky = False


def _build_example_dashboard(app) -> None:
    """Render a small example history (harness.testing reports) for the docs to link to:
    two keys, the newest runs 1.3 times slower, one run on a contended host and one
    judged against an earlier run of its key (its cells flagged), as `harness run`
    writes them."""
    import hashlib
    import shutil
    import tempfile

    from harness.history.lookup import LoadedReport
    from harness.history.records import sha256_bytes
    from harness.history.store import register_reports
    from harness.render import registration_renderer
    from harness.report import dump_report
    from harness.run.reporting import compare_with_baseline, exit_code_of
    from harness.testing import make_example_report
    from harness.verdict.comparison import DEFAULT_REGRESSION_PERCENT

    target = Path(app.outdir) / "example-dashboard"
    work = Path(tempfile.mkdtemp(prefix="example-history-")) / "h"
    docs = []
    for seed in range(24):
        doc = make_example_report(
            seed,
            storage_id=("lab-nvme", "lab-nfs")[seed % 2],
            created_utc=f"2026-11-{1 + seed // 2:02d}T08:{seed:02d}:00Z",
            git_revision=hashlib.sha1(str(seed).encode()).hexdigest(),
            slowdown=1.3 if seed >= 16 else 1.0,
        )
        doc["status"]["host_load"] = "contended" if seed == 10 else "quiet"
        if seed == 20:  # judged against seed 14, the same key's last run before the slowdown
            baseline = LoadedReport(docs[14], sha256_bytes(dump_report(docs[14])), Path("run-14"))
            performance = compare_with_baseline(doc, baseline, DEFAULT_REGRESSION_PERCENT)
            doc["status"]["performance"] = performance
            doc["status"]["exit_code"] = exit_code_of(doc["status"], performance)
        docs.append(doc)
    reports = [dump_report(doc) for doc in docs]
    register_reports(work, reports, render=registration_renderer("now"))
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(
        work,
        target,
        ignore=shutil.ignore_patterns("index.sqlite*", ".lock", "tmp", "history.json"),
    )
    shutil.rmtree(work.parent)


def _copy_evidence_records(app) -> None:
    """The committed evidence records, so that the results page's record links resolve."""
    import shutil

    source = DOCS / "performance" / "evidence" / "records" / "sha256"
    target = Path(app.outdir) / "performance" / "evidence" / "records" / "sha256"
    if target.exists():
        shutil.rmtree(target)
    if source.is_dir():
        shutil.copytree(source, target)


def setup(app):
    app.connect("builder-inited", _build_example_dashboard)
    app.connect("builder-inited", _copy_evidence_records)
