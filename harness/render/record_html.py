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
    parts: list[str] = []
    _append_value_html(value, parts.append)
    return "".join(parts)


def _leaf_html(value: Any) -> str | None:
    """:func:`value_html` of a string or a number; None for anything else."""
    kind = type(value)
    if kind is str:
        return _escaped(value)
    if kind is int or kind is float:
        return str(value)
    return None


def _append_value_html(value: Any, out: Callable[[str], None]) -> None:
    """:func:`value_html`'s pieces handed to ``out`` in order: one string per leaf of a
    table or list, not a joined string per nesting level (a record page's sections are
    a few hundred values)."""
    leaf = _leaf_html(value)
    if leaf is not None:
        out(leaf)
    elif isinstance(value, Mapping):
        out('<table class="nested">')
        for key in sorted(value):
            item = value[key]
            leaf = _leaf_html(item)
            if leaf is not None:
                out(f"<tr><th>{text(key)}</th><td>{leaf}</td></tr>")
            else:
                out(f"<tr><th>{text(key)}</th><td>")
                _append_value_html(item, out)
                out("</td></tr>")
        out("</table>")
    elif isinstance(value, (list, tuple)):
        if not value:
            out('<span class="none">none</span>')
            return
        out('<ol class="list">')
        for item in value:
            leaf = _leaf_html(item)
            if leaf is not None:
                out(f"<li>{leaf}</li>")
            else:
                out("<li>")
                _append_value_html(item, out)
                out("</li>")
        out("</ol>")
    elif value is None:
        out('<span class="none">null</span>')
    elif value is True:
        out("true")
    elif value is False:
        out("false")
    else:
        out(text(value))


def _count(value: Any) -> str:
    return "-" if value is None else f"{int(value):,}"


def trial_rows_html(trials: list[Mapping[str, Any]], seconds: Callable[[Any], str]) -> str:
    """``<tr>`` rows of the trials table: cache-state evidence, stages and product hash.

    One pass over the trials. What repeats across a record's trials is formatted once
    a page: the cells before and after each trial's numbers for its (acquisition,
    format, cache state, label, kept, product hash), escaped; its sizes; the labels of
    a set of stage names. What is left per trial is its index and
    :func:`seconds` of its time and stages (100,000 pages of 40 trials are most of a
    first render's CPU: ``docs/performance/results.md``, "render9").
    """
    rows = []
    cells: dict[tuple[Any, ...], tuple[str, str, str]] = {}
    counts: dict[tuple[Any, Any], str] = {}
    stage_labels: dict[tuple[Any, ...], tuple[tuple[Any, str], ...]] = {}
    for t in trials:
        get = t.get
        stages = get("stages")
        if stages:
            # a mapping's names are distinct: sorting its items is sorting its names
            names = tuple(sorted(stages))
            labels = stage_labels.get(names)
            if labels is None:
                labels = stage_labels[names] = tuple((name, text(name) + " ") for name in names)
            stages = "; ".join([label + seconds(stages[name]) for name, label in labels])
        else:
            stages = ""
        identity = (
            t["acquisition"], t["format"], t["cache_state"], t["label"],
            get("product_sha256") or "", t["kept"],
        )  # fmt: skip
        parts = cells.get(identity)
        if parts is None:
            acquisition, format_, cache_state, label, product = (
                text(value) for value in identity[:5]
            )
            kept = identity[5]
            parts = cells[identity] = (
                f'<tr class="{"" if kept else "lost"}">'
                f"<td>{acquisition}</td><td>{format_}</td>"
                f'<td>{cache_state}</td><td class="num">',
                f'</td><td>{label}</td><td>{"kept" if kept else "lost"}</td><td class="num">',
                f'</td><td><code class="sha">{product}</code></td></tr>',
            )
        head, middle, tail = parts
        pair = (get("read_bytes"), get("file_bytes"))
        sizes = counts.get(pair)
        if sizes is None:
            sizes = counts[pair] = f"{_count(pair[0])} / {_count(pair[1])}"
        residency = get("residency_before")
        residency = "-" if residency is None else f"{residency:.3f}"
        rows.append(
            f'{head}{int(t["trial_index"])}{middle}{seconds(t["seconds"])}</td><td class="num">'
            f'{residency}</td><td class="num">{sizes}</td><td>{stages}{tail}'
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
