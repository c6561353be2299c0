"""Open a history by where it is: a folder, or a database server's URL.

:func:`open_history` is the one place that knows which backends exist; the CLI calls
it once per command and every command works on the
:class:`~harness.history.backend.HistoryBackend` it returns.
"""

from __future__ import annotations

from pathlib import Path

from harness.history.backend import HistoryBackend
from harness.history.folder_history import FolderHistory


def is_url(location: str | Path) -> bool:
    """Whether ``location`` names a server (``SCHEME://...``) rather than a folder."""
    return isinstance(location, str) and "://" in location


def arguments_for(location: str | Path) -> list[str]:
    """The command-line arguments that name the history at ``location`` as given (a
    URL's password kept), for a command this one runs."""
    return ["--history-url" if is_url(location) else "--history-dir", str(location)]


def open_history(location: str | Path, *, read_only: bool = False) -> HistoryBackend:
    """The history at ``location``: a folder (created by its first registration unless
    ``read_only``), or a PostgreSQL database by URL (connected now: HistoryError when it
    is unreachable or not set up, UsageError for a URL of another kind)."""
    if is_url(location):
        # imported here: SQLAlchemy's PostgreSQL dialect and psycopg only when asked for
        from harness.history.server_history import ServerHistory

        return ServerHistory.open(str(location))
    return FolderHistory(location, read_only=read_only)
