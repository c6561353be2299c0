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
    """``<tr>`` rows of the trials table: cache-state evidence, stages and product hash.

    One pass over the trials; what repeats across a record's trials (its few
    acquisitions, formats, labels, hashes, sizes and stage names) is escaped and
    formatted once.
    """
    rows = []
    identities: dict[tuple[Any, ...], tuple[str, ...]] = {}
    counts: dict[tuple[Any, Any], str] = {}
    stage_names: dict[Any, str] = {}
    for t in trials:
        stages = t.get("stages")
        if stages:
            parts = []
            # a mapping's names are distinct: sorting its items is sorting its names
            for name in sorted(stages):
                label = stage_names.get(name)
                if label is None:
                    label = stage_names[name] = text(name) + " "
                parts.append(label + seconds(stages[name]))
            stages = "; ".join(parts)
        else:
            stages = ""
        identity = (
            t["acquisition"], t["format"], t["cache_state"], t["label"],
            t.get("product_sha256") or "",
        )  # fmt: skip
        cells = identities.get(identity)
        if cells is None:
            cells = identities[identity] = tuple(text(value) for value in identity)
        acquisition, format_, cache_state, label, product = cells
        pair = (t.get("read_bytes"), t.get("file_bytes"))
        sizes = counts.get(pair)
        if sizes is None:
            sizes = counts[pair] = f"{_count(pair[0])} / {_count(pair[1])}"
        residency = t.get("residency_before")
        kept = t["kept"]
        rows.append(
            f'<tr class="{"" if kept else "lost"}">'
            f"<td>{acquisition}</td><td>{format_}</td>"
            f'<td>{cache_state}</td><td class="num">{int(t["trial_index"])}</td>'
            f"<td>{label}</td><td>{'kept' if kept else 'lost'}</td>"
            f'<td class="num">{seconds(t["seconds"])}</td>'
            f'<td class="num">{"-" if residency is None else f"{residency:.3f}"}</td>'
            f'<td class="num">{sizes}</td>'
            f"<td>{stages}</td>"
            f'<td><code class="sha">{product}</code></td></tr>'
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
