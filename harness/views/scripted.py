"""Output for scripts: ``--json`` (one JSON document on stdout, nothing else) and
``--quiet`` (one line: the record's SHA-256 and its verdict).

The human output of a command goes to stderr in those modes (``human_console``), so
stdout stays parseable while a person watching still sees what happened.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from harness.views.console import make_console

#: The verdict of a report that has no baseline comparison, by its exit code.
_VERDICT_BY_EXIT = {0: "pass", 1: "failed", 2: "review", 64: "usage"}


def add_output_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """``--json`` and ``-q/--quiet`` (mutually exclusive), documented for ``what``."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--json",
        action="store_true",
        help=f"print {what} as JSON on stdout and nothing else (the rest goes to stderr)",
    )
    group.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="print one line on stdout: the record's SHA-256 and its verdict",
    )


def output_mode(args: argparse.Namespace) -> str | None:
    """``"json"``, ``"quiet"`` or ``None`` (output for people)."""
    if getattr(args, "json", False):
        return "json"
    if getattr(args, "quiet", False):
        return "quiet"
    return None


def human_console(args: argparse.Namespace) -> Any:
    """The console for people: stdout, or stderr when stdout is for a script."""
    return make_console(stderr=output_mode(args) is not None)


def report_verdict(doc: dict) -> str:
    """A report's verdict in one word: its comparison's, else what its exit code means."""
    comparison = doc.get("comparison") or {}
    if comparison.get("verdict"):
        return str(comparison["verdict"])
    return _VERDICT_BY_EXIT.get(doc["status"]["exit_code"], str(doc["status"]["exit_code"]))


def quiet_line(sha256: str, verdict: str) -> str:
    return f"{sha256} {verdict}"


def print_json(document: Any) -> None:
    """``document`` (a dict, or JSON text or bytes) as one JSON document on stdout."""
    if isinstance(document, bytes):
        document = document.decode("utf-8")
    if not isinstance(document, str):
        document = json.dumps(document, sort_keys=True, indent=1, allow_nan=False, default=str)
    sys.stdout.write(document.rstrip("\n") + "\n")
    sys.stdout.flush()


def say(message: str, args: argparse.Namespace) -> None:
    """A line for people: stdout, or stderr when stdout is for a script."""
    script = output_mode(args) is not None or getattr(args, "format", None) == "json"
    print(message, file=sys.stderr if script else sys.stdout, flush=True)
