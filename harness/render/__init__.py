"""Rendered views of a history, all derived from its index (``docs/history-format.md``
"Rendered files", ``docs/dashboard.md``).

This package sits above ``harness.history``: it reads the index and the records, and
the history never imports it (``tests/test_architecture.py``).

- :mod:`~harness.render.index_json`: ``index.json``, every record's entry in index order;
- :mod:`~harness.render.timings`: ``timings.csv``, every measured trial;
- :mod:`~harness.render.pages`: ``README.md`` and the dashboard overview ``index.html``;
- :mod:`~harness.render.record_pages`: one page per record (in worker processes for
  large histories);
- :mod:`~harness.render.keys`: one dashboard page per comparison key (plotly.js);
- :mod:`~harness.render.plots`: ``plots/<comparison key>.png`` (matplotlib);
- :mod:`~harness.render.update`: render everything, or what a registration changed.
"""

from harness.render.checks import check_rendered
from harness.render.index_json import build_index_json
from harness.render.pages import LATEST_RECORDS, build_readme_and_html, collect_index_context
from harness.render.plots import render_plot
from harness.render.targets import RenderTargets, write_atomic
from harness.render.timings import TIMINGS_COLUMNS, build_timings_csv, timings_csv_text
from harness.render.update import (
    PLOT_INLINE_RECORDS,
    PLOT_POLICIES,
    check_plot_policy,
    rebuild_renderer,
    registration_renderer,
    render_after_registration,
    render_all,
)

__all__ = [
    "LATEST_RECORDS",
    "PLOT_INLINE_RECORDS",
    "PLOT_POLICIES",
    "TIMINGS_COLUMNS",
    "RenderTargets",
    "build_index_json",
    "build_readme_and_html",
    "build_timings_csv",
    "check_plot_policy",
    "check_rendered",
    "collect_index_context",
    "rebuild_renderer",
    "registration_renderer",
    "render_after_registration",
    "render_all",
    "render_plot",
    "timings_csv_text",
    "write_atomic",
]
