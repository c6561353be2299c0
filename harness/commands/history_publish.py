"""``harness history publish``: the results page generated from the claims and their records.

Hooked into ``harness history`` by ``harness/commands/history.py``. The claims file and
the page are described in :mod:`harness.render.claims` and
:mod:`harness.render.results_page`; ``--check`` compares the page on disk with what the
records give (CI runs it) and writes nothing.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from harness.errors import EXIT_FAILURE, EXIT_OK, UsageError

PUBLISH_HELP = "generate the published results page from the claims and their records"
PUBLISH_DESCRIPTION = (
    "Resolve every claim of CLAIMS (question, goal, record SHA-256, cell) against the "
    "records of the history folder and write the results page: per claim its figure, "
    "floor and ratio, goal, date, device, storage, source fingerprint, clean revision, "
    "the command that reproduces it and the record's SHA-256. --check compares the page "
    "on disk instead of writing it (exit 1 when they differ)."
)
DEFAULT_EVIDENCE_DIR = "docs/performance/evidence"
DEFAULT_CLAIMS = "docs/performance/claims.toml"
DEFAULT_PAGE = "docs/performance/results.md"


def _revision_checker(start: Path):
    """A claim's ``revision`` checked against a record's fingerprint in this checkout's git
    (None, with a warning, where git cannot say: no checkout, or a clone without it)."""
    from harness.run.git_state import collect_revision_hashes, fingerprint_of
    from harness.run.provenance import find_checkout

    checkout = find_checkout(start)

    def check(revision: str, fingerprint: str) -> bool | None:
        hashes = collect_revision_hashes(checkout, revision) if checkout is not None else None
        if hashes is None:
            print(
                f"harness: revision {revision[:12]} is not in a git checkout here: a claim "
                "naming it is not checked against its record's fingerprint",
                file=sys.stderr,
            )
            return None
        return fingerprint_of(hashes) == fingerprint

    return check


def add_publish_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--history-dir",
        default=DEFAULT_EVIDENCE_DIR,
        metavar="H",
        help=f"the evidence history folder (default {DEFAULT_EVIDENCE_DIR})",
    )
    parser.add_argument(
        "--claims",
        default=DEFAULT_CLAIMS,
        metavar="TOML",
        help=f"the claims file (default {DEFAULT_CLAIMS})",
    )
    parser.add_argument(
        "--out", default=DEFAULT_PAGE, metavar="PAGE", help=f"the page (default {DEFAULT_PAGE})"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when the page on disk differs from what the records give",
    )


def run_publish(args: argparse.Namespace) -> int:
    from harness.fsio import replace_file
    from harness.history.layout import HistoryLayout
    from harness.render.claims import parse_claims
    from harness.render.results_page import render_results_page

    history = Path(args.history_dir)
    if not HistoryLayout.at(history).marker.is_file():
        raise UsageError(f"--history-dir {history}: not a history folder (no history.json)")
    page = Path(args.out)
    text = render_results_page(
        parse_claims(args.claims),
        history,
        page,
        evidence_label=history.as_posix(),
        check_revision=_revision_checker(Path.cwd()),
    )
    if args.check:
        try:
            current = page.read_text(encoding="utf-8")
        except OSError as error:
            print(f"{page}: cannot read the page ({error.strerror})", file=sys.stderr)
            return EXIT_FAILURE
        if current != text:
            diff = difflib.unified_diff(
                current.splitlines(),
                text.splitlines(),
                f"{page} (on disk)",
                f"{page} (from the records)",
                lineterm="",
                n=1,
            )
            print("\n".join(list(diff)[:60]), file=sys.stderr)
            print(
                f"{page} differs from what the records give; run `harness history publish`",
                file=sys.stderr,
            )
            return EXIT_FAILURE
        print(f"{page} is what the records give")
        return EXIT_OK
    replace_file(page, text.encode(), step="writing the results page")
    print(f"wrote {page}")
    return EXIT_OK
