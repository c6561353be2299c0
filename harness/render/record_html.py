"""Record pages as HTML strings, built without template overhead.

A history of 10,000 records has 10,000 record pages; through Jinja2 macros each took
about 10 ms (most of a full render), through these functions well under 1 ms. Every
string from the report passes through :func:`html.escape` (quotes included) in the
generic view and the rows, and through markupsafe's escape in the page's own text
(:class:`RecordPageHtml`), as Jinja2's autoescaping did when the page was a template.
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


#: The sections a record page shows in this order after the trials (then every other
#: field but ``command``, by name).
_SECTIONS = (
    ("acquisitions", "Acquisitions and product hashes"),
    ("conversion", "Conversion"),
    ("memory", "Memory"),
    ("conditions", "Conditions"),
    ("environment", "Environment"),
    ("provenance", "Provenance"),
    ("baseline", "Baseline"),
)
_SUMMARIES_HEAD = (
    '\n<h2 id="summaries">Summaries</h2>\n<table class="cells">\n<thead><tr><th>acquisition'
    "</th><th>format</th><th>cache</th><th>kept/n</th><th>first</th><th>median</th>"
    "<th>p95</th><th>min</th><th>max</th></tr></thead>\n<tbody>\n"
)
_TRIALS_HEAD = (
    '\n</tbody>\n</table>\n\n<h2 id="trials">Trials, with their cache-state evidence</h2>\n'
    '<p class="note">residency before: the fraction of the file\'s pages in the page cache'
    " before the trial; bytes read: what the process read from storage during it; the label"
    " is kept only when both agree with the intended cache state.</p>\n"
    '<table class="cells trials">\n<thead><tr><th>acquisition</th><th>format</th>'
    "<th>cache</th><th>trial</th><th>label</th><th>kept</th><th>time</th>"
    "<th>residency before</th><th>bytes read / file</th><th>stages</th>"
    "<th>product SHA-256</th></tr></thead>\n<tbody>\n"
)
_TRIALS_TAIL = "\n</tbody>\n</table>\n\n"


class RecordPageHtml:
    """Whole record pages as HTML text, without a template per page.

    Through the Jinja2 template a page took about 0.17 ms of its 0.45 ms in the template
    alone (100 generator steps, a call and an escape per value); here the page is one
    join. What stays in templates: the frame (``dashboard_base.html.j2``, rendered once
    here with markers for its blocks and split at them) and the comparison with the
    baseline (``dashboard_record_comparison.html.j2``, rendered only for a record that
    has one). Text outside ``value_html`` and the rows is escaped by markupsafe, as
    Jinja2's autoescaping escaped it (``&#34;``, ``&#39;`` for quotes).
    """

    _MARK = "\x00block\x00"

    def __init__(self, handled: frozenset[str], seconds: Callable[[Any], str]) -> None:
        from markupsafe import Markup

        from harness.templating import template_environment

        environment = template_environment()
        frame = environment.from_string(
            '{% extends "dashboard_base.html.j2" %}{% set assets = "../assets" %}'
            '{% set home = "../../index.html" %}'
            f"{{% block title %}}{self._MARK}{{% endblock %}}"
            f"{{% block crumbs %}}{self._MARK}{{% endblock %}}"
            f"{{% block main %}}{self._MARK}{{% endblock %}}"
        ).render()
        self._head, self._title_end, self._crumbs_end, self._tail = frame.split(self._MARK)
        self._comparison = environment.get_template("dashboard_record_comparison.html.j2")
        self._handled = handled
        self._seconds = seconds
        self._value = lambda item: Markup(value_html(item))

    def page(
        self,
        sha256: str,
        key: str,
        doc: Mapping[str, Any],
        comparison: Mapping[str, Any] | None,
        json_href: str,
        trial_rows: str,
        summary_rows: str,
    ) -> str:
        from markupsafe import escape

        from harness.templating import short_sha

        sha = str(escape(sha256))
        short = str(escape(short_sha(sha256)))
        key_text = str(escape(key))
        key_link = f'<a href="../keys/{key_text}.html"><code>{key_text}</code></a>'
        parts = [
            self._head,
            f"Record {short} · evidence history",
            self._title_end,
            f" › key {key_link} › record <code>{short}</code>",
            self._crumbs_end,
            f'<h1>Record <code class="sha">{sha}</code></h1>\n<p><a href="{escape(json_href)}">'
            "the record's JSON</a> (the evidence itself; this page is derived from it) · "
            f"{escape(doc['benchmark'])} · created {escape(doc['created_utc'])} · "
            f"comparison key {key_link}</p>\n"
            f'<p class="command"><code>{escape(" ".join(map(str, doc["command"])))}</code></p>\n'
            f'\n<h2 id="status">Status</h2>\n{value_html(doc["status"])}\n',
        ]
        if comparison:
            parts.append(
                self._comparison.render(
                    comparison=comparison, value=self._value, seconds=self._seconds
                )
            )
        parts += [_SUMMARIES_HEAD, summary_rows, _TRIALS_HEAD, trial_rows, _TRIALS_TAIL]
        for name, title in _SECTIONS:
            parts.append(f'<h2 id="{name}">{title}</h2>\n{value_html(doc[name])}\n')
        handled = self._handled
        for name, item in sorted(doc.items(), key=_name_ignoring_case):
            if name not in handled and name != "command":
                name_text = escape(name)
                parts.append(f'<h2 id="{name_text}">{name_text}</h2>\n{value_html(item)}\n')
        parts.append(self._tail)
        return "".join(parts)


def _name_ignoring_case(item: tuple[Any, Any]) -> Any:
    """Jinja2's ``dictsort`` order (case-insensitive by name; equal names keep their order)."""
    name = item[0]
    return name.lower() if isinstance(name, str) else name
