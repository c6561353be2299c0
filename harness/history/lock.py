"""Holding a history: its cross-process lock and its ``history.json`` marker.

Every command that writes to a history, or must see it still (verify, render), holds
the lock through :func:`locked_history`; the marker says the folder is a history of a
layout version this harness reads. Store, rebuild and verify all use this module, and
it uses none of them.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from harness.errors import HistoryError
from harness.fsio import FileWriteError, ensure_dir, fsync_dir
from harness.history.layout import (
    HISTORY_FORMAT,
    HISTORY_FORMAT_VERSION,
    LOCK_NAME,
    MARKER_NAME,
    MARKER_TEMP_NAME,
    HistoryLayout,
)

#: Seconds to wait for another process's registration before giving up.
DEFAULT_LOCK_TIMEOUT = 600.0

#: The only names a process creating a history writes before its marker.
_CREATION_NAMES = frozenset({LOCK_NAME, MARKER_NAME, MARKER_TEMP_NAME})


@contextmanager
def reader_lock(layout: HistoryLayout, timeout: float = DEFAULT_LOCK_TIMEOUT) -> Iterator[None]:
    """Hold the history's lock shared, as a reader: writers wait, other readers do not.

    The lock file is opened read-only and never created, so a read-only history (a
    read-only mount, a folder without write permission, an archive) can be read and
    verified: a history without its ``.lock`` has had no writer to wait for.
    """
    try:
        descriptor = os.open(layout.lock, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        yield
        return
    except OSError as exc:
        raise FileWriteError(layout.lock, "taking the history lock to read", exc) from exc
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise HistoryError(
                        f"{layout.lock}: another process held the history lock for {timeout:g} s"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(descriptor)  # releases the lock


@contextmanager
def history_lock(layout: HistoryLayout, timeout: float = DEFAULT_LOCK_TIMEOUT) -> Iterator[None]:
    """Hold the history's registration lock (across processes)."""
    ensure_dir(layout.root, step="creating the history folder")
    lock = FileLock(str(layout.lock), timeout=timeout)
    try:
        lock.acquire()
    except Timeout as exc:
        raise HistoryError(
            f"{layout.lock}: another process held the history lock for {timeout:g} s"
        ) from exc
    except OSError as exc:  # EACCES, EROFS, ENOSPC: a writer needs the lock file
        raise FileWriteError(layout.lock, "taking the history lock to write", exc) from exc
    try:
        yield  # what fails in here is the caller's to name, not the lock's
    finally:
        lock.release()


@contextmanager
def locked_history(
    history_dir: str | Path,
    *,
    create: bool = False,
    timeout: float = DEFAULT_LOCK_TIMEOUT,
    shared: bool = False,
) -> Iterator[HistoryLayout]:
    """The history at ``history_dir``, held under its lock, marker checked.

    With ``create`` a new (or empty) folder becomes a history; without it a folder that
    is not an existing history is refused before anything is written into it. With
    ``shared`` (readers: verify, list, render elsewhere) the lock is held shared and
    nothing is written into the folder (:func:`reader_lock`).
    """
    layout = HistoryLayout.at(history_dir)
    if create:
        refuse_foreign_folder(layout)
    else:
        require_history(layout)
    with reader_lock(layout, timeout) if shared else history_lock(layout, timeout):
        check_history_marker(layout, create=create)
        yield layout


def check_history_marker(layout: HistoryLayout, *, create: bool) -> None:
    """Check (or write) ``history.json``; refuse newer layouts and foreign folders.

    A history created here also gets its empty journal, so that a missing journal is
    always an error (``docs/history-format.md`` "Journal").
    """
    if layout.marker.exists():
        try:
            marker = json.loads(layout.marker.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise HistoryError(f"{layout.marker}: unreadable history marker: {exc}") from exc
        if not isinstance(marker, dict) or marker.get("format") != HISTORY_FORMAT:
            raise HistoryError(f"{layout.marker}: not a quantem-harness history marker")
        version = marker.get("version")
        if not isinstance(version, int) or version > HISTORY_FORMAT_VERSION:
            raise HistoryError(
                f"{layout.root}: history layout version {version!r} is newer than this harness "
                f"reads ({HISTORY_FORMAT_VERSION}); upgrade quantem-harness"
            )
        if create and version < HISTORY_FORMAT_VERSION:
            _write_marker(layout)  # a writer raises it: older harnesses then refuse it
        return
    if not create:
        raise HistoryError(f"{layout.root}: not a history (no {layout.marker.name})")
    foreign = (
        [p.name for p in layout.root.iterdir() if p.name not in _CREATION_NAMES]
        if layout.root.exists()
        else []
    )
    if foreign:
        raise HistoryError(
            f"{layout.root}: folder is not empty and is not a history (no {layout.marker.name}); "
            "choose an empty or new folder"
        )
    ensure_dir(layout.root, step="creating the history folder")
    _write_marker(layout)
    # the journal after the marker: whoever sees it also sees the marker
    try:
        with open(layout.journal, "xb"):
            pass
        fsync_dir(layout.root)
    except FileExistsError:
        pass
    except OSError as exc:
        raise FileWriteError(layout.journal, "creating the journal", exc) from exc


def _write_marker(layout: HistoryLayout) -> None:
    text = json.dumps({"format": HISTORY_FORMAT, "version": HISTORY_FORMAT_VERSION}, sort_keys=True)
    temp = layout.marker_temp  # a fixed name: see refuse_foreign_folder
    try:
        temp.write_text(text + "\n", encoding="ascii")
        temp.replace(layout.marker)
        fsync_dir(layout.root)
    except OSError as exc:
        raise FileWriteError(temp, "writing the history marker", exc) from exc


def require_history(layout: HistoryLayout) -> None:
    """Refuse, before touching anything, a folder that is not an existing history."""
    if not layout.root.exists():
        raise HistoryError(f"{layout.root}: no such history folder")
    if not layout.root.is_dir():
        raise HistoryError(f"{layout.root}: not a folder, so not a history")
    if not layout.marker.exists():
        raise HistoryError(f"{layout.root}: not a history (no {layout.marker.name})")


def refuse_foreign_folder(layout: HistoryLayout) -> None:
    """Refuse a non-empty folder without a marker before the lock file is created in it."""
    if not layout.root.exists():
        return
    if not layout.root.is_dir():
        raise HistoryError(f"{layout.root}: not a folder, so not a history")
    # Another process may be creating this history right now: its lock and the marker's
    # temporary file are the only things it writes before the marker itself. So list the
    # folder first and look for the marker afterwards; checking the marker first left a
    # window in which the creator wrote the marker and then its index between the two
    # looks, and the new index looked foreign.
    foreign = [p.name for p in layout.root.iterdir() if p.name not in _CREATION_NAMES]
    if foreign and not layout.marker.exists():
        raise HistoryError(
            f"{layout.root}: folder is not empty and is not a history (no {layout.marker.name}); "
            "choose an empty or new folder"
        )
