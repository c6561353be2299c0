"""Entry points: render everything, or only what a registration changed.

After a registration only what changed is redone: index.json is concatenated from
entries serialised at registration, timings.csv gains the new rows (or is rewritten
when its bookkeeping does not match), README and the overview read aggregates, the
new records get their pages, and only the keys that gained records get their plot
and key page redrawn (or are marked pending when that is deferred).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, select

from harness.history.index_db import RecordRow, write_meta
from harness.history.journal import journal_head
from harness.history.layout import HistoryLayout
from harness.render.index_json import update_index_json, write_index_json
from harness.render.keys import (
    collect_key_data,
    git_positions,
    refresh_change_points,
    write_key_page,
)
from harness.render.pages import (
    META_PLOT_PREFIX,
    build_readme_and_html,
    plot_state,
    remove_stale_pages,
    write_assets,
)
from harness.render.plots import render_plot
from harness.render.record_pages import (
    RecordPages,
    RecordPagesFailed,
    settle_failed_pages,
    start_record_pages,
)
from harness.render.targets import (
    RenderTargets,
    all_keys,
    keys_of,
    latest_seq_of,
    records_in_key,
    write_atomic,
)
from harness.render.timings import update_timings_csv, write_timings_csv, write_timings_state

#: What a registration does with the plots and key pages of the keys that gained records.
PLOT_POLICIES = ("auto", "now", "defer")
#: Under ``plots="auto"``, the largest comparison key (in records) whose plot a
#: registration still redraws itself; larger keys' plots are left pending for
#: ``harness render index``, because their redraw alone exceeds the 100 ms that a
#: whole registration may take.
PLOT_INLINE_RECORDS = 500


def check_plot_policy(plots: str) -> None:
    if plots not in PLOT_POLICIES:
        raise ValueError(f"plots must be one of {', '.join(PLOT_POLICIES)}, not {plots!r}")


def default_repository() -> Path | None:
    """The git repository whose commit order places records (the working directory's)."""
    return Path.cwd()


def _render_keys(
    connection: Connection,
    targets: RenderTargets,
    keys: Iterable[str],
    *,
    record_state: bool,
    positions: dict[str, int],
    detect_changes: bool = False,
    key_trials: Callable[[str], Any] | None = None,
) -> None:
    """Redraw each key's PNG and dashboard page (one unit: both show the same data).

    With ``detect_changes`` (``harness render index`` on the history itself) change points
    are detected again and stored; otherwise the stored ones are drawn. ``key_trials``:
    a key's trials frame when the caller holds them (``collect_key_data``'s ``trials``).
    """
    for key in sorted(keys):
        trials = None if key_trials is None else key_trials(key)
        data = collect_key_data(connection, key, positions=positions, trials=trials)
        del trials
        if detect_changes:
            refresh_change_points(connection, key, data)
        newest = render_plot(connection, key, targets.plot(key), data=data)
        write_key_page(connection, targets, key, data=data)
        if record_state:
            write_meta(connection, META_PLOT_PREFIX + key, json.dumps(newest))


def _write_index_pages(connection: Connection, targets: RenderTargets, head: str) -> None:
    readme, html = build_readme_and_html(connection, targets, head)
    write_atomic(targets.readme, readme)
    write_atomic(targets.html, html)


def _write_pages_of(
    connection: Connection, layout: HistoryLayout, targets: RenderTargets, seqs: list[int]
) -> list[tuple[str, str]]:
    """Write (rewrite) the pages of the records ``seqs``; return the (sha256, error) of
    those drawn as fallback pages."""
    pages = start_record_pages(connection, layout, targets, seqs, rewrite=True)
    try:
        pages.finish()
    finally:
        pages.close()
    return pages.failures


def _settle(
    connection: Connection,
    targets: RenderTargets,
    failures: list[tuple[str, str]],
    *,
    in_history: bool,
) -> None:
    """Record which pages are fallback pages (the history's own render)."""
    if in_history:
        settle_failed_pages(connection, targets, failures)


def _fail_on(failures: list[tuple[str, str]]) -> None:
    """Fail naming the fallback pages: once the rest of the render is written and
    committed, so one record never leaves the others undrawn."""
    if failures:
        raise RecordPagesFailed(failures)


def render_after_registration(
    layout: HistoryLayout,
    engine: Engine,
    *,
    new_seqs: list[int],
    plots: str,
    repository: Path | None = None,
) -> None:
    """Bring the history's rendered files up to date after records were indexed.

    ``plots`` is a policy of :data:`PLOT_POLICIES`; a key whose plot and page are not
    redrawn here shows as pending until ``harness render index`` draws it.
    """
    check_plot_policy(plots)
    targets = RenderTargets(layout.root)
    head = journal_head(layout)
    with engine.begin() as connection:
        write_assets(targets)
        failures = _write_pages_of(connection, layout, targets, new_seqs)
        if plots != "defer":
            keys = keys_of(connection, new_seqs)
            if plots == "auto":
                keys = {k for k in keys if records_in_key(connection, k) <= PLOT_INLINE_RECORDS}
            if keys:
                positions = git_positions(repository or default_repository())
                _render_keys(connection, targets, keys, record_state=True, positions=positions)
        update_timings_csv(connection, targets.timings_csv, new_seqs)
        update_index_json(connection, targets.index_json, new_seqs, head)
        _write_index_pages(connection, targets, head)
        _settle(connection, targets, failures, in_history=True)
    _fail_on(failures)


def render_increment(
    layout: HistoryLayout,
    engine: Engine,
    *,
    new_seqs: list[int],
    new_shas: set[str],
    draw_keys: bool = True,
    redraw_all_keys: bool = False,
    repository: Path | None = None,
) -> None:
    """Bring a rendered folder that plays the history (a server's dashboard, rendered
    from the folder's snapshot) up to date after ``new_seqs`` were added to its index and
    the records ``new_shas`` to its folder: the result is the folder :func:`render_all`
    (``plots="all"``, ``full=True``) draws from the same state, without redrawing what did
    not change.

    Redrawn: the pages of the new records and of the records whose declared baseline
    is new (a page compares a record with its baseline when that is present), the
    plots and key pages of the keys that gained records (all keys with
    ``redraw_all_keys``: the git order of records changed), with change points
    detected again; index.json and timings.csv gain the new rows; README and the
    overview are redrawn. Without ``draw_keys`` no plot or key page is drawn (as
    ``render_all(plots="none")``).
    """
    targets = RenderTargets(layout.root)
    head = journal_head(layout)
    with engine.begin() as connection:
        write_assets(targets)
        pages = set(new_seqs)
        if new_shas:  # few declare a baseline: read those, keep the ones that are new
            pages.update(
                seq
                for seq, baseline in connection.execute(
                    select(RecordRow.seq, RecordRow.baseline_sha256).where(
                        RecordRow.baseline_sha256.is_not(None)
                    )
                )
                if baseline in new_shas
            )
        failures = _write_pages_of(connection, layout, targets, sorted(pages))
        if not draw_keys:
            keys = set()
        elif redraw_all_keys:
            keys = set(all_keys(connection))
        elif new_seqs:  # every row from the first new one is new (the index only grows)
            keys = set(
                connection.execute(
                    select(RecordRow.comparison_key)
                    .where(RecordRow.seq >= min(new_seqs))
                    .distinct()
                ).scalars()
            )
        else:
            keys = set()
        if keys:
            positions = git_positions(repository or default_repository())
            _render_keys(
                connection,
                targets,
                keys,
                record_state=True,
                positions=positions,
                detect_changes=True,
            )
        update_timings_csv(connection, targets.timings_csv, new_seqs)
        update_index_json(connection, targets.index_json, new_seqs, head)
        _write_index_pages(connection, targets, head)
    _fail_on(failures)


def render_all(
    layout: HistoryLayout,
    engine: Engine,
    *,
    out: Path | None = None,
    plots: str = "stale",
    full: bool = True,
    repository: Path | None = None,
    record_pages: RecordPages | None = None,
    timings_csv_size: int | None = None,
    key_trials: Callable[[str], Any] | None = None,
) -> None:
    """Render every view; ``plots`` is ``"all"``, ``"stale"`` (only pending ones) or ``"none"``.

    With ``out``, files go to another folder and the history's bookkeeping is untouched.
    With ``full=False`` (history only), index.json and timings.csv are rewritten only
    when their bookkeeping (size and last record) does not match, and record pages
    that exist are kept; README, the overview and pending keys are always redrawn.
    ``record_pages``: every record's pages, started already by the caller
    (:func:`start_record_pages` with ``rewrite=full``, e.g. while it copied the index);
    finished, or closed on an error, here. ``timings_csv_size``: timings.csv of every
    trial of the index is in place already, this many bytes (written by the caller as
    it copied the index, :class:`~harness.render.timings.TimingsFromRows`; ``full`` only).
    ``key_trials``: each key's trials as a frame, gathered by the caller as it copied the
    index (:meth:`~harness.render.key_trials.KeyTrialsFromRows.frame`), not read back.
    """
    targets = RenderTargets(out if out is not None else layout.root)
    in_history = out is None
    head = journal_head(layout)
    with engine.begin() as connection:
        write_assets(targets)
        keys = all_keys(connection)
        # record pages are written by worker processes meanwhile (in large histories)
        if record_pages is None:
            record_pages = start_record_pages(connection, layout, targets, None, rewrite=full)
        try:
            if plots != "none":
                drawn = keys
                if plots == "stale" and in_history:
                    drawn = [
                        k
                        for k in keys
                        if plot_state(connection, targets, k, latest_seq_of(connection, k))
                        != "current"
                        or not targets.key_page(k).exists()
                    ]
                positions = git_positions(repository or default_repository())
                _render_keys(
                    connection,
                    targets,
                    drawn,
                    record_state=in_history,
                    positions=positions,
                    detect_changes=in_history,
                    key_trials=key_trials,
                )
            if in_history and not full:
                # index.json and timings.csv only when their bookkeeping says they lag
                update_timings_csv(connection, targets.timings_csv, [])
                update_index_json(connection, targets.index_json, [], head)
            else:
                if timings_csv_size is None:
                    write_timings_csv(connection, targets.timings_csv, record_state=in_history)
                elif in_history:
                    write_timings_state(connection, timings_csv_size)
                write_index_json(connection, targets.index_json, record_state=in_history, head=head)
            record_pages.finish()
        finally:
            record_pages.close()
        shas = set(connection.execute(select(RecordRow.sha256)).scalars())
        remove_stale_pages(targets.record_page("x").parent, shas)
        remove_stale_pages(targets.key_page("x").parent, set(keys))
        _write_index_pages(connection, targets, head)
        _settle(connection, targets, record_pages.failures, in_history=in_history)
    _fail_on(record_pages.failures)


def registration_renderer(plots: str = "auto") -> Callable[..., None]:
    """The ``render`` hook of :func:`harness.history.store.register_reports` for a plot policy.

    The policy is checked here, before anything is registered.
    """
    check_plot_policy(plots)
    return functools.partial(render_after_registration, plots=plots)


def rebuild_renderer(*, plots: bool = True) -> Callable[[HistoryLayout, Engine], None]:
    """The ``render`` hook of :func:`harness.history.rebuild.rebuild_history`: every view."""
    return functools.partial(render_all, plots="all" if plots else "none")
