"""One dashboard page per comparison key: every cell against revision order.

A page holds one chart per (cache state, format), one series per acquisition: the
median of each record (as its report states it), a p5-p95 band over the record's
kept trials, and the trials themselves as points (kept ones as dots, those whose
cache label was lost as crosses). Medians of runs on a contended host (the report's
``status.host_load``) and of cells flagged against their record's baseline (the cell's
verdict, slower or possibly slower) are marked. Records are placed evenly in revision order: git
commit order when every revision is known to the repository given, otherwise
registration order.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Select, select

from harness.history.index_db import (
    RecordRow,
    SummaryRow,
    TrialRow,
    is_calibration_entry,
    read_meta_json,
    write_meta,
)
from harness.render.key_trials import TRIAL_FRAME_COLUMNS
from harness.render.pages import FLAGGED_VERDICTS, format_seconds, script_json
from harness.render.targets import RenderTargets, write_atomic

#: Trials are drawn as points for at most this many of the newest records of a key
#: (beyond that the points cover each other and slow the page; medians and bands
#: are always drawn for every record).
TRIAL_POINT_RECORDS = 400
#: Medians get point markers while a series has at most this many records.
MEDIAN_MARKER_LIMIT = 600


@dataclass(frozen=True)
class ChangePoint:
    """A change point of one cell, drawn as a vertical line at the record where it starts."""

    record_sha256: str
    acquisition: str
    format: str
    cache_state: str
    label: str = ""


#: Keys of at most this many records get their change points detected by
#: ``harness render index`` (E-Divisive with permutation tests costs about 1 s per cell
#: at 200 records and grows with the square; ``harness history changes`` covers larger keys).
CHANGE_POINT_RECORDS = 200
META_CHANGES_PREFIX = "render.changes."


def change_points_for(connection: Connection, key: str) -> list[ChangePoint]:
    """Change points of the cells of ``key`` as ``harness render index`` last detected them.

    Stored in the index's render bookkeeping, so that a registration redrawing the page
    draws them without running the detection again.
    """
    stored = read_meta_json(connection, META_CHANGES_PREFIX + key) or []
    return [ChangePoint(**point) for point in stored]


def refresh_change_points(connection: Connection, key: str, data: dict[str, Any]) -> None:
    """Detect change points of every cell of ``data`` (issue 11's E-Divisive) and store them.

    Each cell's series is the records' medians in the page's order; a change point is
    drawn at the first record of the new level, labelled with its change and p-value.
    """
    from harness.verdict.changes import e_divisive

    sha = data["records"]["sha"]
    if len(sha) > CHANGE_POINT_RECORDS:
        return
    found = []
    for panel in data["panels"]:
        for series in panel["series"]:
            pairs = [(x, m) for x, m in zip(series["x"], series["median"]) if m is not None]
            cell = f"{key}/{series['acquisition']}/{panel['format']}/{panel['cache_state']}"
            seed = int.from_bytes(hashlib.sha256(cell.encode()).digest()[:8], "little")
            for change in e_divisive([m for _, m in pairs], seed=seed):
                found.append(
                    ChangePoint(
                        sha[pairs[change.index][0]],
                        series["acquisition"],
                        panel["format"],
                        panel["cache_state"],
                        f"{change.change_percent:+.1f}% (p {change.p_value:.3g})",
                    )
                )
    write_meta(connection, META_CHANGES_PREFIX + key, json.dumps([asdict(p) for p in found]))
    data["change_points"] = _change_marks(connection, found, data)


def _change_marks(
    connection: Connection, points: list[ChangePoint], data: dict[str, Any]
) -> list[dict[str, Any]]:
    x_of = {sha: x for x, sha in enumerate(data["records"]["sha"])}
    return [
        {
            "x": x_of[point.record_sha256],
            "acquisition": point.acquisition,
            "format": point.format,
            "cache_state": point.cache_state,
            "label": point.label,
        }
        for point in points
        if point.record_sha256 in x_of
    ]


def git_positions(repository: Path | None) -> dict[str, int]:
    """Commit -> position in the repository's topological order (oldest first); {} if none."""
    if repository is None:
        return {}
    try:
        result = subprocess.run(
            ["git", "-C", str(repository), "rev-list", "--topo-order", "--reverse", "--all"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if result.returncode != 0:
        return {}
    return {sha: index for index, sha in enumerate(result.stdout.split())}


@dataclass
class KeyRecords:
    """The records of one key in drawing order."""

    seqs: list[int]
    columns: dict[str, list[Any]] = field(default_factory=dict)
    order: str = "registration order"


def _ordered_records(connection: Connection, key: str, positions: dict[str, int]) -> KeyRecords:
    rows = connection.execute(
        select(
            RecordRow.seq,
            RecordRow.sha256,
            RecordRow.created_utc,
            RecordRow.git_revision,
            RecordRow.git_dirty,
            RecordRow.performance,
            RecordRow.correctness,
            RecordRow.index_entry,
            RecordRow.host_load,
        )
        .where(RecordRow.comparison_key == key)
        .order_by(RecordRow.seq)
    ).all()
    order = "registration order"
    if positions and rows and all(row.git_revision in positions for row in rows):
        rows = sorted(rows, key=lambda row: (positions[row.git_revision], row.seq))
        order = "git commit order"
    return KeyRecords(
        seqs=[row.seq for row in rows],
        columns={
            "sha": [row.sha256 for row in rows],
            "created": [row.created_utc for row in rows],
            "revision": [row.git_revision or "unknown" for row in rows],
            "dirty": [bool(row.git_dirty) for row in rows],
            "performance": [row.performance for row in rows],
            "correctness": [row.correctness for row in rows],
            "calibration": [is_calibration_entry(row.index_entry) for row in rows],
            "contended": [row.host_load == "contended" for row in rows],
        },
        order=order,
    )


def _unit(medians: list[float]) -> tuple[str, float]:
    """ms when the cell's typical median is below a second, else s."""
    if not medians:
        return "s", 1.0
    typical = sorted(medians)[len(medians) // 2]
    return ("ms", 1e3) if typical < 1.0 else ("s", 1.0)


def _frame(connection: Connection, query: Select, columns: list[str]) -> Any:
    """A DataFrame of a query's rows, fetched as plain tuples through the DB-API cursor.

    Given SQLAlchemy rows, pandas probes each for attributes it lacks (1.5 s of a key of
    2,500 records), and making the rows costs as much as fetching them.
    """
    import pandas as pd

    compiled = query.compile(dialect=connection.dialect)
    params: Any = compiled.params
    if compiled.positional:
        params = [params[name] for name in compiled.positiontup or ()]
    cursor = connection.connection.driver_connection.execute(str(compiled), params)
    return pd.DataFrame(cursor.fetchall(), columns=columns)


def _key_trials(connection: Connection, key: str) -> Any:
    """A key's trials from the index, as a frame of ``TRIAL_FRAME_COLUMNS``."""
    return _frame(
        connection,
        (
            select(
                TrialRow.record_seq,
                TrialRow.acquisition,
                TrialRow.format,
                TrialRow.cache_state,
                TrialRow.seconds,
                TrialRow.kept,
                TrialRow.label,
                TrialRow.trial_index,
            )
            .join(RecordRow, RecordRow.seq == TrialRow.record_seq)
            .where(RecordRow.comparison_key == key)
        ),
        list(TRIAL_FRAME_COLUMNS),
    )


def collect_key_data(
    connection: Connection,
    key: str,
    *,
    positions: dict[str, int] | None = None,
    trials: Any = None,
) -> dict[str, Any]:
    """Everything a key page draws, as plain lists (embedded in the page as JSON).

    ``trials``: the key's trials as a frame of
    :data:`~harness.render.key_trials.TRIAL_FRAME_COLUMNS`, when the caller holds them
    already (:class:`~harness.render.key_trials.KeyTrialsFromRows`); else they are read
    from the index.
    """
    import pandas as pd

    records = _ordered_records(connection, key, positions or {})
    x_of = {seq: x for x, seq in enumerate(records.seqs)}
    summaries = _frame(
        connection,
        (
            select(
                SummaryRow.record_seq,
                SummaryRow.acquisition,
                SummaryRow.format,
                SummaryRow.cache_state,
                SummaryRow.median,
                SummaryRow.n,
                SummaryRow.n_kept,
                SummaryRow.verdict,
            )
            .join(RecordRow, RecordRow.seq == SummaryRow.record_seq)
            .where(RecordRow.comparison_key == key)
        ),
        ["seq", "acquisition", "format", "cache_state", "median", "n", "n_kept", "verdict"],
    )
    if trials is None:
        trials = _key_trials(connection, key)
    cell = ["seq", "acquisition", "format", "cache_state"]
    kept = trials[trials["kept"].astype(bool)]
    bands = (
        kept.groupby(cell)["seconds"].quantile([0.05, 0.95]).unstack().reset_index()
        if len(kept)
        else pd.DataFrame(columns=[*cell, 0.05, 0.95])
    )
    summaries = summaries.merge(bands, on=cell, how="left")
    summaries["x"] = summaries["seq"].map(x_of)
    trials["x"] = trials["seq"].map(x_of)
    newest_x = len(records.seqs) - TRIAL_POINT_RECORDS
    shown_trials = trials[trials["x"] >= newest_x]
    panels = []
    for (state, fmt), panel_rows in sorted(
        summaries.groupby(["cache_state", "format"]),
        key=lambda item: (item[0][0] != "cold", item[0][0], item[0][1]),
    ):
        unit, scale = _unit(panel_rows["median"].dropna().tolist())
        series = []
        for acquisition, rows in sorted(panel_rows.groupby("acquisition"), key=lambda i: i[0]):
            rows = rows.sort_values("x")
            points = shown_trials[
                (shown_trials["cache_state"] == state)
                & (shown_trials["format"] == fmt)
                & (shown_trials["acquisition"] == acquisition)
            ].sort_values(["x", "trial"])
            series.append(
                {
                    "acquisition": acquisition,
                    "x": rows["x"].astype(int).tolist(),
                    "median": _scaled(rows["median"], scale),
                    "p5": _scaled(rows[0.05], scale),
                    "p95": _scaled(rows[0.95], scale),
                    "n": rows["n"].astype(int).tolist(),
                    "n_kept": rows["n_kept"].astype(int).tolist(),
                    # the cell's verdict against its record's baseline (None: none named)
                    "verdict": [v if isinstance(v, str) else None for v in rows["verdict"]],
                    "flagged": [v in FLAGGED_VERDICTS for v in rows["verdict"]],
                    "markers": len(rows) <= MEDIAN_MARKER_LIMIT,
                    "trials": {
                        "x": points["x"].astype(int).tolist(),
                        "y": _scaled(points["seconds"], scale),
                        "kept": points["kept"].astype(bool).tolist(),
                        "label": points["label"].tolist(),
                        "trial": points["trial"].astype(int).tolist(),
                    },
                }
            )
        panels.append(
            {
                "id": f"{state}-{fmt}",
                "cache_state": state,
                "format": fmt,
                "unit": unit,
                "series": series,
            }
        )
    data = {
        "key": key,
        "order": records.order,
        "records": records.columns,
        "panels": panels,
        "change_points": [],
        "trial_point_records": TRIAL_POINT_RECORDS,
    }
    data["change_points"] = _change_marks(connection, change_points_for(connection, key), data)
    return data


def _scaled(values: Any, scale: float) -> list[float | None]:
    """Values times ``scale``; a missing one (NaN, or None where a record kind has no
    value for the cell) is None."""
    return [None if v is None or v != v else round(float(v) * scale, 6) for v in values.tolist()]


def build_key_page(
    connection: Connection,
    key: str,
    *,
    positions: dict[str, int] | None = None,
    data: dict[str, Any] | None = None,
) -> bytes:
    from harness.templating import render_template

    if data is None:
        data = collect_key_data(connection, key, positions=positions)
    record = connection.execute(
        select(RecordRow).where(RecordRow.comparison_key == key).order_by(RecordRow.seq.desc())
    ).first()
    assert record is not None, key
    n_trials = sum(len(s["trials"]["x"]) for p in data["panels"] for s in p["series"])
    return render_template(
        "dashboard_key.html.j2",
        key=key,
        record=record,
        data=data,
        data_json=script_json(data),
        n_records=len(data["records"]["sha"]),
        n_trials_shown=n_trials,
        seconds=format_seconds,
        change_point_records=CHANGE_POINT_RECORDS,
    ).encode("utf-8")


def write_key_page(
    connection: Connection,
    targets: RenderTargets,
    key: str,
    *,
    positions: dict[str, int] | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    page = build_key_page(connection, key, positions=positions, data=data)
    write_atomic(targets.key_page(key), page)
