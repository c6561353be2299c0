"""Registering a run's report into its history, or saying how to register it later."""

from __future__ import annotations

import shlex
from pathlib import Path

from harness.errors import HistoryError
from harness.fsio import FileWriteError
from harness.history.store import RegistrationRenderer, register_reports


def register_measured(
    history_dir: Path, report_path: Path, *, render: RegistrationRenderer | None = None
) -> list:
    """Register a run's report; when the history cannot be written (read-only, no
    permission, full), the error names the report, which is kept, and the command that
    registers it later."""
    try:
        return register_reports(history_dir, [report_path], render=render)
    except FileWriteError as exc:
        command = shlex.join(
            [
                "harness",
                "history",
                "register",
                str(Path(report_path).absolute()),
                "--history-dir",
                str(Path(history_dir).absolute()),
            ]
        )
        raise HistoryError(
            f"{exc}; the report is kept at {report_path}: once the history can be written, "
            f"register it with `{command}`"
        ) from exc
