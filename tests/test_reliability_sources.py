"""docs/reliability.md's table of damaged-source cases is what the cases produce now.

The cases (tests/_source_cases.py) damage a small ARINA acquisition (chunk bit flips
before and after the first indexing, with and without the manifest check; shard link
mix-ups; the files of issue 39's defect 9) and count each try as caught, silent wrong,
crash or lost. Regenerate the table with ``python tests/_source_cases.py --write``.
"""

from __future__ import annotations

import pytest
from _source_cases import DOC, committed_table, render, run_cases


@pytest.mark.slow
def test_committed_table_is_what_the_cases_produce():
    committed = committed_table(DOC.read_text())
    assert committed is not None, f"{DOC} has no generated source-damage table"
    results = run_cases()
    assert render(results) == committed, "run: python tests/_source_cases.py --write"
    by_name = dict(results)
    # The guarantees the table shows, stated so a change that breaks one fails here too.
    for name, tally in results:
        assert tally.crash == 0 and tally.lost == 0, name
    assert by_name["chunk bit flip after the first indexing, default load"].caught == 12
    for name, tally in results:
        if "manifest check" in name or "flip" not in name:
            assert tally.caught == tally.tried, name
