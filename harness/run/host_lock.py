"""Host-wide locks: one measuring run per GPU (by UUID) and per storage id at a time.

Two runs on the same GPU or the same storage measure each other. ``harness run`` takes
a lock file per resource in the lock folder (``--lock-dir``; default
``$XDG_RUNTIME_DIR/quantem-harness``, else ``/tmp/quantem-harness-locks``) with
filelock (``flock(2)`` on Linux: the kernel releases it when the process ends, however
it ends, SIGKILL included). A second run waits up to ``--lock-timeout`` seconds, then
fails (exit 1) naming the holder's PID and command line, which the holder writes next
to the lock (``NAME.holder.json``) once it has the lock. Locks are taken in sorted
name order, so two runs needing the same pair cannot deadlock.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from harness.errors import HarnessError

LOCK_DIR_NAME = "quantem-harness"
FALLBACK_LOCK_DIR = "/tmp/quantem-harness-locks"
DEFAULT_LOCK_TIMEOUT = 600.0
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


class LockBusyError(HarnessError):
    """Another run holds a GPU or storage lock past the timeout (exit 1)."""


#: Overrides the default lock folder (tests point it at a private folder).
LOCK_DIR_ENV = "HARNESS_LOCK_DIR"


def default_lock_dir() -> Path:
    if os.environ.get(LOCK_DIR_ENV):
        return Path(os.environ[LOCK_DIR_ENV])
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / LOCK_DIR_NAME
    return Path(FALLBACK_LOCK_DIR)


def lock_name(kind: str, identifier: str) -> str:
    """A file name for a resource: readable slug plus a hash (ids may hold any text)."""
    slug = _SAFE.sub("-", identifier).strip("-")[:48] or "x"
    digest = hashlib.sha256(identifier.encode("utf-8")).hexdigest()[:12]
    return f"{kind}-{slug}-{digest}"


@dataclass(frozen=True)
class Resource:
    kind: str  # "gpu" or "storage"
    identifier: str

    @property
    def name(self) -> str:
        return lock_name(self.kind, self.identifier)


def resources_for(gpu_uuids: Sequence[str | None], storage_id: str | None) -> list[Resource]:
    found = [Resource("gpu", uuid) for uuid in gpu_uuids if uuid]
    if storage_id:
        found.append(Resource("storage", storage_id))
    return sorted(set(found), key=lambda r: r.name)


def _holder_text(path: Path) -> str:
    try:
        holder = json.loads(path.read_text(encoding="utf-8"))
        pid = holder.get("pid")
        alive = ""
        if isinstance(pid, int):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                alive = " (no longer running)"
            except PermissionError:
                pass
        command = " ".join(str(a) for a in holder.get("command", []))
        return f"PID {pid}{alive}, since {holder.get('since_utc')}: {command}"
    except (OSError, ValueError, AttributeError):
        return "a process that left no holder note"


def _write_holder(path: Path, command: Sequence[str]) -> None:
    note = {
        "pid": os.getpid(),
        "command": [str(a) for a in command],
        "since_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    temp = path.with_name(f".{path.name}.{os.getpid()}")
    temp.write_text(json.dumps(note, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(temp, path)


@contextlib.contextmanager
def host_locks(
    resources: Sequence[Resource],
    *,
    lock_dir: Path | None = None,
    timeout: float = DEFAULT_LOCK_TIMEOUT,
    command: Sequence[str] | None = None,
    on_wait=None,
) -> Iterator[list[Path]]:
    """Hold every resource's lock for the block; LockBusyError past ``timeout`` seconds.

    ``on_wait(resource, holder_text)`` is called once when a lock is busy (to say so).
    """
    folder = lock_dir or default_lock_dir()
    folder.mkdir(
        parents=True, exist_ok=True, mode=0o1777 if folder == Path(FALLBACK_LOCK_DIR) else 0o700
    )
    command = list(command) if command is not None else [sys.executable, *sys.argv]
    with contextlib.ExitStack() as stack:
        held = []
        for resource in resources:
            path = folder / f"{resource.name}.lock"
            holder = folder / f"{resource.name}.holder.json"
            lock = FileLock(str(path), timeout=0)
            try:
                lock.acquire()
            except Timeout:
                if on_wait is not None:
                    on_wait(resource, _holder_text(holder))
                try:
                    lock.acquire(timeout=timeout)
                except Timeout as exc:
                    raise LockBusyError(
                        f"{resource.kind} {resource.identifier!r} is in use by another run "
                        f"({_holder_text(holder)}); waited {timeout:g} s for {path} "
                        "(--lock-timeout)"
                    ) from exc
            stack.callback(lock.release)
            _write_holder(holder, command)
            stack.callback(_remove_quietly, holder)
            held.append(path)
        yield held


def _remove_quietly(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
