"""The one rule for naming a report on the command line: a file, or a record's SHA-256 prefix.

``harness run --baseline``, ``harness compare --baseline`` and ``CANDIDATE``, and
``harness history show`` all resolve through
:func:`harness.history.backend.load_reference`, whichever backend holds the history
(a folder's prefix lookup is :func:`resolve_record`), so they accept and refuse the
same things:

- an existing file is read as a report (a folder is refused as not a report file);
- anything that looks like a path (a ``/``, or a ``.json`` name) and does not exist is
  a missing file, never "not a SHA-256 prefix";
- otherwise it must be a SHA-256 prefix of at least :data:`MIN_PREFIX_DIGITS` hex digits,
  looked up in an existing history; several matches are refused as ambiguous;
- a record's bytes are re-hashed before use: edited evidence is refused.
"""

from __future__ import annotations

import os
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
from harness.history.lock import check_history_marker, require_history
from harness.history.records import sha256_bytes
from harness.report import parse_report

#: Fewest hex digits accepted as a prefix (shorter ones are too easy to mistype).
MIN_PREFIX_DIGITS = 4
_HEX_PREFIX = re.compile(rf"[0-9a-f]{{{MIN_PREFIX_DIGITS},64}}")


@dataclass(frozen=True)
class LoadedReport:
    """A report read for comparison: its document, exact SHA-256 and where it came from."""

    doc: dict[str, Any]
    sha256: str
    path: Path


def parse_sha_prefix(prefix: str, *, what: str = "") -> str:
    """Normalise a SHA-256 prefix; UsageError unless it is 4-64 hex digits."""
    normalised = prefix.strip().lower()
    if not _HEX_PREFIX.fullmatch(normalised):
        label = f"{what} " if what else ""
        raise UsageError(
            f"{label}{prefix!r}: no such report file, and not a SHA-256 prefix "
            f"({MIN_PREFIX_DIGITS} to 64 hex digits)"
        )
    return normalised


def looks_like_path(reference: str) -> bool:
    """True for what a user means as a file name (a separator, or a ``.json`` name)."""
    return (
        os.sep in reference
        or (os.altsep is not None and os.altsep in reference)
        or reference.endswith(RECORD_SUFFIX)
        or reference.startswith(".")
    )


def resolve_record(layout: HistoryLayout, prefix: str, *, what: str = "") -> Path:
    """The one record whose SHA-256 starts with ``prefix``.

    Raises
    ------
    UsageError
        When the prefix is not 4-64 hex digits, matches nothing, or is ambiguous.
    HistoryError
        When the folder is not an existing history.
    """
    prefix = parse_sha_prefix(prefix, what=what)
    label = f"{what} " if what else ""
    if not layout.root.is_dir():
        raise UsageError(
            f"{label}{prefix}: {layout.root}: no such history folder to look the SHA-256 prefix up in"
        )
    require_history(layout)
    check_history_marker(layout, create=False)
    return match_record(layout, prefix, what=what)


def match_record(layout: HistoryLayout, prefix: str, *, what: str = "") -> Path:
    """The one record under ``layout.records`` whose SHA-256 starts with ``prefix`` (a
    record folder inside a history, e.g. its calibrations; the caller checks the history)."""
    prefix = parse_sha_prefix(prefix, what=what)
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
    return layout.record_path(one_match([p.stem for p in matches], prefix, str(layout.root), what))


def one_match(matches: list[str], prefix: str, where: str, what: str = "") -> str:
    """The one SHA-256 of ``matches`` (those starting with ``prefix``, sorted; a backend
    may stop after six); UsageError naming ``where`` when none or several match."""
    label = f"{what} " if what else ""
    if not matches:
        raise UsageError(f"{label}{prefix}: no record in {where} starts with {prefix}")
    if len(matches) > 1:
        names = ", ".join(m[:16] for m in matches[:5])
        more = "..." if len(matches) > 5 else ""
        count = len(matches) if len(matches) < 6 else "several"
        raise UsageError(
            f"{label}SHA-256 prefix {prefix} is ambiguous in {where} "
            f"({count} records: {names}{more}); give more digits"
        )
    return matches[0]


def load_report_file(reference: str, *, what: str = "") -> LoadedReport | None:
    """The report file ``reference`` names; None when it names no file and does not look
    like a path (then it is a SHA-256 prefix); UsageError for a folder or a missing file."""
    label = f"{what} " if what else ""
    path = Path(reference)
    if path.is_file():
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise UsageError(f"{label}{path}: cannot read the report: {exc.strerror}") from exc
        return LoadedReport(parse_report(data, name=str(path)), sha256_bytes(data), path.absolute())
    if path.is_dir():
        raise UsageError(f"{label}{path}: is a folder, not a report file")
    if looks_like_path(reference):
        raise UsageError(f"{label}{path}: no such report file")
    return None


def no_history_for(reference: str, *, what: str = "") -> UsageError:
    """The error for a SHA-256 prefix given where there is no history to look it up in
    (UsageError at once when ``reference`` is not even a prefix)."""
    parse_sha_prefix(reference, what=what)
    label = f"{what} " if what else ""
    return UsageError(
        f"{label}{reference}: no such file, and no history (--history-dir) to look up "
        "a SHA-256 prefix in"
    )


def read_checked_record(record: Path) -> bytes:
    """A folder record's bytes, re-hashed: a record edited (or linked) there is refused."""
    data = record.read_bytes()
    if record.is_symlink() or sha256_bytes(data) != record.stem:
        raise HistoryError(
            f"{record}: record bytes no longer match their name (tampered); refusing to use it"
        )
    return data
