"""Registering a run's report into its history, or saying how to register it later."""

from __future__ import annotations

import shlex
from pathlib import Path

from harness.errors import HistoryError
from harness.fsio import FileWriteError
from harness.history.backend import HistoryBackend, RegisteredReport
from harness.history.store import RegistrationRenderer, prepare_report


def register_measured(
    history: HistoryBackend, report_path: Path, *, render: RegistrationRenderer | None = None
) -> list[RegisteredReport]:
    """Register a run's report in ``history`` (whichever backend holds it); when the
    history cannot be written (read-only, no permission, full, a server that refuses),
    the error names the report, which is kept, and the command that registers it later."""
    prepared = prepare_report(report_path)
    try:
        return history.register_reports([prepared], render=render)
    except (FileWriteError, HistoryError) as exc:
        command = shlex.join(
            [
                "harness",
                "history",
                "register",
                str(Path(report_path).absolute()),
                *history.location_arguments(),
            ]
        )
        raise HistoryError(
            f"{exc}; the report is kept at {report_path}: once the history can be written, "
            f"register it with `{command}`"
        ) from exc
