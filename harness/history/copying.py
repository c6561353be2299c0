"""Copying evidence from one history into another, through the backend contract alone.

``harness history push`` (a folder to a server) and ``pull`` (a server to a folder) are
two uses of the same copy; either end is any
:class:`~harness.history.backend.HistoryBackend`. Every record and calibration is
re-hashed before it is copied: a copy never spreads a tampered record.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from harness.errors import HistoryError
from harness.history.backend import HistoryBackend
from harness.history.evidence_store import check_chain
from harness.history.records import sha256_bytes
from harness.history.store import RegistrationRenderer, prepare_report


@dataclass(frozen=True)
class CopyResult:
    copied: int
    present: int
    head_from: str
    head_to: str
    calibrations_copied: int = 0
    calibrations_present: int = 0


def _checked(sha256: str, data: bytes, where: str, what: str = "record") -> bytes:
    if sha256_bytes(data) != sha256:
        raise HistoryError(f"{where}: {what} {sha256} no longer matches its bytes; nothing copied")
    return data


def _journal_entries(history: HistoryBackend) -> list[dict]:
    """The first journal entry of each record of ``history``, in journal order;
    HistoryError when its journal is damaged (nothing is copied from it then)."""
    lines = history.journal_lines()
    problems, _head, _shas = check_chain(lines, None)
    if problems:
        raise HistoryError(
            f"{history.where}: the journal is damaged ({problems[0]}); run history verify"
        )
    entries, seen = [], set()
    for line in lines:
        entry = json.loads(line)
        if entry["sha256"] not in seen:
            seen.add(entry["sha256"])
            entries.append(entry)
    return entries


def _checked_calibrations(history: HistoryBackend) -> list[tuple[str, bytes]]:
    """(sha256, bytes) of every calibration of ``history``, hash-checked, by key;
    HistoryError naming the first one that is not sound."""
    return [
        (sha, _checked(sha, data, history.calibration_label(sha), "calibration"))
        for sha, data in history.calibration_rows()
    ]


def copy_evidence(source: HistoryBackend, target: HistoryBackend) -> CopyResult:
    """Copy ``source``'s records to ``target`` in journal order, each with its journal
    entry (source and time kept: a target that held nothing ends with the same journal
    and head), then its calibrations (``history push``). The calibrations are checked,
    and ``target`` shown able to hold them, before the first record is copied."""
    if not source.exists():
        raise HistoryError(f"{source.where}: no such history to copy from")
    entries = _journal_entries(source)
    head_from = source.head()
    calibrations = _checked_calibrations(source)
    if calibrations:
        target.require_calibrations()
    copied = present = 0
    for entry in entries:
        sha = entry["sha256"]
        data = _checked(sha, source.read(sha), source.where)
        stored = target.register(
            data, source=entry.get("source", sha), registered_utc=entry["registered_utc"]
        )
        copied += stored.created
        present += not stored.created
    new = sum(target.store_calibration(data)[1] for _, data in calibrations)
    return CopyResult(copied, present, head_from, target.head(), new, len(calibrations) - new)


def register_copies(
    source: HistoryBackend,
    target: HistoryBackend,
    *,
    render: RegistrationRenderer | None = None,
    store_calibration: Callable[[bytes], bool] | None = None,
) -> CopyResult:
    """Register ``source``'s records in ``target`` in journal order, validated and
    indexed as ``history register`` does (``render``: the registration renderer), all or
    none, then its calibrations through ``store_calibration`` (the command's validating
    write; it says whether the calibration was new) (``history pull``). Every record
    and calibration is read and hash-checked before anything is registered."""
    entries = _journal_entries(source)
    data = [_checked(e["sha256"], source.read(e["sha256"]), source.where) for e in entries]
    calibrations = _checked_calibrations(source) if store_calibration is not None else []
    prepared = [
        prepare_report(blob, name=entry.get("source", entry["sha256"]))
        for blob, entry in zip(data, entries)
    ]
    results = target.register_reports(prepared, render=render) if prepared else []
    copied = sum(r.created for r in results)
    head_to = results[-1].journal_head if results else ""
    new = sum(bool(store_calibration(blob)) for _, blob in calibrations)
    return CopyResult(
        copied, len(results) - copied, source.head(), head_to, new, len(calibrations) - new
    )
