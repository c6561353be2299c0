"""The append-only registration journal, a hash chain (``docs/history-format.md`` "Journal").

One deterministic JSON line per registered record: its SHA-256, when and from where it
was registered, and ``prev``, the link of the line before it. A version-2 line's link is
the SHA-256 of its own bytes (newline included), so each line's link covers every line
before it; the link of the last line is the journal's *head*. Whoever keeps a head
(printed by every registration, written into README.md and index.json) can later prove
with ``harness history verify --expect-head`` that nothing registered up to it was removed
or altered.

Version-1 lines (before the chain, no ``v`` and no ``prev``) are never rewritten: they are
chained in memory, each link being the SHA-256 of the previous link and the line's bytes,
and the first version-2 line carries the link of the last version-1 line.

A registration killed mid-append leaves a torn last line, which readers report and skip
(it changes no link), and the next append starts on a fresh line.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone

from harness.errors import HistoryError
from harness.fsio import FileWriteError
from harness.history.layout import SHA256_PATTERN, HistoryLayout

#: Version of the journal lines this harness writes (``"v"`` field; absent means 1).
JOURNAL_LINE_VERSION = 2
#: The head of an empty journal, and the ``prev`` of the first line of a new one.
GENESIS_HEAD = "0" * 64
#: Bytes read from the end of the journal per step when looking for its last line.
_TAIL_BLOCK = 1 << 16


@dataclass(frozen=True)
class ChainBreak:
    """A line whose ``prev`` is not the link of the line before it."""

    line: int
    detail: str


@dataclass
class JournalContents:
    """A parsed journal: entries in order, each line's link, and what is wrong with it."""

    entries: list[dict] = field(default_factory=list)
    torn_lines: list[int] = field(default_factory=list)
    breaks: list[ChainBreak] = field(default_factory=list)
    #: link after each readable line, in order, with its line number
    links: list[tuple[int, str]] = field(default_factory=list)
    head: str = GENESIS_HEAD

    @property
    def shas(self) -> set[str]:
        return {entry["sha256"] for entry in self.entries}


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _legacy_link(prev: str, raw: bytes) -> str:
    return hashlib.sha256(prev.encode("ascii") + b" " + raw).hexdigest()


def _parse_line(raw: bytes) -> dict | None:
    """The entry of one journal line (newline included), or None when it is torn."""
    if not raw.endswith(b"\n"):
        return None
    try:
        entry = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
        return None
    if not SHA256_PATTERN.fullmatch(entry["sha256"]):
        return None
    return entry


def _line_version(entry: dict) -> int:
    version = entry.get("v", 1)
    return version if isinstance(version, int) and not isinstance(version, bool) else -1


def _link(entry: dict, raw: bytes, prev: str) -> str:
    return hashlib.sha256(raw).hexdigest() if _line_version(entry) >= 2 else _legacy_link(prev, raw)


def require_journal(layout: HistoryLayout) -> None:
    """HistoryError unless the journal exists (a missing journal hides every deletion)."""
    if not layout.journal.is_file():
        raise HistoryError(
            f"{layout.journal}: the journal is missing; without it no deletion is detectable. "
            "Restore it from a backup; `harness history verify` lists what it can still check"
        )


def read_journal(layout: HistoryLayout) -> JournalContents:
    """Parse and chain every line; HistoryError when the journal is missing."""
    require_journal(layout)
    contents = JournalContents()
    head = GENESIS_HEAD
    seen_chained = False
    with open(layout.journal, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            entry = _parse_line(raw)
            if entry is None:
                contents.torn_lines.append(number)
                continue
            version = _line_version(entry)
            if version > JOURNAL_LINE_VERSION or version < 1:
                contents.breaks.append(
                    ChainBreak(
                        number,
                        f"line format version {entry.get('v')!r} is not one this harness reads "
                        f"(1 to {JOURNAL_LINE_VERSION})",
                    )
                )
                continue
            if version < 2 and seen_chained:
                contents.breaks.append(
                    ChainBreak(
                        number,
                        "an unchained (version-1) line after chained ones: appended by a harness "
                        "older than the chain, or inserted by hand",
                    )
                )
            seen_chained = seen_chained or version >= 2
            if version >= 2 and entry.get("prev") != head:
                contents.breaks.append(
                    ChainBreak(
                        number,
                        f"its prev {str(entry.get('prev'))[:16]}... is not the link "
                        f"{head[:16]}... of the line before it: a line before it was "
                        "removed, inserted or altered",
                    )
                )
            head = _link(entry, raw, head)
            contents.entries.append(entry)
            contents.links.append((number, head))
    contents.head = head
    return contents


def journal_head(layout: HistoryLayout) -> str:
    """The link of the journal's last line (:data:`GENESIS_HEAD` when empty).

    Reads only the end of the file when the last line is a version-2 line (every
    journal this harness has appended to); a legacy tail is chained from the start.
    """
    require_journal(layout)
    with open(layout.journal, "rb") as handle:
        end = handle.seek(0, os.SEEK_END)
        position = end
        tail = b""
        while position > 0:
            step = min(_TAIL_BLOCK, position)
            position -= step
            handle.seek(position)
            tail = handle.read(step) + tail
            lines = tail.split(b"\n")
            # the first piece may be cut (unless the file starts there); the last piece
            # after the final newline is a torn line, or empty
            complete = lines[1:-1] if position > 0 else lines[:-1]
            for line in reversed(complete):
                raw = line + b"\n"
                entry = _parse_line(raw)
                if entry is None:
                    continue
                if _line_version(entry) >= 2:
                    return hashlib.sha256(raw).hexdigest()
                return read_journal(layout).head
    return GENESIS_HEAD


def append_journal(layout: HistoryLayout, entries: Iterable[dict]) -> str:
    """Append entries as chained version-2 lines, durably (fsync); return the new head.

    The caller holds the history lock.
    """
    entries = list(entries)
    require_journal(layout)
    try:
        with open(layout.journal, "r+b") as handle:
            end = handle.seek(0, os.SEEK_END)
            if end > 0:
                handle.seek(end - 1)
                if handle.read(1) != b"\n":
                    # Seal a torn line left by a killed registration before chaining on:
                    # the sealed line is then read the same way here and by every reader.
                    handle.write(b"\n")
                    handle.flush()
                    os.fsync(handle.fileno())
            head = journal_head(layout)
            if not entries:
                return head
            lines = []
            for entry in entries:
                line = (
                    json.dumps(
                        {**entry, "prev": head, "v": JOURNAL_LINE_VERSION},
                        sort_keys=True,
                        separators=(",", ":"),
                        ensure_ascii=True,
                    )
                    + "\n"
                ).encode("ascii")
                lines.append(line)
                head = hashlib.sha256(line).hexdigest()
            handle.seek(0, os.SEEK_END)
            handle.write(b"".join(lines))
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        raise FileWriteError(layout.journal, "appending to the journal", exc) from exc
    return head
