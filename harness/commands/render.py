"""``harness render index``: render a history's dashboard, index.json, timings.csv, README and plots.

``--serve`` then serves the rendered folder on 127.0.0.1 for a look (the pages also
work straight from ``file://``; serving is only a convenience).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

from harness.errors import EXIT_OK, UsageError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from harness.commands.history import add_history_location_arguments

    parser = subparsers.add_parser("render", help="render views of an evidence history")
    commands = parser.add_subparsers(dest="render_command", metavar="RENDER_COMMAND")
    index = commands.add_parser(
        "index",
        help="render the dashboard (index.html), README.md, index.json, timings.csv and plots",
        description=(
            "Bring every view of the history up to date from its index: the dashboard "
            "(index.html and dashboard/), README.md, pending plots and key pages, record pages "
            "not yet written, and index.json/timings.csv where they lag (all of them with --full)."
        ),
    )
    add_history_location_arguments(index, access="read")
    index.add_argument(
        "--out",
        metavar="DIR",
        help="render into DIR instead of the history folder (required with --history-url: "
        "the server's records are written there too, so the dashboard stands alone)",
    )
    index.add_argument(
        "--all-plots", action="store_true", help="redraw every plot, not only pending ones"
    )
    index.add_argument("--no-plots", action="store_true", help="do not draw plots")
    index.add_argument(
        "--full",
        action="store_true",
        help="rewrite index.json and timings.csv even when their bookkeeping says they are current",
    )
    index.add_argument(
        "--git-repo",
        metavar="DIR",
        default=".",
        help="place records in this repository's commit order (default: the current folder)",
    )
    index.add_argument(
        "--serve",
        action="store_true",
        help="then serve the rendered folder on http://127.0.0.1:PORT until interrupted",
    )
    index.add_argument("--port", type=int, default=8000, help="port for --serve (0: any free one)")
    index.set_defaults(func=run)
    parser.set_defaults(func=_missing_subcommand)


def _missing_subcommand(args: argparse.Namespace) -> int:
    raise UsageError("render needs a subcommand: index")


def _render_options(plots: str, repository: Path) -> dict:
    """What a render of a copy keeps with it (a later render redraws all when they
    differ): whether plots are drawn, and a digest of the git order of records."""
    from harness.history.records import sha256_bytes
    from harness.render.keys import git_positions

    order = json.dumps(sorted(git_positions(repository).items())).encode("ascii")
    return {"plots": plots != "none", "git_order": sha256_bytes(order)}


class _DrawnWhileCopied:
    """What the render draws while a history is copied whole into its folder
    (:class:`harness.history.snapshot.CopyObserver`): the record pages, in worker
    processes from the moment their records are in the folder, and timings.csv and the
    key pages' trials from the index rows as they pass (not read back afterwards)."""

    def __init__(self, layout) -> None:
        from harness.render import RenderTargets
        from harness.render.key_trials import KeyTrialsFromRows
        from harness.render.record_pages import PagesDuringCopy
        from harness.render.timings import TimingsFromRows

        self._pages = PagesDuringCopy(layout, RenderTargets(layout.root))
        self.record_files = self._pages
        self.timings = TimingsFromRows(RenderTargets(layout.root).timings_csv)
        self.key_trials = KeyTrialsFromRows()
        self.pages = None
        self.timings_size: int | None = None

    def rows_copied(self, table: str, batch: list) -> None:
        self.timings.rows(table, batch)
        self.key_trials.rows(table, batch)

    def finish(self) -> None:
        self.timings_size = self.timings.finish()
        self.pages = self._pages.pages

    def abort(self) -> None:
        self.timings.abort()
        self.pages = self._pages.pages

    def close(self) -> None:
        if self.pages is not None:
            self.pages.close()  # stops its workers when the render failed before finishing them


def run(args: argparse.Namespace) -> int:
    """Render the history, whichever backend holds it, through one path: the backend
    gives what to read (a folder's own files, or a copy of a server that ``--out``
    keeps: :meth:`~harness.history.backend.HistoryBackend.rendering`), the views draw
    what its bookkeeping says is stale, or what the copy gained."""
    from harness.history.snapshot import SnapshotUpdate
    from harness.render import render_all
    from harness.render.update import render_increment

    if args.all_plots and args.no_plots:
        raise UsageError("--all-plots and --no-plots exclude each other")
    out = Path(args.out).absolute() if args.out else None
    plots = "none" if args.no_plots else ("all" if args.all_plots or out is not None else "stale")
    repository = Path(args.git_repo)
    history = args.history
    copied: list[_DrawnWhileCopied] = []

    def on_copy(layout) -> _DrawnWhileCopied:
        copied.append(_DrawnWhileCopied(layout))
        return copied[0]

    # computed once, and only for a copy that keeps them (git order: a subprocess)
    options = functools.cache(lambda: _render_options(plots, repository))
    with history.rendering(out, options=options, on_copy=on_copy) as source:
        for line in source.notes:
            print(line)
        for line in source.warnings:
            print(line, file=sys.stderr)
        if isinstance(source.changes, SnapshotUpdate):  # a kept copy: draw what it gained
            render_increment(
                source.layout,
                source.engine,
                new_seqs=source.changes.new_seqs,
                new_shas=source.changes.new_shas,
                draw_keys=plots != "none",
                redraw_all_keys=source.held_options["git_order"] != options()["git_order"],
                repository=repository,
            )
            done = (
                f" ({len(source.changes.new_seqs)} records new since the last render; "
                "rendered what they changed)"
            )
        else:
            drawn = copied[0] if copied else None
            render_all(
                source.layout,
                source.engine,
                out=source.out,
                plots=plots,
                full=args.full or out is not None,
                repository=repository,
                record_pages=drawn.pages if drawn else None,
                timings_csv_size=drawn.timings_size if drawn else None,
                key_trials=drawn.key_trials.frame if drawn else None,
            )
            done = " (rendered every record)" if source.changes is not None else ""
    root = source.out or source.layout.root
    print(f"rendered {root}{done}; open {root / 'index.html'}")
    if args.serve:
        serve(root, args.port)
    return EXIT_OK


def serve(root: Path, port: int) -> None:
    """Serve ``root`` on 127.0.0.1 only (never on every interface) until Ctrl-C."""
    import functools
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(root))
    with ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        host, bound = server.server_address[:2]
        print(f"serving http://{host}:{bound}/ (Ctrl-C to stop)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            print("stopped")
