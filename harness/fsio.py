"""Writing files so that a reader never sees half of one: the two ways the harness writes.

- :func:`write_new` creates a file that must not exist yet (evidence: reports, records,
  reference headers). The bytes go to a temporary file, are fsynced, then hard-linked to
  the final name, which fails if anything appeared there meanwhile, so evidence is
  never overwritten, and the folder is fsynced.
- :func:`replace_file` / :func:`replacing` replace a derived file (rendered views) by
  a temporary file and ``os.replace``; durable only with ``fsync=True``.

Every OS error is turned into a :class:`FileWriteError` that names the path that failed
and the step (``records/tmp/ab.tmp: No space left on device while writing the record``),
so the CLI prints one line instead of a traceback.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from harness.errors import HarnessError

#: Suffix of every temporary file written here (``verify`` and ``rebuild`` look for it).
TEMP_SUFFIX = ".tmp"


class FileWriteError(HarnessError, OSError):
    """Writing a file failed; the message names the path and the step."""

    def __init__(self, path: str | os.PathLike, step: str, cause: OSError) -> None:
        reason = cause.strerror or str(cause)
        super().__init__(cause.errno or errno.EIO, f"{path}: {reason} while {step}")
        self.path = Path(path)
        self.step = step

    def __str__(self) -> str:
        return self.strerror


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename, link or create in ``path`` durable (POSIX needs the folder fsynced)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_dir(path: str | os.PathLike, *, step: str = "creating the folder") -> None:
    """Create ``path`` (and parents) and fsync each parent that gained an entry."""
    missing = []
    current = Path(path)
    while not current.exists():
        missing.append(current)
        current = current.parent
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise FileWriteError(folder, step, exc) from exc
        try:
            fsync_dir(folder.parent)
        except OSError as exc:
            raise FileWriteError(folder.parent, step, exc) from exc


def write_new(
    path: str | os.PathLike,
    data: bytes,
    *,
    step: str = "writing the file",
    mode: int | None = None,
    temp_dir: str | os.PathLike | None = None,
) -> Path:
    """Create ``path`` holding ``data``, complete or not at all; never overwrite.

    ``temp_dir`` (same file system) holds the temporary file, by default the target's
    folder. ``mode`` is applied before the file gets its name (records are 0444).

    Raises
    ------
    FileExistsError
        When ``path`` already exists (nothing is written then).
    FileWriteError
        On any other OS error, naming the path and ``step``.
    """
    path = Path(path)
    folder = Path(temp_dir) if temp_dir is not None else path.parent
    ensure_dir(folder, step=step)
    ensure_dir(path.parent, step=step)
    try:
        fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=folder)
    except OSError as exc:
        raise FileWriteError(folder, step, exc) from exc
    temp = Path(temp_name)
    current = temp
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(temp, mode)
        current = path
        os.link(temp, path)  # refuses an existing name: evidence is never overwritten
        current = path.parent
        fsync_dir(path.parent)
    except FileExistsError:
        raise
    except OSError as exc:
        raise FileWriteError(current, step, exc) from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
    return path


@contextlib.contextmanager
def replacing(
    path: str | os.PathLike,
    *,
    step: str = "writing the file",
    mode: int = 0o644,
    fsync: bool = False,
) -> Iterator[BinaryIO]:
    """A handle on a temporary file that replaces ``path`` when the block ends cleanly.

    On any exception the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    ensure_dir(path.parent, step=step)
    try:
        fd, temp_name = tempfile.mkstemp(
            prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent
        )
    except OSError as exc:
        raise FileWriteError(path.parent, step, exc) from exc
    temp = Path(temp_name)
    done = False
    try:
        try:
            handle = os.fdopen(fd, "wb")
        except OSError as exc:
            os.close(fd)
            raise FileWriteError(temp, step, exc) from exc
        with handle:
            try:
                yield handle
                handle.flush()
                if fsync:
                    os.fsync(handle.fileno())
            except OSError as exc:
                raise FileWriteError(temp, step, exc) from exc
        try:
            os.chmod(temp, mode)
            os.replace(temp, path)
            if fsync:
                fsync_dir(path.parent)
        except OSError as exc:
            raise FileWriteError(path, step, exc) from exc
        done = True
    finally:
        if not done:
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()


def replace_file(
    path: str | os.PathLike,
    data: bytes,
    *,
    step: str = "writing the file",
    mode: int = 0o644,
    fsync: bool = False,
) -> None:
    """Replace ``path`` with ``data`` atomically (a reader sees the old or the new bytes)."""
    with replacing(path, step=step, mode=mode, fsync=fsync) as handle:
        handle.write(data)


#: How a killed ``.qem`` writer's temporary file is named: ``.<name>.<pid>.partial``.
_PARTIAL_NAME = re.compile(r"\.(?P<name>.+)\.(?P<pid>[0-9]+)\.partial")
#: A partial file untouched for this long, whose process is gone, is stale.
PARTIAL_STALE_SECONDS = 60.0


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def iter_stale_partials(folder: str | os.PathLike) -> Iterator[Path]:
    """Temporary ``.<name>.<pid>.partial`` files of killed writers in ``folder``.

    Stale means: its process no longer runs on this host *and* it was not written to
    for :data:`PARTIAL_STALE_SECONDS` (so a writer on another host of a shared folder,
    whose pid means nothing here, is left alone while it writes).
    """
    folder = Path(folder)
    if not folder.is_dir():
        return
    now = time.time()
    for path in sorted(folder.iterdir()):
        match = _PARTIAL_NAME.fullmatch(path.name)
        if match is None or not path.is_file() or path.is_symlink():
            continue
        if _process_alive(int(match["pid"])):
            continue
        if now - path.stat().st_mtime < PARTIAL_STALE_SECONDS:
            continue
        yield path


def remove_stale_partials(folder: str | os.PathLike) -> list[Path]:
    """Remove what :func:`iter_stale_partials` finds; return the removed paths."""
    removed = []
    for path in iter_stale_partials(folder):
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise FileWriteError(path, "removing a killed writer's partial file", exc) from exc
        removed.append(path)
    return removed
