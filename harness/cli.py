"""The ``harness`` command-line entry point.

Errors become exit codes here and only here: a ``HarnessError`` exits with its
``exit_code``; a ``QuantemError`` (bad input) exits 1; usage errors exit 64. Each
prints one line on stderr, without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from harness.commands.history import opened_for_command
from harness.errors import EXIT_FAILURE, EXIT_USAGE, HarnessError


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on usage errors; ours must exit 64 (2 means 'review')."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    from harness.commands import COMMAND_MODULES

    parser = _Parser(prog="harness", description="quantem benchmark-and-evidence harness")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # a command not written yet
                continue
            raise
        module.add_parser(subparsers)
    return parser


def _version() -> str:
    """The installed distribution's version (the source tree's when not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("quantem-harness")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _quiet_closed_stdout() -> int:
    """stdout was closed by the reader (``harness history list | head``): exit quietly.

    Python would print a BrokenPipeError traceback at exit while flushing; point stdout
    at /dev/null so that flush succeeds, and exit with the usual status for SIGPIPE.
    """
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + 13  # what a shell reports for a process ended by SIGPIPE


def main(argv: Sequence[str] | None = None) -> int:
    from quantem.stem4d.errors import QuantemError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        # the one place a command's history is opened (harness.history.opening)
        with opened_for_command(args):
            status = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below
        return status
    except BrokenPipeError:
        return _quiet_closed_stdout()
    except HarnessError as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return exc.exit_code
    except QuantemError as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except ModuleNotFoundError as exc:  # an install without one of the declared dependencies
        print(
            f"harness: the package {exc.name!r} cannot be imported ({exc}); install "
            "quantem-harness with its dependencies (README, Install)",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    except OSError as exc:  # unreadable or missing files the commands did not wrap
        print(f"harness: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("harness: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
