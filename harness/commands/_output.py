"""How ``compare`` and ``recheck`` print a comparison for people or for scripts."""

from __future__ import annotations

import argparse
from typing import Any

from harness.verdict.present import print_comparison
from harness.views.scripted import output_mode, quiet_line


def show_comparison(comparison: Any, args: argparse.Namespace, sha256: str | None) -> None:
    """A comparison as ``--json``, ``--quiet`` (``sha256``: the record it judges) or
    ``args.format`` (text on a terminal, else Markdown)."""
    mode = output_mode(args)
    if mode == "quiet":
        print(quiet_line(sha256 or "-", comparison.verdict.value), flush=True)
    else:
        print_comparison(comparison, "json" if mode == "json" else args.format)
