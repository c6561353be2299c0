"""README.md, the dashboard overview (``index.html``) and one page per record.

All strings from reports reach HTML through Jinja2 autoescaping and Markdown
through the ``md`` filter (``harness.templating``); JSON embedded for scripts is
made inert by :func:`script_json`. Record pages depend only on their (immutable)
record and its baseline, so a page that exists is not redrawn unless asked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, func, select

from harness.history.index_db import RecordRow, SummaryRow, read_meta_json
from harness.history.journal import GENESIS_HEAD
from harness.render.targets import RenderTargets, write_atomic
from harness.render.trend import vs_previous

#: How many of the newest records README.md and index.html list.
LATEST_RECORDS = 20
#: Points of the sparkline on each overview tile (the newest records of the key).
SPARKLINE_POINTS = 60
META_PLOT_PREFIX = "render.plot."
#: The chart library: plotly.js, from the plotly Python package (``docs/dashboard.md``).
PLOTLY_JS = "plotly.min.js"
#: Cell verdicts (``harness.verdict.cells.CellVerdict``) shown first and marked.
FLAGGED_VERDICTS = ("slower", "possibly_slower")
#: Dashboard assets shipped in ``reports_templates/dashboard/``.
#: The explorer (explorer.html/.js) is web/'s build, copied here by `npm run dashboard` in web/.
DASHBOARD_ASSETS = ("dashboard.css", "dashboard.js", "explorer.html", "explorer.js")


def script_json(value: Any) -> str:
    """JSON for a ``<script type="application/json">`` block: no ``<``, ``>`` or ``&`` left.

    Escaping them as ``\\u003c`` etc. keeps a crafted ``</script>`` in a report from
    ending the block; ``JSON.parse`` turns them back into the same characters.
    """
    text = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def plot_state(connection: Connection, targets: RenderTargets, key: str, latest_seq: int) -> str:
    rendered = read_meta_json(connection, META_PLOT_PREFIX + key)
    if not targets.plot(key).exists():
        return "missing"
    return "current" if rendered == latest_seq else "pending"


def _sparkline_xy(values: list[float], width: int = 160, height: int = 36) -> list[str]:
    """Each value's ``x,y`` in the sparkline (evenly spaced, min-max scaled)."""
    if not values:
        return []
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    if len(values) == 1:  # one record: its point in the middle, not an empty box
        return [f"{width / 2:.1f},{height / 2:.1f}"]
    # inset so that a marker on the first, last, lowest or highest point is drawn whole
    inset = 5
    step = (width - 2 * inset) / (len(values) - 1)
    return [
        f"{inset + i * step:.1f},{height - inset - (v - low) / span * (height - 2 * inset):.1f}"
        for i, v in enumerate(values)
    ]


def _sparkline(values: list[float], width: int = 160, height: int = 36) -> str:
    """An SVG polyline's ``points`` attribute for ``values`` (evenly spaced, min-max scaled)."""
    return " ".join(_sparkline_xy(values, width, height))


@dataclass(frozen=True)
class SparkPoint:
    """One record's median of the sparkline's cell, and what the tile marks on it."""

    median: float
    contended: bool  # the run's host was contended (status.host_load)
    verdict: str | None  # the cell's verdict against the record's baseline, if one

    @property
    def flagged(self) -> bool:
        return self.verdict in FLAGGED_VERDICTS


def spark_marks(points: list[SparkPoint]) -> list[dict[str, str]]:
    """The sparkline's marked points: contended runs and flagged cells, each with its
    position and a title (a tooltip) saying what it marks."""
    marks = []
    for xy, point in zip(_sparkline_xy([p.median for p in points]), points):
        x, y = xy.split(",")
        if point.contended:
            marks.append({"kind": "contended", "x": x, "y": y, "title": "contended host"})
        if point.flagged:
            title = f"{str(point.verdict).replace('_', ' ')} vs its baseline"
            marks.append({"kind": "flagged", "x": x, "y": y, "title": title})
    return marks


def _sparkline_cell(connection: Connection, key: str) -> tuple[str, list[SparkPoint]]:
    """The cell a tile's sparkline follows (cached first, then HDF5, first acquisition)."""
    cells = connection.execute(
        select(SummaryRow.cache_state, SummaryRow.format, SummaryRow.acquisition)
        .join(RecordRow, RecordRow.seq == SummaryRow.record_seq)
        .where(RecordRow.comparison_key == key, SummaryRow.median.is_not(None))
        .distinct()
    ).all()
    if not cells:
        return "", []
    state, fmt, acquisition = min(
        cells, key=lambda c: (c.cache_state != "cached", c.format != "hdf5", c)
    )
    rows = connection.execute(
        select(SummaryRow.median, RecordRow.host_load, SummaryRow.verdict)
        .join(RecordRow, RecordRow.seq == SummaryRow.record_seq)
        .where(
            RecordRow.comparison_key == key,
            SummaryRow.cache_state == state,
            SummaryRow.format == fmt,
            SummaryRow.acquisition == acquisition,
            SummaryRow.median.is_not(None),
        )
        .order_by(RecordRow.seq.desc())
        .limit(SPARKLINE_POINTS)
    ).all()
    points = [SparkPoint(r.median, r.host_load == "contended", r.verdict) for r in rows]
    return f"{acquisition} {fmt} {state}", list(reversed(points))


def collect_index_context(
    connection: Connection, targets: RenderTargets, head: str | None = None
) -> dict[str, Any]:
    latest_per_key = (
        select(
            RecordRow.comparison_key,
            func.max(RecordRow.seq).label("latest"),
            func.count().label("count"),
        )
        .group_by(RecordRow.comparison_key)
        .subquery()
    )
    rows = connection.execute(
        select(RecordRow, latest_per_key.c.count)
        .join(latest_per_key, RecordRow.seq == latest_per_key.c.latest)
        .order_by(RecordRow.comparison_key)
    ).all()
    keys = []
    for row in rows:
        record = row  # a Core row: the record's columns and the key's count
        fields = json.loads(record.comparison_fields)
        spark_cell, spark_points = _sparkline_cell(connection, record.comparison_key)
        spark_values = [point.median for point in spark_points]
        keys.append(
            {
                "key": record.comparison_key,
                "device_name": record.device_name,
                "storage_id": record.storage_id,
                "backend": record.backend,
                "representation": record.representation,
                "timing_boundary": record.timing_boundary,
                "allocator_policy": record.allocator_policy,
                "protocol_version": record.protocol_version,
                "acquisitions": [
                    pair[0] for pair in fields["acquisitions[id, source_master_sha256]"]
                ],
                "count": row.count,
                "latest_sha": record.sha256,
                "latest_created": record.created_utc,
                "latest_revision": record.git_revision,
                "latest_dirty": record.git_dirty,
                "verdict": latest_verdict(record),
                "plot_state": plot_state(connection, targets, record.comparison_key, record.seq),
                "spark_cell": spark_cell,
                "spark_points": _sparkline(spark_values),
                "spark_marks": spark_marks(spark_points),
                "spark_last": _sparkline(spark_values).split(" ")[-1].split(",")
                if spark_values
                else None,
                "vs_previous": vs_previous(connection, record.comparison_key),
                "spark_range": (
                    (format_seconds(min(spark_values)), format_seconds(max(spark_values)))
                    if spark_values
                    else None
                ),
            }
        )
    latest = connection.execute(
        select(RecordRow).order_by(RecordRow.seq.desc()).limit(LATEST_RECORDS)
    ).all()
    n_records = connection.execute(select(func.count()).select_from(RecordRow)).scalar_one()
    return {
        "keys": keys,
        "latest": [dict(r._mapping) for r in latest],
        "n_records": n_records,
        "journal_head": head,
    }


def latest_verdict(record: RecordRow) -> str:
    """The verdict a tile shows for its newest record: failures first, then performance."""
    if record.execution != "completed":
        return record.execution
    if record.correctness == "failed":
        return "correctness failed"
    return record.performance


def format_seconds(value: float | None) -> str:
    """``12.3 ms`` below one second, ``1.234 s`` above (the unit is always printed)."""
    if value is None:
        return "-"
    if value < 1:
        return f"{value * 1e3:.3g} ms" if value * 1e3 < 100 else f"{value * 1e3:.1f} ms"
    return f"{value:.3f} s"


def build_readme_and_html(
    connection: Connection, targets: RenderTargets, head: str = GENESIS_HEAD
) -> tuple[bytes, bytes]:
    """README.md and the overview page (both deterministic: ``history verify`` compares them),
    both naming the journal head."""
    from harness.templating import render_template

    context = collect_index_context(connection, targets, head)
    readme = render_template("history_readme.md.j2", **context).encode("utf-8")
    html = render_template("dashboard_index.html.j2", **context).encode("utf-8")
    return readme, html


# --- assets ---------------------------------------------------------------------


def plotly_js_source() -> Path:
    """plotly.js as the plotly Python package ships it (the offline bundle)."""
    import plotly

    path = Path(plotly.__file__).parent / "package_data" / PLOTLY_JS
    if not path.is_file():
        from harness.errors import HarnessError

        raise HarnessError(f"{path}: plotly's offline bundle is missing; reinstall plotly")
    return path


def write_assets(targets: RenderTargets) -> None:
    """Copy the chart library and the dashboard's CSS/JS next to the pages (when changed)."""
    from harness.resources import data_folder

    sources = [plotly_js_source()] + [
        data_folder("reports_templates") / "dashboard" / name for name in DASHBOARD_ASSETS
    ]
    for source in sources:
        destination = targets.assets / source.name
        data = source.read_bytes()
        if destination.exists() and destination.read_bytes() == data:
            continue
        write_atomic(destination, data)


def remove_stale_pages(folder: Path, keep: set[str]) -> None:
    """Delete rendered pages in ``folder`` whose stem is not in ``keep`` (after a rebuild)."""
    if not folder.is_dir():
        return
    for page in folder.glob("*.html"):
        if page.stem not in keep:
            page.unlink(missing_ok=True)
