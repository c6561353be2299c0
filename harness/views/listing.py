"""A listing of records: aligned columns, or one line per record on a narrow terminal.

Off a terminal the columns are always aligned plain text, one line per record with a
header (scripts read it); on a terminal narrower than those lines, each record is one
line of ``name value`` fields folded between fields, so no value is ever cut.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence


def aligned_lines(table: Sequence[Sequence[str]]) -> list[str]:
    """Every column as wide as its widest value: nothing is cut, columns stay aligned."""
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    return [
        "  ".join(value.ljust(width) for value, width in zip(line, widths)).rstrip()
        for line in table
    ]


def folded_lines(table: Sequence[Sequence[str]], width: int) -> list[str]:
    """Each row as ``first: name value  name value``, continued on indented lines."""
    header, *rows = table
    lines = []
    for row in rows:
        line = f"{row[0]}:"
        for name, value in zip(header[1:], row[1:]):
            token = f"{name} {value}"
            if len(line) + 2 + len(token) > width and line.strip():
                lines.append(line)
                line = "    " + token
            else:
                line += (" " if line.endswith(":") else "  ") + token
        lines.append(line)
    return lines


def print_listing(table: Sequence[Sequence[str]], *, stream=None, width: int | None = None) -> None:
    """Print ``table`` (header first) aligned, or folded on a narrower terminal."""
    stream = stream or sys.stdout
    lines = aligned_lines(table)
    is_terminal = hasattr(stream, "isatty") and stream.isatty()
    if width is None:
        width = shutil.get_terminal_size().columns
    if is_terminal and len(table) > 1 and max(map(len, lines)) > width:
        lines = folded_lines(table, width)
    for line in lines:
        print(line, file=stream)
