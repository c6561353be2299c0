"""Rendered views of a history, all derived from the index (``docs/history-format.md`` "Rendered files").

- ``index.json``: every record's entry, one per line, in index order;
- ``timings.csv``: every measured trial (pandas);
- ``README.md`` and ``index.html``: a compact index from Jinja2 templates;
- ``plots/<comparison key>.png``: median and p95 per record over time, cold and cached (matplotlib).

After a registration only what changed is redone: index.json is concatenated
from entries serialised at registration, timings.csv gains the new rows (or is
rewritten when its bookkeeping does not match), README/HTML read aggregates, and
only the plots of comparison keys that gained records are redrawn (or marked
pending when plotting is deferred).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, func, select

from harness.errors import HistoryError
from harness.fsio import replace_file, replacing
from harness.history.entries import TIMINGS_COLUMNS
from harness.history.index_db import RecordRow, SummaryRow, TrialRow, read_meta_json, write_meta
from harness.history.journal import GENESIS_HEAD, journal_head
from harness.history.layout import HistoryLayout
from harness.history.verify import Problem, ProblemKind

INDEX_JSON_FORMAT = "quantem-harness/history-index"
#: 2: the journal's head follows the records (``"journal_head"``).
INDEX_JSON_VERSION = 2
#: How many of the newest records README.md and index.html list.
LATEST_RECORDS = 20
META_TIMINGS = "render.timings_csv"
META_INDEX_JSON = "render.index_json"
#: Records per series above which plot lines are drawn without point markers (speed).
PLOT_MARKER_LIMIT = 200
#: What a registration does with the plots of the keys that gained records.
PLOT_POLICIES = ("auto", "now", "defer")
#: Under ``plots="auto"``, the largest comparison key (in records) whose plot a
#: registration still redraws itself; larger keys' plots are left pending for
#: ``harness render index``, because their redraw alone exceeds the 100 ms that a
#: whole registration may take (``docs/performance/results.md``, "History at scale").
PLOT_INLINE_RECORDS = 500
#: Rendered files are ordinary, replaceable files (records are the read-only ones).
RENDERED_MODE = 0o644
META_PLOT_PREFIX = "render.plot."


@dataclass(frozen=True)
class RenderTargets:
    """Where rendered files go (the history itself, or ``render index --out DIR``)."""

    root: Path

    @property
    def index_json(self) -> Path:
        return self.root / "index.json"

    @property
    def timings_csv(self) -> Path:
        return self.root / "timings.csv"

    @property
    def readme(self) -> Path:
        return self.root / "README.md"

    @property
    def html(self) -> Path:
        return self.root / "index.html"

    def plot(self, key: str) -> Path:
        return self.root / "plots" / f"{key}.png"


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` via a temporary file and rename (derived files: no fsync)."""
    replace_file(path, data, step=f"rendering {path.name}", mode=RENDERED_MODE)


# --- index.json -------------------------------------------------------------------


def _index_json_tail(head: str) -> bytes:
    """The closing of index.json, naming the journal head (always the same length)."""
    return f'\n],"journal_head":"{head}"}}\n'.encode("ascii")


_INDEX_JSON_TAIL_LENGTH = len(_index_json_tail(GENESIS_HEAD))
_INDEX_JSON_TAIL_PATTERN = re.compile(rb'\n\],"journal_head":"[0-9a-f]{64}"\}\n')


def _index_json_head() -> bytes:
    header = json.dumps(
        {"format": INDEX_JSON_FORMAT, "version": INDEX_JSON_VERSION},
        sort_keys=True,
        separators=(",", ":"),
    )[:-1]
    return f'{header},"records":['.encode("ascii")


def build_index_json(connection: Connection, head: str = GENESIS_HEAD) -> bytes:
    """index.json: a header, one record entry per line in index order, the journal head."""
    entries = (
        connection.execute(select(RecordRow.index_entry).order_by(RecordRow.seq)).scalars().all()
    )
    tail = _index_json_tail(head)
    if not entries:
        return _index_json_head() + tail
    return _index_json_head() + b"\n" + ",\n".join(entries).encode("ascii") + tail


def _update_index_json(
    connection: Connection, path: Path, new_seqs: list[int], head: str = GENESIS_HEAD
) -> None:
    """Append new entries before the closing bracket when the file is as last rendered."""
    state = read_meta_json(connection, META_INDEX_JSON)
    size = path.stat().st_size if path.exists() else -1
    max_seq = _max_seq(connection)
    tail = _index_json_tail(head)
    if (
        _appendable(state, size, new_seqs, max_seq)
        and size > len(_index_json_head()) + _INDEX_JSON_TAIL_LENGTH
    ):
        entries = connection.execute(
            select(RecordRow.index_entry)
            .where(RecordRow.seq >= min(new_seqs))
            .order_by(RecordRow.seq)
        ).scalars()
        addition = b",\n" + ",\n".join(entries).encode("ascii") + tail
        with open(path, "r+b") as handle:
            handle.seek(size - _INDEX_JSON_TAIL_LENGTH)
            if not _INDEX_JSON_TAIL_PATTERN.fullmatch(handle.read()):
                addition = b""
            else:
                handle.seek(size - _INDEX_JSON_TAIL_LENGTH)
                handle.write(addition)
                handle.truncate()
        if addition:
            written = size - _INDEX_JSON_TAIL_LENGTH + len(addition)
            write_meta(
                connection,
                META_INDEX_JSON,
                json.dumps({"bytes": written, "head": head, "seq": max_seq}),
            )
            return
    if (
        state is not None
        and state.get("bytes") == size
        and state.get("seq") == max_seq
        and state.get("head") == head
    ):
        return
    data = build_index_json(connection, head)
    write_atomic(path, data)
    write_meta(
        connection, META_INDEX_JSON, json.dumps({"bytes": len(data), "head": head, "seq": max_seq})
    )


def _appendable(state: Any, size: int, new_seqs: list[int], max_seq: int) -> bool:
    """True when a file holds exactly what was rendered up to the seq before ``new_seqs``."""
    return bool(
        new_seqs
        and state is not None
        and state.get("bytes") == size
        and state.get("seq") == min(new_seqs) - 1
        and max(new_seqs) == max_seq
    )


# --- timings.csv ------------------------------------------------------------------


_TIMINGS_SQL = (
    "SELECT r.sha256, r.created_utc, r.comparison_key, t.acquisition, t.format, t.cache_state, "
    "t.trial_index, t.label, t.kept, t.seconds, t.read_bytes, t.file_bytes, t.residency_before "
    f"FROM {TrialRow.__tablename__} AS t JOIN {RecordRow.__tablename__} AS r ON r.seq = t.record_seq "
    "WHERE t.record_seq >= ? ORDER BY t.id"  # trial ids grow with seq: a record's trials follow its row
)


_TIMINGS_TEXT_COLUMNS = (
    "record_sha256",
    "created_utc",
    "comparison_key",
    "acquisition",
    "format",
    "cache_state",
    "label",
)


def _timings_rows(connection: Connection, min_seq: int | None = None) -> list[tuple]:
    """Trial rows for timings.csv, fetched through the DB-API cursor (hundreds of thousands)."""
    cursor = connection.connection.driver_connection.execute(_TIMINGS_SQL, (min_seq or 0,))
    return cursor.fetchall()


def timings_csv_text(rows: list[tuple], *, header: bool) -> bytes:
    """CSV of trial rows through pandas; the same code for full and appended renders."""
    import pandas as pd

    frame = pd.DataFrame.from_records(rows, columns=list(TIMINGS_COLUMNS))
    # object columns write about twice as fast as pandas' string dtype; bytes are identical
    if len(rows) > 10_000:
        frame = frame.astype({column: object for column in _TIMINGS_TEXT_COLUMNS})
    frame = frame.astype(
        {
            "trial_index": "int64",
            "kept": "bool",
            "seconds": "float64",
            "read_bytes": "int64",
            "file_bytes": "int64",
            "residency_before": "float64",
        }
    )
    return frame.to_csv(index=False, header=header, lineterminator="\n").encode("utf-8")


def build_timings_csv(connection: Connection) -> bytes:
    return timings_csv_text(_timings_rows(connection), header=True)


def _max_seq(connection: Connection) -> int:
    return connection.execute(select(func.max(RecordRow.seq))).scalar() or 0


def _update_timings_csv(connection: Connection, path: Path, new_seqs: list[int]) -> None:
    """Append the new records' trials when the file is as last rendered, else rewrite it."""
    state = read_meta_json(connection, META_TIMINGS)
    size = path.stat().st_size if path.exists() else -1
    max_seq = _max_seq(connection)
    if _appendable(state, size, new_seqs, max_seq):
        data = timings_csv_text(_timings_rows(connection, min_seq=min(new_seqs)), header=False)
        with open(path, "ab") as handle:
            handle.write(data)
        size += len(data)
    elif state is not None and state.get("bytes") == size and state.get("seq") == max_seq:
        return  # already current
    else:
        data = build_timings_csv(connection)
        write_atomic(path, data)
        size = len(data)
    write_meta(connection, META_TIMINGS, json.dumps({"bytes": size, "seq": max_seq}))


# --- README.md / index.html ---------------------------------------------------------


def _plot_state(connection: Connection, targets: RenderTargets, key: str, latest_seq: int) -> str:
    rendered = read_meta_json(connection, META_PLOT_PREFIX + key)
    if not targets.plot(key).exists():
        return "missing"
    return "current" if rendered == latest_seq else "pending"


def collect_index_context(connection: Connection, targets: RenderTargets) -> dict[str, Any]:
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
        record = row[0] if isinstance(row[0], RecordRow) else None
        record = record or row
        fields = json.loads(row.comparison_fields)
        keys.append(
            {
                "key": row.comparison_key,
                "device_name": row.device_name,
                "storage_id": row.storage_id,
                "backend": row.backend,
                "representation": row.representation,
                "timing_boundary": row.timing_boundary,
                "allocator_policy": row.allocator_policy,
                "acquisitions": [
                    pair[0] for pair in fields["acquisitions[id, source_master_sha256]"]
                ],
                "count": row.count,
                "latest_sha": row.sha256,
                "latest_created": row.created_utc,
                "plot_state": _plot_state(connection, targets, row.comparison_key, row.seq),
            }
        )
    latest = connection.execute(
        select(RecordRow).order_by(RecordRow.seq.desc()).limit(LATEST_RECORDS)
    ).all()
    n_records = connection.execute(select(func.count()).select_from(RecordRow)).scalar_one()
    return {"keys": keys, "latest": [dict(r._mapping) for r in latest], "n_records": n_records}


def build_readme_and_html(
    connection: Connection, targets: RenderTargets, head: str = GENESIS_HEAD
) -> tuple[bytes, bytes]:
    from harness.templating import render_template

    context = collect_index_context(connection, targets)
    context["journal_head"] = head
    readme = render_template("history_readme.md.j2", **context).encode("utf-8")
    html = render_template("history_index.html.j2", **context).encode("utf-8")
    return readme, html


# --- plots ----------------------------------------------------------------------


def render_plot(connection: Connection, key: str, path: Path) -> int:
    """Draw median and p95 per record over time for one comparison key; return its newest seq.

    Vectorised: times are parsed once into matplotlib date numbers and each series is
    one line of floats; point markers are drawn only while a series has at most
    ``PLOT_MARKER_LIMIT`` points (beyond that they cover each other and cost most of
    the drawing time).
    """
    import numpy as np
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter, date2num
    from matplotlib.figure import Figure

    rows = connection.execute(
        select(
            RecordRow.seq,
            RecordRow.created_utc,
            RecordRow.device_name,
            RecordRow.storage_id,
            SummaryRow.acquisition,
            SummaryRow.format,
            SummaryRow.cache_state,
            SummaryRow.median,
            SummaryRow.p95,
        )
        .join(RecordRow, RecordRow.seq == SummaryRow.record_seq)
        .where(RecordRow.comparison_key == key)
        .where(SummaryRow.median.is_not(None))
        .order_by(RecordRow.created_utc, RecordRow.seq)
    ).all()
    newest = connection.execute(
        select(func.max(RecordRow.seq)).where(RecordRow.comparison_key == key)
    ).scalar()
    # Timestamps are "YYYY-MM-DDTHH:MM:SSZ" (schema); numpy parses them without the "Z".
    stamps = sorted({row.created_utc for row in rows})
    day_of = dict(
        zip(stamps, date2num(np.array([s.rstrip("Z") for s in stamps], dtype="datetime64[s]")))
    )
    series: dict[tuple[str, str, str], tuple[list, list, list]] = {}
    for row in rows:
        xs, medians, p95s = series.setdefault(
            (row.cache_state, row.acquisition, row.format), ([], [], [])
        )
        xs.append(day_of[row.created_utc])
        medians.append(row.median)
        p95s.append(row.p95 if row.p95 is not None else np.nan)
    states = sorted({state for state, _, _ in series}, key=lambda s: (s != "cold", s)) or ["cold"]
    figure = Figure(figsize=(6.0 * len(states), 4.2), dpi=72)
    figure.subplots_adjust(left=0.08, right=0.98, bottom=0.2, top=0.86, wspace=0.2)
    axes = figure.subplots(1, len(states), squeeze=False)[0]
    # One colour per (acquisition, format), the same in every panel.
    cells = sorted({(acquisition, fmt) for _, acquisition, fmt in series})
    colors = {cell: f"C{index % 10}" for index, cell in enumerate(cells)}
    for axis, state in zip(axes, states):
        for (cache_state, acquisition, fmt), (xs, medians, p95s) in sorted(series.items()):
            if cache_state != state:
                continue
            color = colors[(acquisition, fmt)]
            marked = len(xs) <= PLOT_MARKER_LIMIT
            x = np.asarray(xs, dtype=float)
            axis.plot(
                x,
                np.asarray(medians, dtype=float),
                color=color,
                marker="." if marked else None,
                linewidth=1.0,
                label=f"{acquisition} {fmt} median",
            )
            axis.plot(
                x,
                np.asarray(p95s, dtype=float),
                color=color,
                linestyle="--",
                marker="x" if marked else None,
                markersize=4,
                linewidth=0.8,
                label=f"{acquisition} {fmt} p95",
            )
        locator = AutoDateLocator()
        axis.xaxis.set_major_locator(locator)
        axis.xaxis.set_major_formatter(ConciseDateFormatter(locator))
        if len(stamps) == 1:
            # A single point in time: show a day either side, not matplotlib's years.
            only = day_of[stamps[0]]
            axis.set_xlim(only - 1.0, only + 1.0)
        elif not stamps:
            axis.set_xlim(0.0, 1.0)
        axis.set_title(f"{state}")
        axis.set_ylabel("seconds")
        axis.grid(True, alpha=0.3)
        if axis.lines:
            axis.legend(fontsize="x-small", loc="upper left")  # "best" scans every point
        axis.tick_params(axis="x", labelrotation=30, labelsize="small")
    if rows:
        figure.suptitle(
            f"group {key}: {rows[-1].device_name} / {rows[-1].storage_id}", fontsize="medium"
        )
    with replacing(path, step=f"rendering plots/{path.name}", mode=RENDERED_MODE) as handle:
        figure.savefig(handle, format="png", metadata={"Software": None})
    return int(newest or 0)


def _keys_of(connection: Connection, seqs: Iterable[int]) -> set[str]:
    seqs = list(seqs)
    if not seqs:
        return set()
    return set(
        connection.execute(
            select(RecordRow.comparison_key).where(RecordRow.seq.in_(seqs))
        ).scalars()
    )


def _all_keys(connection: Connection) -> list[str]:
    return list(
        connection.execute(
            select(RecordRow.comparison_key).distinct().order_by(RecordRow.comparison_key)
        ).scalars()
    )


def _render_plots(
    connection: Connection, targets: RenderTargets, keys: Iterable[str], *, record_state: bool
) -> None:
    for key in sorted(keys):
        newest = render_plot(connection, key, targets.plot(key))
        if record_state:
            write_meta(connection, META_PLOT_PREFIX + key, json.dumps(newest))


# --- entry points -------------------------------------------------------------------


def check_plot_policy(plots: str) -> None:
    if plots not in PLOT_POLICIES:
        raise ValueError(f"plots must be one of {', '.join(PLOT_POLICIES)}, not {plots!r}")


def registration_renderer(plots: str = "auto") -> Callable[..., None]:
    """The ``render`` hook of :func:`harness.history.store.register_reports` for a plot policy.

    The policy is checked here, before anything is registered.
    """
    check_plot_policy(plots)
    return functools.partial(render_after_registration, plots=plots)


def rebuild_renderer(*, plots: bool = True) -> Callable[[HistoryLayout, Engine], None]:
    """The ``render`` hook of :func:`harness.history.rebuild.rebuild_history`: every view."""
    return functools.partial(render_all, plots="all" if plots else "none")


def _records_in_key(connection: Connection, key: str) -> int:
    return connection.execute(
        select(func.count()).select_from(RecordRow).where(RecordRow.comparison_key == key)
    ).scalar_one()


def render_after_registration(
    layout: HistoryLayout, engine: Engine, *, new_seqs: list[int], plots: str
) -> None:
    """Bring the history's rendered files up to date after records were indexed.

    ``plots`` is a policy of :data:`PLOT_POLICIES`; a plot not redrawn here shows
    as pending in README.md until ``harness render index`` draws it.
    """
    check_plot_policy(plots)
    targets = RenderTargets(layout.root)
    head = journal_head(layout)
    with engine.begin() as connection:
        if plots != "defer":
            keys = _keys_of(connection, new_seqs)
            if plots == "auto":
                keys = {k for k in keys if _records_in_key(connection, k) <= PLOT_INLINE_RECORDS}
            _render_plots(connection, targets, keys, record_state=True)
        _update_timings_csv(connection, targets.timings_csv, new_seqs)
        _update_index_json(connection, targets.index_json, new_seqs, head)
        readme, html = build_readme_and_html(connection, targets, head)
        write_atomic(targets.readme, readme)
        write_atomic(targets.html, html)


def render_all(
    layout: HistoryLayout,
    engine: Engine,
    *,
    out: Path | None = None,
    plots: str = "stale",
    full: bool = True,
) -> None:
    """Render every view; ``plots`` is ``"all"``, ``"stale"`` (only pending ones) or ``"none"``.

    With ``out``, files go to another folder and the history's bookkeeping is untouched.
    With ``full=False`` (history only), index.json and timings.csv are rewritten only
    when their bookkeeping (size and last record) does not match; README, HTML and
    pending plots are always redrawn.
    """
    targets = RenderTargets(out if out is not None else layout.root)
    in_history = out is None
    head = journal_head(layout)
    with engine.begin() as connection:
        if plots != "none":
            keys = _all_keys(connection)
            if plots == "stale" and in_history:
                keys = [
                    k
                    for k in keys
                    if _plot_state(connection, targets, k, _latest_seq_of(connection, k))
                    != "current"
                ]
            _render_plots(connection, targets, keys, record_state=in_history)
        if in_history and not full:
            # index.json and timings.csv only when their bookkeeping says they lag
            _update_timings_csv(connection, targets.timings_csv, [])
            _update_index_json(connection, targets.index_json, [], head)
        else:
            timings = build_timings_csv(connection)
            write_atomic(targets.timings_csv, timings)
            index_json = build_index_json(connection, head)
            write_atomic(targets.index_json, index_json)
            if in_history:
                max_seq = _max_seq(connection)
                write_meta(
                    connection, META_TIMINGS, json.dumps({"bytes": len(timings), "seq": max_seq})
                )
                write_meta(
                    connection,
                    META_INDEX_JSON,
                    json.dumps({"bytes": len(index_json), "head": head, "seq": max_seq}),
                )
        readme, html = build_readme_and_html(connection, targets, head)
        write_atomic(targets.readme, readme)
        write_atomic(targets.html, html)


def _latest_seq_of(connection: Connection, key: str) -> int:
    return (
        connection.execute(
            select(func.max(RecordRow.seq)).where(RecordRow.comparison_key == key)
        ).scalar()
        or 0
    )


def check_rendered(layout: HistoryLayout, connection: Connection) -> list[Problem]:
    """The history's rendered files against what the index renders now (``verify``'s hook).

    index.json, timings.csv, README.md and index.html must be byte for byte what the
    index (and the journal head) render; a plot missing or older than its group's
    newest record is a pending plot (a warning).
    """
    targets = RenderTargets(layout.root)
    try:
        head = journal_head(layout)
    except HistoryError:
        return []  # without a journal there is no head to render; verify reports it missing
    problems = []
    readme, html = build_readme_and_html(connection, targets, head)
    expected = {
        targets.index_json: build_index_json(connection, head),
        targets.timings_csv: build_timings_csv(connection),
        targets.readme: readme,
        targets.html: html,
    }
    for path, data in expected.items():
        if path.is_symlink() or (path.exists() and not path.is_file()):
            problems.append(
                Problem(
                    ProblemKind.RENDER_DAMAGED,
                    path.name,
                    "not a regular file (run `harness render index --full`)",
                )
            )
        elif not path.exists():
            problems.append(
                Problem(ProblemKind.STALE_RENDER, path.name, "missing (run `harness render index`)")
            )
        elif path.read_bytes() != data:
            problems.append(
                Problem(
                    ProblemKind.STALE_RENDER,
                    path.name,
                    "differs from what the index renders (run `harness render index --full`)",
                )
            )
    for key in _all_keys(connection):
        state = _plot_state(connection, targets, key, _latest_seq_of(connection, key))
        if state != "current":
            problems.append(
                Problem(
                    ProblemKind.PLOT_PENDING,
                    f"plots/{key}.png",
                    f"{state} (run `harness render index`)",
                )
            )
    return problems
