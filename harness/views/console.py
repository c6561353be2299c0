"""Consoles and plain lines that are never wrapped inside a word.

Off a terminal rich wraps at 80 columns, which cut SHA-256 digests and paths across lines
(``grep stored`` then missed them); every line here is printed with ``soft_wrap`` so that
only a terminal, if anything, folds it on screen, and report text is never read as markup.
"""

from __future__ import annotations

from typing import Any

from harness.safe_text import terminal_text


def make_console(*, stderr: bool = False, file: Any = None) -> Any:
    """A rich console whose prints are soft-wrapped (never broken inside a hash or path)."""
    from rich.console import Console

    return Console(stderr=stderr, file=file, soft_wrap=True)


def print_line(console: Any, text: Any, style: str | None = None) -> None:
    """One line, unwrapped, as plain text with control characters escaped (a
    :class:`rich.text.Text` is ours and keeps its styles)."""
    if isinstance(text, str):
        text = terminal_text(text)
    console.print(text, markup=False, highlight=False, soft_wrap=True, style=style)
