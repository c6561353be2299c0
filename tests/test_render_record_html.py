"""The record page's HTML pieces (``harness.render.record_html``) against plain reference
builders: one f-string per trial and nested joins, each value escaped where it is shown.

The page's builder formats what repeats across a record's trials once (the escaped cells
of a trial's identity, its sizes, the labels of its stage names); these tests give it
trials where a cached piece could be reused wrongly (the same identity kept and lost,
the same names with other sizes, stages or product hash, text that needs escaping,
missing optional fields, -0.0 and 0.0), so a faster builder must give the same bytes.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from html import escape
from typing import Any

import pytest

from harness.render.pages import format_seconds
from harness.render.record_html import trial_rows_html, value_html


def _text(value: Any) -> str:
    return escape(str(value), quote=True)


def _count(value: Any) -> str:
    return "-" if value is None else f"{int(value):,}"


def reference_trial_rows(trials: list[Mapping[str, Any]]) -> str:
    rows = []
    for t in trials:
        stages = t.get("stages")
        stages = (
            "; ".join(f"{_text(n)} {format_seconds(stages[n])}" for n in sorted(stages))
            if stages
            else ""
        )
        residency = t.get("residency_before")
        kept = t["kept"]
        rows.append(
            f'<tr class="{"" if kept else "lost"}">'
            f"<td>{_text(t['acquisition'])}</td><td>{_text(t['format'])}</td>"
            f'<td>{_text(t["cache_state"])}</td><td class="num">{int(t["trial_index"])}</td>'
            f"<td>{_text(t['label'])}</td><td>{'kept' if kept else 'lost'}</td>"
            f'<td class="num">{format_seconds(t["seconds"])}</td>'
            f'<td class="num">{"-" if residency is None else f"{residency:.3f}"}</td>'
            f'<td class="num">{_count(t.get("read_bytes"))} / {_count(t.get("file_bytes"))}</td>'
            f"<td>{stages}</td>"
            f'<td><code class="sha">{_text(t.get("product_sha256") or "")}</code></td></tr>'
        )
    return "\n".join(rows)


def reference_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return '<span class="none">null</span>'
    if isinstance(value, Mapping):
        rows = "".join(
            f"<tr><th>{_text(k)}</th><td>{reference_value(value[k])}</td></tr>"
            for k in sorted(value)
        )
        return f'<table class="nested">{rows}</table>'
    if isinstance(value, list | tuple):
        if not value:
            return '<span class="none">none</span>'
        return (
            '<ol class="list">' + "".join(f"<li>{reference_value(v)}</li>" for v in value) + "</ol>"
        )
    return _text(value)


NAMES = ["scan-a", "a&b", "<x>", 'q"uote', "it's", "é ü", "plain"]


def _trial(rng: random.Random, index: int) -> dict[str, Any]:
    trial: dict[str, Any] = {
        "acquisition": rng.choice(NAMES[:3]),
        "format": rng.choice(["hdf5", "qem", "<fmt>"]),
        "cache_state": rng.choice(["cold", "warm"]),
        "label": rng.choice(["cold", "warm", "lost&found"]),
        "kept": rng.choice([True, False, 1, 0]),
        "trial_index": index,
        "seconds": rng.choice([0.0, 1e-7, 0.0123456, 0.09999, 0.1, 0.5, 0.99999, 1.0, 12.5]),
    }
    if rng.random() < 0.8:
        trial["residency_before"] = rng.choice([0.0, -0.0, 1.0, 0.123456, 1])
    if rng.random() < 0.8:
        trial["read_bytes"] = rng.choice([0, 2_000_000, 123])
        trial["file_bytes"] = rng.choice([2_000_000, 5])
    if rng.random() < 0.8:
        trial["product_sha256"] = rng.choice(["ab" * 32, "", "<sha>", None])
    if rng.random() < 0.7:
        names = rng.sample(["read", "decode", "a&b stage", "z"], rng.randint(0, 3))
        trial["stages"] = {name: rng.choice([0.5, 0.001, 2.25, 0.0]) for name in names}
    return trial


@pytest.mark.parametrize("seed", range(6))
def test_trial_rows_are_the_reference_rows(seed: int) -> None:
    rng = random.Random(seed)
    trials = [_trial(rng, i) for i in range(60)]
    # the same identity, kept and then lost, with other numbers
    twin = dict(trials[0], kept=not trials[0]["kept"], seconds=3.5, trial_index=99)
    trials += [twin, dict(trials[0])]
    assert trial_rows_html(trials, format_seconds) == reference_trial_rows(trials)


def test_trial_rows_do_not_reuse_a_neighbour_s_cells() -> None:
    base = {"acquisition": "a", "format": "f", "cache_state": "cold", "label": "cold",
            "trial_index": 0, "seconds": 0.5, "kept": True}  # fmt: skip
    trials = [
        dict(base, residency_before=0.0),
        dict(base, residency_before=-0.0, kept=False),
        dict(base, product_sha256="p1", read_bytes=1, file_bytes=2, stages={"b": 1.0, "a": 2.0}),
        dict(base, product_sha256="p2", read_bytes=1, file_bytes=3, stages={"a": 0.1}),
    ]
    html = trial_rows_html(trials, format_seconds)
    assert html == reference_trial_rows(trials)
    rows = html.split("\n")
    assert "0.000" in rows[0] and "-0.000" in rows[1] and 'class="lost"' in rows[1]
    assert "p1" in rows[2] and "p2" in rows[3] and "a 2.000 s; b 1.000 s" in rows[2]
    assert "1 / 2" in rows[2] and "1 / 3" in rows[3] and "- / -" in rows[0]


SECTIONS = [
    {},
    [],
    None,
    True,
    False,
    0,
    -3.5e-07,
    "a&b",
    {"z": 1, "a": [1, "<b>", None, [], {}], "m": {"x": True, "y": {"deep": ["it's"]}}},
    [{"k": "v"}, [[]], ("t", 2)],
    {'quote"key': 'say "hi"', "n": float("inf")},
]


@pytest.mark.parametrize("value", SECTIONS, ids=range(len(SECTIONS)))
def test_value_html_is_the_reference_html(value: Any) -> None:
    assert value_html(value) == reference_value(value)
