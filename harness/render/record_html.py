"""The heavy parts of a record page as HTML strings, built without template overhead.

A history of 10,000 records has 10,000 record pages; through Jinja2 macros each took
about 10 ms (most of a full render), through these functions well under 1 ms. Every
string from the report passes through :func:`html.escape` (quotes included) here, as
Jinja2's autoescaping does for the rest of the page.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from html import escape
from typing import Any


def text(value: Any) -> str:
    return escape(str(value), quote=True)


def value_html(value: Any) -> str:
    """Any JSON value as nested tables and lists (the generic view of a report section)."""
    if isinstance(value, Mapping):
        rows = "".join(
            f"<tr><th>{text(key)}</th><td>{value_html(value[key])}</td></tr>"
            for key in sorted(value)
        )
        return f'<table class="nested">{rows}</table>'
    if isinstance(value, (list, tuple)):
        if not value:
            return '<span class="none">none</span>'
        return '<ol class="list">' + "".join(f"<li>{value_html(v)}</li>" for v in value) + "</ol>"
    if value is None:
        return '<span class="none">null</span>'
    if value is True:
        return "true"
    if value is False:
        return "false"
    return text(value)


def _count(value: Any) -> str:
    return "-" if value is None else f"{int(value):,}"


def trial_rows_html(trials: list[Mapping[str, Any]], seconds: Callable[[Any], str]) -> str:
    """``<tr>`` rows of the trials table: cache-state evidence, stages and product hash."""
    rows = []
    for t in trials:
        stages = "; ".join(
            f"{text(name)} {seconds(stage)}"
            for name, stage in sorted((t.get("stages") or {}).items())
        )
        residency = t.get("residency_before")
        rows.append(
            f'<tr class="{"" if t["kept"] else "lost"}">'
            f"<td>{text(t['acquisition'])}</td><td>{text(t['format'])}</td>"
            f'<td>{text(t["cache_state"])}</td><td class="num">{int(t["trial_index"])}</td>'
            f"<td>{text(t['label'])}</td><td>{'kept' if t['kept'] else 'lost'}</td>"
            f'<td class="num">{seconds(t["seconds"])}</td>'
            f'<td class="num">{"-" if residency is None else f"{residency:.3f}"}</td>'
            f'<td class="num">{_count(t.get("read_bytes"))} / {_count(t.get("file_bytes"))}</td>'
            f"<td>{stages}</td>"
            f'<td><code class="sha">{text(t.get("product_sha256") or "")}</code></td></tr>'
        )
    return "\n".join(rows)


def summary_rows_html(summaries: list[Mapping[str, Any]], seconds: Callable[[Any], str]) -> str:
    return "\n".join(
        f"<tr><td>{text(s['acquisition'])}</td><td>{text(s['format'])}</td>"
        f'<td>{text(s["cache_state"])}</td><td class="num">{s["n_kept"]}/{s["n"]}</td>'
        + "".join(
            f'<td class="num">{seconds(s[k])}</td>'
            for k in ("first", "median", "p95", "min", "max")
        )
        + "</tr>"
        for s in summaries
    )
