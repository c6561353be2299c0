"""Finding records by SHA-256 prefix and loading reports named on the command line."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import HistoryError, UsageError
from harness.history.layout import (
    FANOUT_DIGITS,
    RECORD_SUFFIX,
    HistoryLayout,
    sha256_of_record_name,
)
from harness.history.records import sha256_bytes

_HEX_PREFIX = re.compile(r"^[0-9a-f]{4,64}$")
#: Fewest hex digits accepted as a prefix (shorter ones are too easy to mistype).
MIN_PREFIX_DIGITS = 4


@dataclass(frozen=True)
class LoadedReport:
    """A report read for comparison: its document, exact SHA-256 and where it came from."""

    doc: dict[str, Any]
    sha256: str
    path: Path


def parse_sha_prefix(prefix: str) -> str:
    """Normalise a SHA-256 prefix; UsageError unless it is 4-64 hex digits."""
    normalised = prefix.strip().lower()
    if not _HEX_PREFIX.match(normalised):
        raise UsageError(
            f"{prefix!r} is not a SHA-256 prefix ({MIN_PREFIX_DIGITS} to 64 hex digits)"
        )
    return normalised


def resolve_record(layout: HistoryLayout, prefix: str) -> Path:
    """The one record whose SHA-256 starts with ``prefix``.

    Raises
    ------
    UsageError
        When the prefix is not 4-64 lowercase hex digits, matches nothing, or is ambiguous.
    """
    prefix = parse_sha_prefix(prefix)
    shard = layout.records / prefix[:FANOUT_DIGITS]
    matches = (
        sorted(
            p
            for p in shard.glob(f"{prefix}*{RECORD_SUFFIX}")
            if sha256_of_record_name(p) is not None
        )
        if shard.is_dir()
        else []
    )
    if not matches:
        raise UsageError(f"no record in {layout.root} starts with {prefix}")
    if len(matches) > 1:
        names = ", ".join(p.stem[:16] for p in matches[:5])
        raise UsageError(
            f"SHA-256 prefix {prefix} is ambiguous in {layout.root}: {names}{'...' if len(matches) > 5 else ''}"
        )
    return matches[0]


def load_report(reference: str, *, history_dir: str | Path | None) -> LoadedReport:
    """Load a report named by a path or by a record's SHA-256 prefix in ``history_dir``.

    A record's bytes are re-hashed: a record that no longer matches its name is refused.
    """
    from harness.report import parse_report

    path = Path(reference)
    if path.is_file():
        data = path.read_bytes()
        return LoadedReport(parse_report(data, name=str(path)), sha256_bytes(data), path.absolute())
    if history_dir is None:
        raise UsageError(
            f"{reference}: no such file, and no --history-dir to look up a SHA-256 prefix in"
        )
    layout = HistoryLayout.at(history_dir)
    record = resolve_record(layout, reference)
    data = record.read_bytes()
    digest = sha256_bytes(data)
    if digest != record.stem:
        raise HistoryError(
            f"{record}: record bytes no longer match their name (tampered); refusing to use it"
        )
    return LoadedReport(parse_report(data, name=str(record)), digest, record)
