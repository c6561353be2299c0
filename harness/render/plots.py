"""``plots/<comparison key>.png``: the key page's charts as a still image for README.md.

Drawn from the same data as the key page (:func:`harness.render.keys.collect_key_data`):
one panel per (cache state, format) and at most :data:`SERIES_PER_PANEL` acquisitions
(more acquisitions get more panels), each a median line over records in revision
order with its p5-p95 band, runs on a contended host and flagged cells marked as on the
key page; the unit (ms or s) follows the panel's magnitude and is
printed on its axis; the legend sits outside the data; 150 dpi.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

from harness.fsio import FileWriteError
from harness.render.keys import collect_key_data
from harness.render.targets import RENDERED_MODE, latest_seq_of

SERIES_PER_PANEL = 4
PLOT_DPI = 150
#: Records per series above which lines are drawn without point markers (speed).
PLOT_MARKER_LIMIT = 200
PANEL_WIDTH_IN = 5.2
PANEL_HEIGHT_IN = 2.8
PANEL_COLUMNS = 2

#: How the medians of runs on a contended host and of flagged cells are marked (as on
#: the key page: an orange square, a red ring), drawn over the series.
MARK_STYLES = {
    "contended": {"marker": "s", "s": 70, "facecolors": "none", "edgecolors": "#bf8700",
                  "linewidths": 1.5, "zorder": 4},
    "flagged": {"marker": "o", "s": 110, "facecolors": "none", "edgecolors": "#cf222e",
                "linewidths": 1.8, "zorder": 5},
}  # fmt: skip
MARK_LABELS = {"contended": "contended host", "flagged": "flagged vs baseline"}


def _legend_style(kind: str) -> dict[str, Any]:
    style = MARK_STYLES[kind]
    return {
        "marker": style["marker"],
        "markerfacecolor": "none",
        "markeredgecolor": style["edgecolors"],
        "markeredgewidth": style["linewidths"],
        "markersize": 8,
    }


def _plain(label: str) -> str:
    """Report text as a matplotlib label: ``$`` would start mathtext."""
    return str(label).replace("$", r"\$")


def _panels(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Split panels so that none holds more than SERIES_PER_PANEL series."""
    split = []
    for panel in data["panels"]:
        series = panel["series"]
        parts = max(1, math.ceil(len(series) / SERIES_PER_PANEL))
        for part in range(parts):
            chunk = series[part * SERIES_PER_PANEL : (part + 1) * SERIES_PER_PANEL]
            suffix = f" ({part + 1}/{parts})" if parts > 1 else ""
            title = f"{panel['cache_state']} · {panel['format']}{suffix}"
            split.append(dict(panel, series=chunk, title=title))
    return split


def render_plot(
    connection: Connection,
    key: str,
    path: Path,
    *,
    positions: dict[str, int] | None = None,
    data: dict[str, Any] | None = None,
) -> int:
    """Draw the PNG of one comparison key into ``path``; return the key's newest seq.

    ``data`` is the key's :func:`~harness.render.keys.collect_key_data` when the caller
    has it already (the key page draws the same).
    """
    import numpy as np
    from matplotlib.figure import Figure

    if data is None:
        data = collect_key_data(connection, key, positions=positions)
    panels = _panels(data) or [{"title": "no measurements", "series": [], "unit": "s"}]
    columns = min(PANEL_COLUMNS, len(panels))
    rows = math.ceil(len(panels) / columns)
    height = PANEL_HEIGHT_IN * rows + 1.2
    figure = Figure(figsize=(PANEL_WIDTH_IN * columns, height), dpi=PLOT_DPI)
    # fixed margins (constrained layout costs about a second per figure); the legend
    # sits in the bottom margin, outside every panel's data
    figure.subplots_adjust(
        left=0.08, right=0.98, top=1 - 0.6 / height, bottom=0.95 / height, hspace=0.55, wspace=0.22
    )
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    acquisitions = sorted({s["acquisition"] for p in panels for s in p["series"]})
    colors = {a: f"C{i % 10}" for i, a in enumerate(acquisitions)}
    revisions = data["records"]["revision"]
    contended = data["records"].get("contended") or [False] * len(revisions)
    marked: set[str] = set()
    for axis, panel in zip(axes, panels):
        for series in panel["series"]:
            x = np.asarray(series["x"], dtype=float)
            color = colors[series["acquisition"]]
            low = np.asarray([np.nan if v is None else v for v in series["p5"]], dtype=float)
            high = np.asarray([np.nan if v is None else v for v in series["p95"]], dtype=float)
            axis.fill_between(x, low, high, color=color, alpha=0.18, linewidth=0)
            axis.plot(
                x,
                np.asarray([np.nan if v is None else v for v in series["median"]], dtype=float),
                color=color,
                marker="." if len(x) <= PLOT_MARKER_LIMIT else None,
                linewidth=1.2,
                label=f"{series['acquisition']}",
            )
            medians = [np.nan if v is None else v for v in series["median"]]
            for kind, chosen in (
                ("contended", [contended[r] for r in series["x"]]),
                ("flagged", series.get("flagged") or [False] * len(medians)),
            ):
                at = [i for i, hit in enumerate(chosen) if hit]
                if at:
                    marked.add(kind)
                    axis.scatter(
                        [series["x"][i] for i in at],
                        [medians[i] for i in at],
                        **MARK_STYLES[kind],
                    )
        axis.set_title(panel["title"], fontsize="medium")
        axis.set_ylabel(f"median load time ({panel['unit']})")
        axis.set_xlabel(f"record, in {data['order']}")
        axis.grid(True, alpha=0.3)
        axis.set_ylim(bottom=0)
        if revisions:
            ticks = list(range(0, len(revisions), max(1, math.ceil(len(revisions) / 6))))
            axis.set_xticks(ticks, [revisions[t][:7] for t in ticks], fontsize="small")
            axis.set_xlim(-0.5, len(revisions) - 0.5)
    for axis in axes[len(panels) :]:
        axis.set_visible(False)
    if acquisitions:
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch

        handles = [
            Line2D([], [], color=colors[a], marker=".", label=_plain(a)) for a in acquisitions
        ]
        handles.append(Patch(color="0.6", alpha=0.3, label="p5-p95 of kept trials"))
        handles += [
            Line2D([], [], linestyle="", label=MARK_LABELS[kind], **_legend_style(kind))
            for kind in ("contended", "flagged")
            if kind in marked
        ]
        figure.legend(
            handles=handles,
            loc="lower center",
            ncol=min(len(handles), 5),
            fontsize="small",
            title="median per record",
            title_fontsize="small",
            frameon=False,
        )
    records = data["records"]
    if records["sha"]:
        figure.suptitle(f"comparison key {key} · {len(records['sha'])} records", fontsize="medium")
    step = f"drawing the plot of comparison key {key}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
    except OSError as exc:
        raise FileWriteError(path.parent, step, exc) from exc
    try:
        figure.savefig(temp, format="png", metadata={"Software": None})
        os.chmod(temp, RENDERED_MODE)
        os.replace(temp, path)
    except OSError as exc:
        Path(temp).unlink(missing_ok=True)
        raise FileWriteError(path, step, exc) from exc
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return latest_seq_of(connection, key)
