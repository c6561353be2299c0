"""The evidence-store contract: exact record bytes keyed by SHA-256, and a chained journal.

Two backends keep the same evidence with the same guarantees: the history folder
(:class:`FolderStore`, files plus the journal file, the embedded default) and a
PostgreSQL database (:class:`harness.history.postgres.PostgresStore`, issue 15). Both
pass the same contract tests (``tests/test_evidence_store.py``), as every zarr store
passes zarr's shared store tests. The journal lines are byte-identical in both, so a
head is a head whichever backend holds it (``docs/history-format.md`` "Journal").
The commands use the wider :class:`harness.history.backend.HistoryBackend`, of which
this is the evidence part.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

from harness.errors import HistoryError
from harness.history.journal import (
    GENESIS_HEAD,
    JOURNAL_LINE_VERSION,
    append_journal,
    journal_head,
    read_journal,
)
from harness.history.layout import SHA256_PATTERN, HistoryLayout
from harness.history.lock import locked_history
from harness.history.records import check_stored_record, sha256_bytes, write_record


@dataclass(frozen=True)
class StoredRecord:
    """What storing one record did."""

    sha256: str
    created: bool


@dataclass(frozen=True)
class StoreCheck:
    """What :meth:`EvidenceStore.check` found: each problem as one line, and the head."""

    problems: list[str]
    head: str
    records: int

    @property
    def ok(self) -> bool:
        return not self.problems


class EvidenceStore(Protocol):
    """Records and journal of one history, whatever holds them."""

    def register(self, data: bytes, *, source: str, registered_utc: str) -> StoredRecord:
        """Store ``data`` and journal it, as one step; identical bytes are a no-op."""

    def read(self, sha256: str) -> bytes:
        """The exact stored bytes; HistoryError when absent."""

    def head(self) -> str:
        """The journal's head (:data:`GENESIS_HEAD` when empty)."""

    def journal_lines(self) -> list[bytes]:
        """Every journal line, newline included, in order."""

    def check(self, *, expect_head: str | None = None) -> StoreCheck:
        """Re-hash every record and walk the chain; never modifies anything."""


def journal_line(entry: dict, prev: str) -> bytes:
    """One chained journal line, exactly as the folder journal writes it."""
    return (
        json.dumps(
            {**entry, "prev": prev, "v": JOURNAL_LINE_VERSION},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=True,
        )
        + "\n"
    ).encode("ascii")


def check_chain(lines: list[bytes], expect_head: str | None) -> tuple[list[str], str, set[str]]:
    """Problems of a list of chained lines, their head, and the SHA-256s they register."""
    problems = []
    head = GENESIS_HEAD
    links = set()
    shas: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        try:
            entry = json.loads(line)
        except ValueError:
            problems.append(f"journal line {number}: unreadable")
            continue
        if entry.get("prev") != head:
            problems.append(f"journal line {number}: does not follow the line before it")
        head = sha256_bytes(line)
        links.add(head)
        sha256 = entry.get("sha256")
        if isinstance(sha256, str) and SHA256_PATTERN.fullmatch(sha256):
            if sha256 in shas:  # a registration journals a record once: a writer's doing
                problems.append(
                    f"journal line {number}: registers record {sha256} again "
                    f"(first on line {shas[sha256]})"
                )
            else:
                shas[sha256] = number
    if expect_head is not None and expect_head != GENESIS_HEAD and expect_head not in links:
        problems.append(f"expected head {expect_head} is not a link of the journal")
    return problems, head, set(shas)


class FolderStore:
    """The history folder as an :class:`EvidenceStore` (records/ and journal.jsonl)."""

    def __init__(self, history_dir) -> None:
        self.history_dir = history_dir

    def register(self, data: bytes, *, source: str, registered_utc: str) -> StoredRecord:
        with locked_history(self.history_dir, create=True) as layout:
            written = write_record(layout, data)
            if written.created or written.sha256 not in read_journal(layout).shas:
                entry = {"registered_utc": registered_utc, "sha256": written.sha256}
                append_journal(layout, [{**entry, "source": source}])
            return StoredRecord(written.sha256, written.created)

    def read(self, sha256: str) -> bytes:
        layout = HistoryLayout.at(self.history_dir)
        path = layout.record_path(sha256)
        if not path.is_file():
            raise HistoryError(f"{path}: no record {sha256}")
        return path.read_bytes()

    def _exists(self) -> bool:
        return HistoryLayout.at(self.history_dir).marker.exists()

    def head(self) -> str:
        if not self._exists():
            return GENESIS_HEAD
        with locked_history(self.history_dir, shared=True) as layout:
            return journal_head(layout)

    def journal_lines(self) -> list[bytes]:
        if not self._exists():
            return []
        with locked_history(self.history_dir, shared=True) as layout:
            return layout.journal.read_bytes().splitlines(keepends=True)

    def check(self, *, expect_head: str | None = None) -> StoreCheck:
        with locked_history(self.history_dir, shared=True) as layout:
            lines = layout.journal.read_bytes().splitlines(keepends=True)
            problems, head, shas = check_chain(lines, expect_head)
            on_disk = 0
            for path in layout.iter_record_files():
                on_disk += 1
                claimed = path.stem
                try:
                    check_stored_record(path, claimed, path.stat().st_size)
                except HistoryError as exc:
                    problems.append(str(exc))
                if claimed not in shas:
                    problems.append(f"record {claimed}: not in the journal (unregistered)")
            for sha in sorted(shas):
                if not layout.record_path(sha).exists():
                    problems.append(f"record {sha}: journalled, but gone")
        return StoreCheck(problems, head, on_disk)
