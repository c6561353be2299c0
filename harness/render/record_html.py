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


def _escaped(value: str) -> str:
    """:func:`html.escape` (quotes included), skipped for text with none of ``&<>"'`` (most
    of a report: numbers, hashes, ids): the same string, in 95-135 ns instead of 200-380 ns
    here, for the thousands of strings of each record page."""
    if "&" in value or "<" in value or ">" in value or '"' in value or "'" in value:
        return escape(value, quote=True)
    return value


def text(value: Any) -> str:
    return _escaped(value if type(value) is str else str(value))


def value_html(value: Any) -> str:
    """Any JSON value as nested tables and lists (the generic view of a report section)."""
    kind = type(value)
    if kind is str:
        return _escaped(value)
    if kind is int or kind is float:
        return str(value)  # digits, signs, '.', 'e', 'inf', 'nan': nothing to escape
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
    # the few distinct ids, formats, labels, hashes and sizes of a record, formatted once
    escaped: dict[str, str] = {}
    counts: dict[tuple[Any, Any], str] = {}

    def cached(value: Any) -> str:
        if type(value) is not str:
            return text(value)
        found = escaped.get(value)
        if found is None:
            found = escaped[value] = text(value)
        return found

    def sizes(read: Any, total: Any) -> str:
        pair = (read, total)
        found = counts.get(pair)
        if found is None:
            found = counts[pair] = f"{_count(read)} / {_count(total)}"
        return found

    for t in trials:
        stages = "; ".join(
            f"{cached(name)} {seconds(stage)}"
            for name, stage in sorted((t.get("stages") or {}).items())
        )
        residency = t.get("residency_before")
        rows.append(
            f'<tr class="{"" if t["kept"] else "lost"}">'
            f"<td>{cached(t['acquisition'])}</td><td>{cached(t['format'])}</td>"
            f'<td>{cached(t["cache_state"])}</td><td class="num">{int(t["trial_index"])}</td>'
            f"<td>{cached(t['label'])}</td><td>{'kept' if t['kept'] else 'lost'}</td>"
            f'<td class="num">{seconds(t["seconds"])}</td>'
            f'<td class="num">{"-" if residency is None else f"{residency:.3f}"}</td>'
            f'<td class="num">{sizes(t.get("read_bytes"), t.get("file_bytes"))}</td>'
            f"<td>{stages}</td>"
            f'<td><code class="sha">{cached(t.get("product_sha256") or "")}</code></td></tr>'
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
