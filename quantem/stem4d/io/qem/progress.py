"""Progress reporting for long .qem work: a rich bar on a TTY, silence otherwise."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def frame_progress(
    enabled: bool | None, total: int, description: str
) -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n_frames)``; shows a bar when ``enabled`` (default: stderr is a TTY)."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        yield lambda n: None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} frames"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)
