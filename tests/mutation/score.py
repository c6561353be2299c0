"""The mutation score per module of a mutmut run, with the survivors' kills and equivalents.

Reads the run's results (``mutants/**/*.meta`` in MUTMUT_DIR), the kill lists (lines
``MUTANT TEST[,TEST...]``, each kill shown by show_kills.py) and the equivalents lists
(lines ``MUTANT REASON``), and prints a Markdown table::

    python tests/mutation/score.py --mutmut-dir /tmp/mut-reader \\
        --kills tests/mutation/arina-kills.txt --equivalents tests/mutation/arina-equivalents.txt

Columns: tested (every mutant with a result), killed as run (killed, timed out or
crashed), survived, not reached (no result: the run did not get to it), score as run
(killed / tested), equivalent and killed by the new tests (survivors of the run in the
lists), left (survivors in neither list), and the score with the new tests:
(killed + killed by new tests) / (tested - equivalent). ``--mutants GLOB...`` counts only
the mutants whose names match (as ``mutmut run`` selects them), for a run over some
functions of a module.
"""

from __future__ import annotations

import argparse
import collections
import fnmatch
import json
from pathlib import Path

SURVIVED = 0
NO_TESTS = 33


def listed(paths: list[Path]) -> set[str]:
    names = set()
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                names.add(line.split()[0])
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutmut-dir", type=Path, required=True)
    parser.add_argument("--kills", type=Path, nargs="*", default=[])
    parser.add_argument("--equivalents", type=Path, nargs="*", default=[])
    parser.add_argument("--mutants", nargs="*", default=["*"], help="name globs to count")
    args = parser.parse_args(argv)
    kills, equivalents = listed(args.kills), listed(args.equivalents)
    rows = []
    total = collections.Counter()
    for meta in sorted((args.mutmut_dir / "mutants").rglob("*.meta")):
        codes = {
            name: code
            for name, code in json.loads(meta.read_text())["exit_code_by_key"].items()
            if any(fnmatch.fnmatchcase(name, glob) for glob in args.mutants)
        }
        if not codes:
            continue
        row = collections.Counter(mutants=len(codes))
        for name, code in codes.items():
            if code is None:
                row["not reached"] += 1
            elif code == NO_TESTS:
                row["no tests"] += 1
            elif code == SURVIVED:
                row["tested"] += 1
                row["survived"] += 1
                if name in equivalents:
                    row["equivalent"] += 1
                elif name in kills:
                    row["new kills"] += 1
                else:
                    row["left"] += 1
            else:
                row["tested"] += 1
                row["killed"] += 1
        rows.append((meta.name.removesuffix(".meta"), row))
        total.update(row)
    rows.append(("**all**", total))
    print(
        "| module | mutants | tested | killed as run | survived | not reached | score as run "
        "| equivalent | killed by the new tests | left | score with the new tests |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r in rows:
        as_run = r["killed"] / r["tested"] if r["tested"] else float("nan")
        judged = r["tested"] - r["equivalent"]
        now = (r["killed"] + r["new kills"]) / judged if judged else float("nan")
        print(
            f"| {name} | {r['mutants']:,} | {r['tested']:,} | {r['killed']:,} | {r['survived']:,} "
            f"| {r['not reached']:,} | {as_run:.1%} | {r['equivalent']:,} | {r['new kills']:,} "
            f"| {r['left']:,} | {now:.1%} ({r['killed'] + r['new kills']:,} of {judged:,}) |"
        )
    if total["no tests"]:
        print(f"\n{total['no tests']} mutants with no test reaching them (left out of both scores)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
