"""The append-only registration journal (``docs/history-format.md`` "Journal").

One deterministic JSON line per newly stored record: its SHA-256, when and from
where it was registered. The journal is a witness independent of the index: a
record in the journal but not on disk was deleted; an index row in neither was
added by hand. A registration killed mid-append leaves a torn last line, which
readers report and skip, and the next append starts on a fresh line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone

from harness.history.layout import SHA256_PATTERN, HistoryLayout


@dataclass
class JournalContents:
    """Parsed journal: entries in order and the line numbers that could not be read."""

    entries: list[dict] = field(default_factory=list)
    torn_lines: list[int] = field(default_factory=list)

    @property
    def shas(self) -> set[str]:
        return {entry["sha256"] for entry in self.entries}


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def append_journal(layout: HistoryLayout, entries: Iterable[dict]) -> None:
    """Append entries durably (fsync); the caller holds the history lock."""
    lines = [
        json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=True) + "\n"
        for entry in entries
    ]
    if not lines:
        return
    created = not layout.journal.exists()
    with open(layout.journal, "ab") as handle:
        if handle.tell() > 0:
            with open(layout.journal, "rb") as reader:
                reader.seek(-1, os.SEEK_END)
                if reader.read(1) != b"\n":
                    handle.write(b"\n")  # seal a torn line left by a killed registration
        handle.write("".join(lines).encode("ascii"))
        handle.flush()
        os.fsync(handle.fileno())
    if created:
        from harness.history.records import fsync_dir

        fsync_dir(layout.root)


def read_journal(layout: HistoryLayout) -> JournalContents:
    contents = JournalContents()
    if not layout.journal.exists():
        return contents
    with open(layout.journal, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                entry = json.loads(raw)
                if not isinstance(entry, dict) or not SHA256_PATTERN.match(
                    str(entry.get("sha256", ""))
                ):
                    raise ValueError
            except ValueError:
                contents.torn_lines.append(number)
                continue
            contents.entries.append(entry)
    return contents
