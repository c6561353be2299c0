"""Per-cell results as a table where it fits, else one line per cell (pyperf style).

A table cut to a narrow console loses exactly what matters (``acq…``, ``+3…``); here a
table is drawn only on a terminal wide enough for it uncut. Elsewhere (80 columns, pipes,
CI logs) each cell is one line: its identity (acquisition, format, cache) then
``name value`` fields in priority order, continued on indented lines between fields when
the line is too long, so no value is ever truncated or split.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.safe_text import terminal_text

#: Indent of a cell's continuation lines in the line layout.
CONTINUATION = "    "


@dataclass
class CellView:
    """Rows of per-cell values: ``keys`` name each cell, ``values`` are shown beside it.

    ``columns`` holds the headers of ``keys`` then ``values`` (units in the header, one
    unit per table); ``line_order`` lists the value headers in the order the line layout
    shows them (default: as in the table); ``right`` the headers justified right.
    """

    key_columns: tuple[str, ...]
    value_columns: tuple[str, ...]
    rows: list[tuple[tuple[Any, ...], tuple[Any, ...]]] = field(default_factory=list)
    title: str | None = None
    line_order: tuple[str, ...] | None = None
    right: frozenset[str] = frozenset()
    #: value headers whose name the line layout leaves out (the value says it: a verdict)
    bare: frozenset[str] = frozenset()

    def add_row(self, keys: tuple[Any, ...], values: tuple[Any, ...]) -> None:
        if len(keys) != len(self.key_columns) or len(values) != len(self.value_columns):
            raise ValueError("a row must have one value per column")
        self.rows.append((tuple(keys), tuple(values)))


def _text(value: Any) -> Any:
    """A cell as rich text: ours (a Text) as is, anything else as one inert line."""
    from rich.text import Text

    if isinstance(value, Text):
        return value
    return Text(terminal_text(value))


def build_table(view: CellView) -> Any:
    """The view as a rich table whose cells never wrap (it is only drawn where it fits)."""
    from rich.table import Table
    from rich.text import Text

    title = None if view.title is None else Text(terminal_text(view.title))
    table = Table(title=title, title_justify="left")
    for column in (*view.key_columns, *view.value_columns):
        table.add_column(column, justify="right" if column in view.right else "left", no_wrap=True)
    for keys, values in view.rows:
        table.add_row(*(_text(v) for v in (*keys, *values)))
    return table


def cell_lines(view: CellView, width: int) -> list[Any]:
    """The line layout: one line per cell, folded between fields past ``width`` columns."""
    from rich.text import Text

    order = view.line_order or view.value_columns
    position = {name: i for i, name in enumerate(view.value_columns)}
    lines: list[Text] = []
    if view.title is not None:
        lines.append(Text(terminal_text(view.title)))
    for keys, values in view.rows:
        line = Text(" ".join(_text(k).plain for k in keys) + ":")
        for name in order:
            value = _text(values[position[name]])
            if not value.plain:
                continue
            token = value if name in view.bare else Text(f"{name} ").append_text(value)
            if line.cell_len + 2 + token.cell_len > width and line.plain.strip():
                lines.append(line)
                line = Text(CONTINUATION)
                line.append_text(token)
            else:
                line.append(
                    ("  " if not line.plain.endswith(":") else " ") if line.plain.strip() else ""
                )
                line.append_text(token)
        lines.append(line)
    return lines


def fits(console: Any, renderable: Any) -> bool:
    """Whether ``renderable`` fits ``console`` uncut, and ``console`` is a terminal."""
    if not console.is_terminal:
        return False
    unlimited = console.options.update_width(100_000)
    return console.measure(renderable, options=unlimited).maximum <= console.width


def print_cells(console: Any, view: CellView, *, layout: str | None = None) -> str:
    """Print ``view`` as a table where it fits (``layout``: force "table" or "lines");
    returns the layout used."""
    from harness.views.console import print_line

    table = build_table(view)
    if layout is None:
        layout = "table" if fits(console, table) else "lines"
    if layout == "table":
        console.print(table)
    else:
        for line in cell_lines(view, console.width):
            print_line(console, line)
    return layout
