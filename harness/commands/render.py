"""``harness render index``: render a history's dashboard, index.json, timings.csv, README and plots.

``--serve`` then serves the rendered folder on 127.0.0.1 for a look (the pages also
work straight from ``file://``; serving is only a convenience).
"""

from __future__ import annotations

import argparse
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


#: The ``index_meta`` key, in a server render's snapshot, of the options it was rendered
#: with: whether plots were drawn, and a digest of the git order of records.
_META_RENDER_OPTIONS = "render.options"
#: Seconds to wait for another render into the same folder.
_RENDER_LOCK_TIMEOUT = 600.0


def _render_options(plots: str, repository: Path) -> dict:
    from harness.history.records import sha256_bytes
    from harness.render.keys import git_positions

    order = json.dumps(sorted(git_positions(repository).items())).encode("ascii")
    return {"plots": plots != "none", "git_order": sha256_bytes(order)}


def _render_snapshot(history, out: Path, args: argparse.Namespace, plots: str) -> str:
    """The dashboard of a history that holds no rendered files (a server), rendered into ``out`` from a snapshot of
    its records, journal and index that ``out`` keeps (:mod:`harness.history.snapshot`).

    A folder rendered from the same server before is brought up to date: only what was
    registered since is fetched, and only what it changed is drawn again
    (:func:`harness.render.update.render_increment`); the result is the folder a whole
    render gives. When the folder's copy no longer matches the server (its journal does
    not extend the held one, its index was rebuilt, a file was edited, the options
    differ), everything is fetched and drawn again, and a note says why. What was done,
    as a line for the user.
    """
    from filelock import FileLock, Timeout

    from harness.errors import HistoryError
    from harness.fsio import ensure_dir
    from harness.history.index_db import forget_index, open_index, read_meta_json, write_meta
    from harness.history.layout import HistoryLayout
    from harness.history.snapshot import (
        Stale,
        mark_complete,
        snapshot_path,
    )
    from harness.render import RenderTargets, render_all
    from harness.render.key_trials import KeyTrialsFromRows
    from harness.render.record_pages import PagesDuringCopy
    from harness.render.timings import TimingsFromRows
    from harness.render.update import render_increment

    repository = Path(args.git_repo)
    index_path = snapshot_path(out)
    ensure_dir(index_path.parent, step="creating the render snapshot folder")
    lock = FileLock(str(index_path.parent / "lock"), timeout=_RENDER_LOCK_TIMEOUT)
    try:
        lock.acquire()
    except Timeout:
        raise HistoryError(
            f"{out}: another render into this folder has held it for "
            f"{_RENDER_LOCK_TIMEOUT:.0f} s; try again when it is done"
        ) from None
    layout = HistoryLayout.at(out)
    pages = None  # a first render's record pages, started once the records are in DIR
    try:
        options = _render_options(plots, repository)
        rendered_before = index_path.exists()
        update = history.update_snapshot(out) if rendered_before else Stale("first render")
        if not isinstance(update, Stale):
            engine = open_index(index_path, create=False)
            try:
                with engine.connect() as connection:
                    held = read_meta_json(connection, _META_RENDER_OPTIONS)
            finally:
                engine.dispose()
                forget_index(index_path)
            if held is None or held["plots"] != options["plots"]:
                update = Stale(f"{out} was rendered with other options (plots or not)")
        if isinstance(update, Stale):
            if rendered_before:
                print(f"note: {out}: rendering everything again: {update.reason}",
                      file=sys.stderr)  # fmt: skip

            # timings.csv is written, and the key pages' trials are gathered, from
            # the index rows as they are copied (not read back out of the snapshot)
            timings = TimingsFromRows(RenderTargets(layout.root).timings_csv)
            key_trials = KeyTrialsFromRows()

            def rows_copied(table: str, batch: list) -> None:
                timings.rows(table, batch)
                key_trials.rows(table, batch)

            # the record pages are written by worker processes from the moment their
            # records are in DIR, while the rest is copied and the keys are drawn
            during_copy = PagesDuringCopy(layout, RenderTargets(layout.root))
            try:
                history.take_snapshot(
                    out,
                    prune=rendered_before,
                    record_files=during_copy,
                    rows_copied=rows_copied,
                )
                timings_size = timings.finish()
            except BaseException:
                timings.abort()
                raise
            finally:
                pages = during_copy.pages
        engine = open_index(index_path, create=False)
        try:
            # DIR plays the history folder (out=None): the dashboard is the one `render
            # index --full --all-plots` draws in a folder with the same records, change
            # points detected, with its bookkeeping in the snapshot
            if isinstance(update, Stale):
                render_all(
                    layout,
                    engine,
                    out=None,
                    plots="none" if plots == "none" else "all",
                    full=True,
                    repository=repository,
                    record_pages=pages,
                    timings_csv_size=timings_size,
                    key_trials=key_trials.frame,
                )
                done = "rendered every record"
            else:
                render_increment(
                    layout,
                    engine,
                    new_seqs=update.new_seqs,
                    new_shas=update.new_shas,
                    draw_keys=options["plots"],
                    redraw_all_keys=held["git_order"] != options["git_order"],
                    repository=repository,
                )
                for path in update.repaired:
                    print(f"note: {path}: not the server's bytes; written again",
                          file=sys.stderr)  # fmt: skip
                done = (
                    f"{len(update.new_seqs)} records new since the last render; rendered "
                    "what they changed"
                )
            with engine.begin() as connection:
                write_meta(connection, _META_RENDER_OPTIONS, json.dumps(options))
        finally:
            engine.dispose()
            forget_index(index_path)
        mark_complete(index_path)
    finally:
        if pages is not None:
            pages.close()  # stops its workers when the render failed before finishing them
        lock.release()
    return done


def run(args: argparse.Namespace) -> int:
    from harness.commands.history import history_location
    from harness.history.index_db import open_index, open_index_for_reading
    from harness.history.lock import locked_history
    from harness.history.store import index_journalled
    from harness.render import render_all

    if args.all_plots and args.no_plots:
        raise UsageError("--all-plots and --no-plots exclude each other")
    out = Path(args.out).absolute() if args.out else None
    plots = "none" if args.no_plots else ("all" if args.all_plots or out is not None else "stale")
    location = history_location(args)
    history = args.history
    if not history.holds_rendered_files:
        # a history without rendered files (a server) is drawn from a snapshot of it
        # that the output folder keeps
        if out is None:
            raise UsageError(f"render index of {history.where} needs --out DIR (where to render)")
        if (out / "history.json").exists():
            raise UsageError(
                f"--out {out} is a history folder; render {history.where} into a new folder"
            )
        done = _render_snapshot(history, out, args, plots)
        _warn_left_out(history)
        print(f"rendered {out} ({done}); open {out / 'index.html'}")
        if args.serve:
            serve(out, args.port)
        return EXIT_OK
    # rendered elsewhere, the history is only read: it may be read-only
    with locked_history(location, shared=out is not None) as layout:
        if out is None:
            engine = open_index(layout.index_db, create=False)
            # a registration cut short after its journal line (a full disk): indexed now
            repaired, skipped = index_journalled(layout, engine)
            if repaired:
                print(f"indexed {len(repaired)} journalled records the index lacked")
            for line in skipped:
                print(f"warning: {line} (run `harness history verify`)", file=sys.stderr)
        else:
            engine = open_index_for_reading(layout.index_db)
        try:
            render_all(
                layout,
                engine,
                out=out,
                plots=plots,
                full=args.full or out is not None,
                repository=Path(args.git_repo),
            )
        finally:
            engine.dispose()
    root = out or layout.root
    print(f"rendered {root}; open {root / 'index.html'}")
    if args.serve:
        serve(root, args.port)
    return EXIT_OK


def _warn_left_out(history) -> None:
    """Name the records the render left out (no index row: not a valid report, let in
    by an older server or an owner's edit, or an index that lags)."""
    for sha256 in history.unindexed():
        print(
            f"warning: record {sha256} is not indexed and was left out (not a valid "
            "report, or the index lags): `harness history verify` says which",
            file=sys.stderr,
        )


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
