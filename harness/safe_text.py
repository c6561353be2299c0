"""Report text made inert for a terminal and for Markdown: control characters escaped.

A report's strings (storage ids, acquisition ids, device names, failures) pass the schema
whatever characters they hold, so a crafted one could carry terminal control sequences
(ESC ``]0;`` sets the window title, ESC ``[2J`` clears the screen), a carriage return
that overwrites what was printed, a newline that fakes a table row, or a bidirectional
override that reorders what is shown. Every such character is written as a visible
escape (``\\x1b``, ``\\r``, ``\\n``, ``\\u202e``), so the text prints as one inert line
and the reader sees that it was there. HTML views escape through Jinja2 as before.
"""

from __future__ import annotations

import re

#: C0 controls (newline, CR and tab included), DEL, C1 controls; Unicode line and
#: paragraph separators; the bidirectional embeddings, overrides and isolates.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def terminal_text(value: object) -> str:
    """``value`` as one line with every control character escaped (None: empty).

    A backslash already in the text is left as it is: the escapes are for a reader, not
    a parser, and doubling every backslash would garble Windows paths.
    """
    text = "" if value is None else value if type(value) is str else str(value)
    return _CONTROL.sub(_escape, text)


def has_control(value: object) -> bool:
    """Whether ``value``'s text holds a character :func:`terminal_text` escapes."""
    return _CONTROL.search("" if value is None else str(value)) is not None


__all__ = ["has_control", "terminal_text"]
