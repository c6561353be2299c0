"""Physical IO counters of a process from ``/proc/<pid>/io``.

``read_bytes`` counts bytes the process caused to be fetched from storage (page
cache misses, direct IO), not bytes copied by ``read``: that is ``rchar``. A cold
trial proves itself by ``read_bytes`` covering the file; a cached trial by it staying
near zero. The counters are cumulative per process, so trials take differences.
"""

from __future__ import annotations

from dataclasses import dataclass

_FIELDS = ("rchar", "wchar", "syscr", "syscw", "read_bytes", "write_bytes", "cancelled_write_bytes")


@dataclass(frozen=True)
class IoCounters:
    """A snapshot of ``/proc/<pid>/io`` (all values cumulative since the process started)."""

    rchar: int
    wchar: int
    syscr: int
    syscw: int
    read_bytes: int
    write_bytes: int
    cancelled_write_bytes: int

    def __sub__(self, other: IoCounters) -> IoCounters:
        return IoCounters(*(getattr(self, f) - getattr(other, f) for f in _FIELDS))

    def as_dict(self) -> dict[str, int]:
        return {f: getattr(self, f) for f in _FIELDS}


def parse_proc_io(text: str) -> IoCounters:
    """Parse the text of a ``/proc/<pid>/io`` file; raise ValueError when a field is missing."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in _FIELDS:
            values[key.strip()] = int(value)
    missing = [f for f in _FIELDS if f not in values]
    if missing:
        raise ValueError(f"/proc io counters lack {', '.join(missing)}")
    return IoCounters(**values)


def read_io_counters(pid: int | str = "self") -> IoCounters:
    """Counters of process ``pid`` (default: this process); a child must still exist (or be a zombie)."""
    with open(f"/proc/{pid}/io", encoding="ascii") as f:
        return parse_proc_io(f.read())


def io_counters_available() -> bool:
    """True when this kernel exposes task IO accounting (``CONFIG_TASK_IO_ACCOUNTING``)."""
    try:
        read_io_counters()
    except (OSError, ValueError):
        return False
    return True
