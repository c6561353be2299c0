"""Jinja2 environment for rendered evidence: HTML autoescaped, Markdown escaped by filter.

Text taken from reports (acquisition ids, storage ids, device names) is untrusted:
HTML templates (``*.html.j2``) autoescape everything, and Markdown templates pass
such text through the ``md`` filter (:func:`escape_markdown`), so a crafted id
cannot add links, emphasis, table cells or raw HTML.
"""

from __future__ import annotations

import functools
import re

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from harness.resources import data_folder
from harness.safe_text import terminal_text

TEMPLATES_DIR = data_folder("reports_templates")

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]|~#!])")


def escape_markdown(value: object) -> str:
    """Render ``value`` as inert Markdown text (one line, no markup, no raw HTML, no
    terminal control character: a README is often read with ``cat``)."""
    text = "" if value is None else str(value)
    text = " ".join(text.split())  # newlines and tabs would end a table row or start a block
    text = terminal_text(text)  # ESC, BEL, C1 and bidi controls, shown as escapes
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def short_sha(value: str | None, digits: int = 12) -> str:
    return "" if not value else value[:digits]


@functools.cache
def template_environment() -> Environment:
    environment = Environment(
        loader=FileSystemLoader(str(TEMPLATES_DIR)),
        autoescape=lambda name: bool(name) and name.endswith(".html.j2"),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["md"] = escape_markdown
    environment.filters["short"] = short_sha
    return environment


def render_template(name: str, **context: object) -> str:
    return template_environment().get_template(name).render(**context)
