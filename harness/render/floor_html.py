"""The record page's floor table: each cell's floor, its method and ``ratio_to_floor``.

Built from the record's ``floors`` section (``harness run io-scale --floors``); every
value from the record is escaped here, as in :mod:`harness.render.record_html`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from harness.render.record_html import text


def floor_rows_html(floors: Mapping[str, Any] | None, seconds: Callable[[Any], str]) -> str:
    """One ``<tr>`` per floor cell (empty without a ``floors`` section)."""
    if not floors:
        return ""
    rows = []
    for c in floors.get("cells", []):
        ratio = c.get("ratio_to_floor")
        status = text(c.get("status"))
        rows.append(
            f"<tr><td>{text(c['acquisition'])}</td><td>{text(c['format'])}</td>"
            f"<td>{text(c['cache_state'])}</td><td>{text(c.get('staging') or '-')}</td>"
            f'<td class="num">{seconds(c.get("load_median"))}</td>'
            f'<td class="num">{seconds(c.get("floor_seconds"))}</td>'
            f"<td><code>{text(c.get('method') or '-')}</code></td>"
            f'<td class="num">{"-" if ratio is None else f"{ratio:.2f}x"}</td>'
            f'<td class="floor-{status}">{status}</td></tr>'
        )
    return "\n".join(rows)
