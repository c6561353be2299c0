"""``history verify``'s ``check_rendered`` hook: rendered files against what the index renders."""

from __future__ import annotations

from sqlalchemy import Connection

from harness.errors import HistoryError
from harness.history.index_db import read_meta_json
from harness.history.journal import journal_head
from harness.history.layout import HistoryLayout
from harness.history.verify import Problem, ProblemKind
from harness.render.index_json import build_index_json
from harness.render.pages import build_readme_and_html, plot_state
from harness.render.record_pages import META_FAILED_PAGES
from harness.render.targets import RenderTargets, all_keys, latest_seq_of
from harness.render.timings import build_timings_csv


def check_rendered(layout: HistoryLayout, connection: Connection) -> list[Problem]:
    """The history's rendered files against what the index renders now.

    index.json, timings.csv, README.md and index.html (the dashboard overview) must be
    byte for byte what the index (and the journal head) render; a key whose plot and page
    are missing or older than its newest record is pending (a warning). Key and record
    pages are views only and not compared.
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
    failed = read_meta_json(connection, META_FAILED_PAGES) or {}
    for sha256, error in sorted(failed.items()):
        problems.append(
            Problem(
                ProblemKind.PAGE_FAILED,
                f"dashboard/records/{sha256}.html",
                f"record {sha256}'s page could not be drawn ({error}); it shows the record's JSON",
            )
        )
    for key in all_keys(connection):
        state = plot_state(connection, targets, key, latest_seq_of(connection, key))
        if state != "current":
            problems.append(
                Problem(
                    ProblemKind.PLOT_PENDING,
                    f"plots/{key}.png",
                    f"{state} (run `harness render index`)",
                )
            )
    return problems
