"""``harness history``: register, import, list, show, head, verify and rebuild an evidence history.

The history package knows nothing of rendering; the commands here pass it the render
hooks (:mod:`harness.render`), so the views stay above the store.
"""

from __future__ import annotations

import argparse
import builtins
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.commands.history_changes import (
    CHANGES_DESCRIPTION,
    CHANGES_HELP,
    add_changes_arguments,
    run_changes,
)
from harness.commands.history_publish import (
    PUBLISH_DESCRIPTION,
    PUBLISH_HELP,
    add_publish_arguments,
    run_publish,
)
from harness.errors import EXIT_FAILURE, EXIT_OK, HistoryError, UsageError
from harness.safe_text import terminal_text
from harness.views.listing import print_listing

#: Where a history lives when ``--history-dir`` is not given.
HISTORY_DIR_ENV = "HARNESS_HISTORY_DIR"
DEFAULT_HISTORY_DIR = "harness-history"
#: A history on a database server (``--history-url``), for the commands that take one.
HISTORY_URL_ENV = "HARNESS_HISTORY_URL"


def add_history_location_arguments(parser: argparse.ArgumentParser, *, access: str) -> None:
    """``--history-dir`` or ``--history-url`` (one of them; default from the environment);
    the CLI opens that history for the command (:func:`opened_for_command`), to be read
    or written (``access``: "read" or "write")."""
    parser.set_defaults(history_access=access)
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--history-dir",
        default=None,
        metavar="H",
        help=f"history folder (default ${HISTORY_DIR_ENV} or ./{DEFAULT_HISTORY_DIR})",
    )
    group.add_argument(
        "--history-url",
        default=None,
        metavar="URL",
        help=f"history on a PostgreSQL server, postgresql+psycopg://USER@HOST/DB (default ${HISTORY_URL_ENV})",
    )


def history_location(args: argparse.Namespace) -> str:
    """Where the command's history is: ``--history-url`` or ``--history-dir`` (one of
    them), else ``$HARNESS_HISTORY_URL`` or ``$HARNESS_HISTORY_DIR`` (not both), else
    ./harness-history."""
    given = getattr(args, "history_url", None) or args.history_dir
    if given:
        return given
    url = os.environ.get(HISTORY_URL_ENV)
    if url and os.environ.get(HISTORY_DIR_ENV):
        raise UsageError(
            f"both ${HISTORY_DIR_ENV} and ${HISTORY_URL_ENV} are set; give --history-dir "
            "or --history-url"
        )
    return url or os.environ.get(HISTORY_DIR_ENV) or DEFAULT_HISTORY_DIR


@contextmanager
def opened_for_command(args: argparse.Namespace) -> Iterator:
    """What the CLI wraps a command in: the history the command's parser asks for
    (``history_access``, set by :func:`add_history_location_arguments`), opened once and
    given to the command as ``args.history``; nothing for a command without one."""
    access = getattr(args, "history_access", None)
    if access is None:
        yield None
        return
    with opened_history(history_location(args), read_only=access == "read") as history:
        args.history = history
        yield history


@contextmanager
def opened_history(location: str | Path, *, read_only: bool = False) -> Iterator:
    """The :class:`~harness.history.backend.HistoryBackend` at ``location`` for one
    command (:func:`history_location`); its connections closed afterwards."""
    from harness.history.opening import open_history

    history = open_history(location, read_only=read_only)
    try:
        yield history
    finally:
        history.close()


@contextmanager
def opened_optional_history(location: str | Path | None) -> Iterator:
    """:func:`opened_history` for a command whose history is optional (a run): None
    without a location."""
    if location is None:
        yield None
        return
    with opened_history(location) as history:
        yield history


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "history",
        help="the immutable evidence history",
        description="Register reports as content-addressed records and check the history.",
    )
    commands = parser.add_subparsers(dest="history_command", metavar="HISTORY_COMMAND")

    register = commands.add_parser(
        "register", help="store reports (validated first; identical bytes: no-op)"
    )
    register.add_argument("reports", nargs="+", metavar="REPORT", help="loading.json files")
    add_history_location_arguments(register, access="write")
    add_plot_policy_arguments(register)
    register.set_defaults(func=run_register)

    importer = commands.add_parser(
        "import", help="import earlier reports (files or folders of loading.json)"
    )
    importer.add_argument("paths", nargs="+", metavar="OLD", help="report files or folders")
    location = importer.add_mutually_exclusive_group()
    location.add_argument(
        "--history-dir",
        "--out",
        dest="history_dir",
        default=None,
        metavar="H",
        help=(
            f"history folder to import into (default ${HISTORY_DIR_ENV} or "
            f"./{DEFAULT_HISTORY_DIR}; --out is an older spelling)"
        ),
    )
    location.add_argument(
        "--history-url",
        default=None,
        metavar="URL",
        help=f"history on a PostgreSQL server to import into (default ${HISTORY_URL_ENV})",
    )
    importer.set_defaults(history_access="write")
    importer.add_argument(
        "--skip-invalid",
        action="store_true",
        help="import the valid reports and list the refused ones",
    )
    add_plot_policy_arguments(importer)
    importer.set_defaults(func=run_import)

    lister = commands.add_parser("list", help="list records, newest last")
    add_history_location_arguments(lister, access="read")
    lister.add_argument(
        "--key", "--group", dest="group", metavar="KEY", help="only this comparison key"
    )
    lister.add_argument("--limit", type=int, default=None, metavar="N", help="only the newest N")
    lister.set_defaults(func=run_list)

    show = commands.add_parser("show", help="show one record")
    show.add_argument("sha", metavar="SHA_PREFIX", help="unique SHA-256 prefix (4+ hex digits)")
    add_history_location_arguments(show, access="read")
    show.add_argument("--raw", action="store_true", help="print the record's exact bytes")
    show.set_defaults(func=run_show)

    head = commands.add_parser(
        "head", help="print the journal's head hash (keep it; verify --expect-head checks it)"
    )
    add_history_location_arguments(head, access="read")
    head.set_defaults(func=run_head)

    verify = commands.add_parser(
        "verify",
        help="re-hash every record; check index, journal and rendered files (exit 1 on problems)",
    )
    add_history_location_arguments(verify, access="read")
    verify.add_argument(
        "--expect-head",
        metavar="HASH",
        help="a journal head kept from earlier: prove nothing registered up to it was removed or altered",
    )
    verify.add_argument(
        "--records-only",
        action="store_true",
        help="check the records and the journal only: a history kept without its derived "
        "files (index, rendered files), as the committed docs/performance/evidence",
    )
    verify.set_defaults(func=run_verify)

    publish = commands.add_parser(  # arguments and work in harness/commands/history_publish.py
        "publish", help=PUBLISH_HELP, description=PUBLISH_DESCRIPTION
    )
    add_publish_arguments(publish)
    publish.set_defaults(func=run_publish)

    rebuild = commands.add_parser(
        "rebuild",
        help="regenerate index and rendered files from records/ alone "
        "(on a server: its index, in one transaction, as the database's owner)",
    )
    add_history_location_arguments(rebuild, access="write")
    rebuild.add_argument("--no-plots", action="store_true", help="do not redraw plots (a folder's)")
    rebuild.set_defaults(func=run_rebuild)

    changes = commands.add_parser(  # arguments and work in harness/commands/history_changes.py
        "changes", help=CHANGES_HELP, description=CHANGES_DESCRIPTION
    )
    add_history_location_arguments(changes, access="read")
    add_changes_arguments(changes)
    changes.set_defaults(func=_run_changes)

    init_db = commands.add_parser(
        "init-db",
        help=(
            "set up or migrate a PostgreSQL database as a history (evidence schema and "
            "index by their Alembic chains, insert-only triggers, writer role)"
        ),
    )
    init_db.add_argument("url", metavar="URL", help="postgresql+psycopg://OWNER@HOST/DB")
    init_db.add_argument(
        "--grant-to",
        action="append",
        default=[],
        metavar="USER",
        help="give this login the harness_writer role (SELECT and INSERT only); repeatable",
    )
    init_db.set_defaults(func=run_init_db)

    push = commands.add_parser(
        "push",
        help="copy a history folder's records and calibrations to a server (idempotent, hashes checked)",
    )
    push.add_argument("folder", metavar="FOLDER", help="history folder to copy from")
    push.add_argument("--history-url", required=True, metavar="URL", help="server to copy to")
    push.set_defaults(func=run_push)

    pull = commands.add_parser(
        "pull",
        help="copy a server's records and calibrations into a history folder (idempotent, validated)",
    )
    pull.add_argument("url", metavar="URL", help="server to copy from")
    pull.add_argument("--history-dir", required=True, metavar="H", help="folder to copy into")
    add_plot_policy_arguments(pull)
    pull.set_defaults(func=run_pull)
    parser.set_defaults(func=_missing_subcommand)


@contextmanager
def _record_progress(history, description: str) -> Iterator[Callable[[int], None] | None]:
    """A rich progress bar over the history's records on a TTY; nothing otherwise."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress

    total = history.count_records() if history.exists() else 0
    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(description, total=total)
        yield lambda advance: progress.update(task, advance=advance)


def _missing_subcommand(args: argparse.Namespace) -> int:
    raise UsageError(
        "history needs a subcommand: register, import, list, show, head, verify, rebuild, "
        "changes, publish, init-db, push or pull"
    )


def add_plot_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """``--plots {auto,now,defer}`` and its shorthand ``--defer-plots``."""
    from harness.render import PLOT_INLINE_RECORDS, PLOT_POLICIES

    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--plots",
        choices=PLOT_POLICIES,
        default="auto",
        help=(
            "redraw the plots of the groups that gained records: auto (default) while a "
            f"group holds at most {PLOT_INLINE_RECORDS} records, now (always), or defer "
            "(leave them pending for `harness render index`)"
        ),
    )
    group.add_argument(
        "--defer-plots",
        dest="plots",
        action="store_const",
        const="defer",
        help="same as --plots defer",
    )


def _check_plot_policy(history, plots: str) -> None:
    """``--plots``/``--defer-plots`` act on rendered files: refused where none are kept."""
    if plots != "auto" and not history.holds_rendered_files:
        raise UsageError(
            f"--plots/--defer-plots apply to a history folder; {history.where} holds no "
            "rendered files"
        )


def _print_registered(results: list) -> None:
    for result in results:
        print(result.message)
    if results:
        print(f"journal head {results[-1].journal_head}")


def _run_changes(args: argparse.Namespace) -> int:
    history = args.history
    return run_changes(args, history)


def run_register(args: argparse.Namespace) -> int:
    from harness.history.store import prepare_report
    from harness.render import registration_renderer

    history = args.history
    _check_plot_policy(history, args.plots)
    prepared = [prepare_report(report) for report in args.reports]  # all valid, or none
    _print_registered(history.register_reports(prepared, render=registration_renderer(args.plots)))
    return EXIT_OK


def run_import(args: argparse.Namespace) -> int:
    """The reports found under ``args.paths``, validated (``--skip-invalid``: the
    invalid ones listed), registered as ``register`` registers them."""
    from harness.history.importer import prepare_import
    from harness.render import registration_renderer

    history = args.history
    _check_plot_policy(history, args.plots)
    accepted, refused = prepare_import(args.paths, skip_invalid=args.skip_invalid)
    if accepted:
        _print_registered(
            history.register_reports(accepted, render=registration_renderer(args.plots))
        )
    for error in refused:
        print(f"refused: {error}", file=sys.stderr)
    return EXIT_FAILURE if refused else EXIT_OK


def run_list(args: argparse.Namespace) -> int:
    history = args.history
    rows = history.list_records(key=args.group, limit=args.limit)
    header = ("record", "created_utc", "revision", "device", "storage", "backend")
    header += ("correctness", "performance", "key", "purpose")
    table = [header] + [
        tuple(
            terminal_text(value)
            for value in (
                row.sha256[:12],
                row.created_utc,
                (row.git_revision or "unknown")[:10] + ("+" if row.git_dirty else ""),
                _one_line(row.device_name),
                _one_line(row.storage_id),
                row.backend,
                row.correctness,
                row.performance,
                row.comparison_key,
                _purpose(row.index_entry),
            )
        )
        for row in rows
    ]
    print_listing(table)
    return EXIT_OK


def _purpose(index_entry: str) -> str:
    """``calibration I/N`` for a run of ``harness calibrate``, else ``-``."""
    purpose = json.loads(index_entry).get("purpose") or {}
    if purpose.get("kind") == "calibration":
        return f"calibration {purpose['run']}/{purpose['runs']}"
    return "-"


def _one_line(text: str) -> str:
    """Report text on one line (a newline in a device name would break the columns)."""
    return " ".join(str(text).split())


def _print_record(doc: dict, sha256: str, path) -> int:
    from harness.comparability import comparison_key

    print = _print_terminal_safe  # every line holds report text: control characters escaped
    status = doc["status"]
    provenance = doc["provenance"]
    device = doc["environment"]["device"]
    conditions = doc["conditions"]
    print(f"record      {sha256}")
    print(f"path        {path}")
    print(f"created     {doc['created_utc']}")
    unverified = provenance.get("git_revision_verified") is False
    print(
        f"revision    {provenance['git_revision']}{' (dirty)' if provenance['git_dirty'] else ''}"
        f"{' (not the code that ran: its fingerprint differs)' if unverified else ''}"
    )
    print(f"device      {device['name']} ({device['kind']}, uuid {device['uuid']})")
    print(f"storage     {doc['environment']['storage']['storage_id']}")
    print(
        f"conditions  backend={conditions['backend']} representation={conditions['representation']} "
        f"boundary={conditions['timing_boundary']} allocator={conditions['allocator_policy']}"
    )
    print(f"key         {comparison_key(doc)}")
    print(
        f"status      execution={status['execution']} correctness={status['correctness']} "
        f"source={status['source_stability']} performance={status['performance']} exit={status['exit_code']}"
    )
    for failure in status["failures"]:
        print(f"failure     {failure}")
    if doc["baseline"]:
        print(f"baseline    {doc['baseline']['sha256']} {doc['baseline']['path'] or ''}")
    print()
    print(
        f"{'acquisition':<24} {'format':<6} {'cache':<7} {'kept/n':>7} {'median ms':>10} "
        f"{'p95 ms':>10}"
    )
    for s in doc["summaries"]:
        median = "-" if s["median"] is None else f"{s['median'] * 1e3:.2f}"
        p95 = "-" if s["p95"] is None else f"{s['p95'] * 1e3:.2f}"
        kept = f"{s['n_kept']}/{s['n']}"
        print(
            f"{s['acquisition']:<24} {s['format']:<6} {s['cache_state']:<7} {kept:>7} {median:>10} {p95:>10}"
        )
    return EXIT_OK


def _print_terminal_safe(line: str = "") -> None:
    """Print one line of report text with its control characters escaped."""
    builtins.print(terminal_text(line))


def run_show(args: argparse.Namespace) -> int:
    from harness.history.backend import load_reference
    from harness.history.lookup import parse_sha_prefix

    parse_sha_prefix(args.sha)
    history = args.history
    if args.raw:
        sys.stdout.buffer.write(history.read_checked(history.match_prefix(args.sha)))
        return EXIT_OK
    loaded = load_reference(history, args.sha)
    return _print_record(loaded.doc, loaded.sha256, loaded.path)


def run_head(args: argparse.Namespace) -> int:
    history = args.history
    if not history.exists():
        raise HistoryError(f"{history.where}: no such history folder")
    print(history.head())
    return EXIT_OK


def parse_head(text: str) -> str:
    """A journal head given on the command line: 64 hex digits."""
    from harness.history.layout import SHA256_PATTERN

    head = text.strip().lower()
    if not SHA256_PATTERN.fullmatch(head):
        raise UsageError(f"--expect-head {text!r} is not a journal head (64 hex digits)")
    return head


def run_verify(args: argparse.Namespace) -> int:
    from harness.render import check_rendered
    from harness.verdict.calibration_report import parse_calibration

    expect_head = parse_head(args.expect_head) if args.expect_head is not None else None
    history = args.history
    with _record_progress(history, "re-hashing records") as progress:
        result = history.verify(
            expect_head=expect_head,
            records_only=args.records_only,
            check_rendered=check_rendered,
            parse_calibration=lambda data, name: parse_calibration(data, name=name),
            progress=progress,
        )
    for line in result.errors:
        print(line, file=sys.stderr)
    for line in result.warnings:
        print(line)
    summary = (
        f"{result.records} records checked: {len(result.errors)} errors, "
        f"{len(result.warnings)} warnings"
    )
    if result.head is not None:
        summary += f"; journal head {result.head}"
    if expect_head is not None and result.ok:
        summary += f"; nothing registered up to {expect_head[:16]}... was removed or altered"
    print(summary)
    return EXIT_OK if result.ok else EXIT_FAILURE


def run_rebuild(args: argparse.Namespace) -> int:
    from harness.render import rebuild_renderer

    history = args.history
    if args.no_plots and not history.holds_rendered_files:
        raise UsageError(
            f"--no-plots applies to a history folder: {history.where} holds no rendered "
            "files (`harness render index --out DIR --history-url URL` draws them)"
        )
    with _record_progress(history, "reading records") as progress:
        result = history.rebuild(
            render=rebuild_renderer(plots=not args.no_plots), progress=progress
        )
    for line in result.errors:
        print(line, file=sys.stderr)
    for line in result.warnings:
        print(line)
    print(result.summary)
    return EXIT_FAILURE if result.errors else EXIT_OK


def run_init_db(args: argparse.Namespace) -> int:
    from harness.history.remote import init_database

    for line in init_database(args.url, grant_to=args.grant_to):
        print(line)
    return EXIT_OK


def run_push(args: argparse.Namespace) -> int:
    from harness.history.copying import copy_evidence

    with (
        opened_history(args.folder, read_only=True) as source,
        opened_history(args.history_url) as target,
    ):
        result = copy_evidence(source, target)
    print(
        f"pushed {result.copied} records ({result.present} already there) and "
        f"{result.calibrations_copied} calibrations ({result.calibrations_present} already "
        f"there); server journal head {result.head_to}"
    )
    return EXIT_OK


def run_pull(args: argparse.Namespace) -> int:
    from harness.history.copying import register_copies
    from harness.render import registration_renderer
    from harness.verdict.calibration_report import store_calibration

    with opened_history(args.url) as source, opened_history(args.history_dir) as target:
        result = register_copies(
            source,
            target,
            render=registration_renderer(args.plots),
            store_calibration=lambda data: store_calibration(target, data).created,
        )
    print(
        f"pulled {result.copied} records ({result.present} already there) and "
        f"{result.calibrations_copied} calibrations ({result.calibrations_present} already "
        f"there); folder journal head {result.head_to or '-'}"
    )
    return EXIT_OK
