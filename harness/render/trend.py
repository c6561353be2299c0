"""What a dashboard tile says without being asked: the key's newest record against the
previous comparable one ("vs previous", as asv and conbench show a trend), beside the
verdict against an explicitly named baseline where the record has one.

The change per cell is the ratio of the two records' medians (as their reports state
them), flagged past the default regression threshold; it is a trend to look at, not a
verdict: only ``harness compare`` with an explicit baseline judges significance.
Calibration runs (``purpose.kind == "calibration"``) are left out of both records.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, select

from harness.history.index_db import RecordRow, SummaryRow, is_calibration_entry
from harness.verdict.comparison import DEFAULT_REGRESSION_PERCENT


def _ordinary_records(connection: Connection, key: str, limit: int = 64) -> list[Any]:
    """The key's newest records, newest first, without calibration runs (all of them when
    the key holds nothing else)."""
    rows = connection.execute(
        select(
            RecordRow.seq,
            RecordRow.sha256,
            RecordRow.git_revision,
            RecordRow.git_dirty,
            RecordRow.created_utc,
            RecordRow.index_entry,
        )
        .where(RecordRow.comparison_key == key)
        .order_by(RecordRow.seq.desc())
        .limit(limit)
    ).all()
    ordinary = [row for row in rows if not is_calibration_entry(row.index_entry)]
    return ordinary or rows


def _medians(connection: Connection, seq: int) -> dict[tuple[str, str, str], float]:
    rows = connection.execute(
        select(
            SummaryRow.acquisition, SummaryRow.format, SummaryRow.cache_state, SummaryRow.median
        ).where(SummaryRow.record_seq == seq, SummaryRow.median.is_not(None))
    ).all()
    return {(r.acquisition, r.format, r.cache_state): float(r.median) for r in rows}


def vs_previous(connection: Connection, key: str) -> dict[str, Any] | None:
    """The newest ordinary record of ``key`` against the one before it (None: one record).

    Returns the two records (SHA-256, short revision with ``*`` when dirty, created) and
    per cell the median change in percent, the cells past the threshold and the largest.
    """
    records = _ordinary_records(connection, key)
    if len(records) < 2:
        return None
    latest, previous = records[0], records[1]
    now, before = _medians(connection, latest.seq), _medians(connection, previous.seq)
    changes = sorted(
        (
            (now[cell] / before[cell] - 1.0) * 100.0,
            " ".join(cell),
        )
        for cell in now.keys() & before.keys()
        if before[cell] > 0
    )
    if not changes:
        return None
    slower = [(p, c) for p, c in changes if p > DEFAULT_REGRESSION_PERCENT]
    faster = [(p, c) for p, c in changes if p < -DEFAULT_REGRESSION_PERCENT]
    largest = max(changes, key=lambda item: abs(item[0]))
    return {
        "latest_sha": latest.sha256,
        "previous_sha": previous.sha256,
        "previous_revision": _revision(previous),
        "previous_created": previous.created_utc,
        "cells": len(changes),
        "slower": len(slower),
        "faster": len(faster),
        "threshold": DEFAULT_REGRESSION_PERCENT,
        "largest_percent": f"{largest[0]:+.1f}%",
        "largest_cell": largest[1],
        "state": "slower" if slower else ("faster" if faster else "steady"),
    }


def _revision(row: Any) -> str:
    return (row.git_revision or "unknown")[:7] + ("*" if row.git_dirty else "")
