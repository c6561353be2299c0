"""Importing earlier reports (``harness history import``).

Older reports (schema_version 0, written before the schema existed, and every
earlier version) are stored with their original bytes; they are migrated in
memory for indexing only. Folders are searched for ``loading.json`` files.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from harness.errors import ReportValidationError, UsageError
from harness.history.store import (
    PreparedReport,
    RegisterResult,
    RegistrationRenderer,
    prepare_report,
    register_reports,
)

REPORT_FILENAME = "loading.json"


def collect_import_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files to import: each file given, and every ``loading.json`` under each folder given."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(sorted(path.rglob(REPORT_FILENAME)))
        elif path.is_file():
            found.append(path)
        else:
            raise UsageError(f"{path}: no such file or folder")
    if not found:
        raise UsageError("nothing to import: no report files found")
    return found


def prepare_import(
    paths: Iterable[str | Path], *, skip_invalid: bool = False
) -> tuple[list[PreparedReport], list[ReportValidationError]]:
    """The reports to import, validated, and the refused ones (``skip_invalid``;
    otherwise the first invalid report raises before anything is stored)."""
    accepted: list[PreparedReport] = []
    refused: list[ReportValidationError] = []
    for path in collect_import_paths(paths):
        try:
            accepted.append(prepare_report(path))
        except ReportValidationError as exc:
            if not skip_invalid:
                raise
            refused.append(exc)
    return accepted, refused


def import_reports(
    out_dir: str | Path,
    paths: Iterable[str | Path],
    *,
    skip_invalid: bool = False,
    render: RegistrationRenderer | None = None,
) -> tuple[list[RegisterResult], list[ReportValidationError]]:
    """Register earlier reports into ``out_dir``; return results and refused reports.

    Without ``skip_invalid`` one invalid report refuses the whole import before
    anything is written.
    """
    files = collect_import_paths(paths)
    refused: list[ReportValidationError] = []
    accepted: list[Path] = []
    for path in files:
        try:
            prepare_report(path)
        except ReportValidationError as exc:
            if not skip_invalid:
                raise
            refused.append(exc)
            continue
        accepted.append(path)
    results = register_reports(out_dir, accepted, render=render) if accepted else []
    return results, refused
