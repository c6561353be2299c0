"""Where a run works: the interrupt latch, the temporary area and the progress bar.

Every disposable file of a run (a prepared ``.qem``, a frame index) lives in one
private folder under the output directory, removed in a ``finally`` also on Ctrl-C,
SIGTERM and SIGHUP. :class:`Workspace` carries that folder with the latch and the
progress bar, so the steps of a run receive these and nothing else of the run.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from harness.errors import HarnessError

#: Name prefix of the temporary area (tests look for leftovers by it).
TEMP_PREFIX = ".io-scale-tmp-"


class InterruptLatch:
    """Remembers that SIGINT, SIGTERM or SIGHUP arrived, even if its exception was lost.

    The handler raises ``KeyboardInterrupt`` so the run unwinds at once; but Python
    discards an exception raised while it runs a weakref callback or a ``__del__``
    ("Exception ignored in ..."), and a run that carried on from there would write a
    report nobody asked for. The latch keeps the signal, :meth:`check` re-raises it at
    every trial boundary, and leaving the area re-raises it before any report is written.
    """

    def __init__(self) -> None:
        self.signum: int | None = None

    def handler(self, signum, frame) -> None:
        self.signum = signum
        raise KeyboardInterrupt(f"signal {signum}")

    def check(self) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt(f"signal {self.signum}")


@contextlib.contextmanager
def temporary_area(parent: Path, latch: InterruptLatch | None = None) -> Iterator[Path]:
    """A private folder for disposable QEM and index files, removed whatever happens.

    SIGINT, SIGTERM and SIGHUP raise ``KeyboardInterrupt`` for the duration (through
    ``latch``, which also remembers them), so a killed run unwinds through the
    ``finally`` like a Ctrl-C instead of leaving files, and never completes normally.
    """
    parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=parent))
    latch = latch if latch is not None else InterruptLatch()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, latch.handler)
    try:
        yield folder
        latch.check()  # a signal whose exception was swallowed still ends the run
    finally:
        try:
            shutil.rmtree(folder, ignore_errors=True)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class Progress:
    """A rich progress bar of trials on a terminal; nothing off a TTY or when disabled."""

    def __init__(self, bar: Any = None, task: Any = None) -> None:
        self._bar = bar
        self._task = task

    def advance(self, steps: int = 1) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, steps)

    def add_total(self, steps: int) -> None:
        """Grow the total (a recheck adds trials to a running bar)."""
        if self._bar is not None:
            self._bar.update(self._task, total=self._bar.tasks[0].total + steps)


@contextlib.contextmanager
def progress_bar(title: str, total: int, show: bool | None = None) -> Iterator[Progress]:
    """A :class:`Progress` over ``total`` trials; ``show=None`` shows it only on a TTY."""
    show = show if show is not None else sys.stderr.isatty()
    if not show:
        yield Progress()
        return
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as RichProgress

    columns = (TextColumn(title, markup=False), BarColumn(), MofNCompleteColumn())
    with RichProgress(*columns, TimeElapsedColumn(), transient=True) as bar:
        yield Progress(bar, bar.add_task("trials", total=total))


@dataclass
class Workspace:
    """The temporary folder, the latch and the progress of one run, and its event hook."""

    folder: Path
    latch: InterruptLatch = field(default_factory=InterruptLatch)
    progress: Progress = field(default_factory=Progress)
    #: Called with (event, details) at stage boundaries; tests use it to act mid-run.
    on_event: Callable[[str, dict], None] | None = None

    @property
    def index_dir(self) -> Path:
        """The run's private frame-index folder (never the user's index)."""
        return self.folder / "index"

    def event(self, name: str, **details: Any) -> None:
        """A stage boundary: re-raise a latched signal, then tell the hook."""
        self.latch.check()
        if self.on_event is not None:
            self.on_event(name, details)


@contextlib.contextmanager
def open_workspace(
    parent: Path,
    *,
    title: str,
    total: int,
    show_progress: bool | None = None,
    on_event: Callable[[str, dict], None] | None = None,
) -> Iterator[Workspace]:
    """The temporary area and a progress bar, together, for the duration of the trials."""
    latch = InterruptLatch()
    with temporary_area(parent, latch) as folder, progress_bar(title, total, show_progress) as bar:
        workspace = Workspace(folder, latch, bar, on_event)
        workspace.index_dir.mkdir()
        yield workspace


#: Lock file that marks an output directory as claimed by a running run.
CLAIM_NAME = ".harness-run.lock"


@contextlib.contextmanager
def claim_output_dir(output_dir: Path, report_name: str) -> Iterator[None]:
    """Hold ``output_dir`` for this run, or refuse at once (before anything is measured).

    A second run into the same folder, started while the first measures, would
    otherwise measure for nothing and fail only when its report cannot be linked into
    place. The claim is an advisory lock (``filelock``; released by the kernel if the
    process dies), and an existing report refuses the folder too: a report is never
    overwritten.
    """
    output_dir.mkdir(parents=True, exist_ok=True)
    lock_path = output_dir / CLAIM_NAME
    lock = FileLock(lock_path, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise HarnessError(
            f"{output_dir} is in use by another run (lock {lock_path}); "
            "choose another --output-dir or wait for that run to end"
        ) from None
    try:
        report_path = output_dir / report_name
        if report_path.exists():
            raise HarnessError(
                f"{report_path} exists; a report is never overwritten: choose a new --output-dir"
            )
        yield
    finally:
        with contextlib.suppress(OSError):
            lock_path.unlink()  # before the release: a waiting run then refuses on the report
        lock.release()
