"""Narrow the tests mutmut runs per mutant, for the functions not yet tested.

mutmut 3 runs, for each mutant, every test that called the mutated function in its stats
run (``mutants/mutmut-stats.json``). For the reader's entry points (``open_arina``,
``load_arina``...) that is 90-200 tests and 20-26 s a mutant, too slow for a shared
2-core host. This keeps, for each function with untested mutants, the tests of at most
0.5 s, and of each parametrized test its two fastest cases; ``duration_by_test`` is kept
whole, so mutmut collects no stats again and resumes. Results already recorded stay.

Usage, in a mutmut folder whose run was stopped (before ``mutmut run`` resumes it)::

    python tests/mutation/narrow_stats.py MUTMUT_DIR [--max-seconds 0.5] [--per-test 2]

It saves the full stats beside them (``mutmut-stats.full.json``) and writes the kept
selection to ``narrow-selection.json`` in MUTMUT_DIR. Survivors of a narrowed run are
then checked against the full selection, or killed by a new test (show_kills.py).
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
from pathlib import Path


def narrow(tests: list[str], durations: dict[str, float], max_s: float, per: int) -> list[str]:
    by_test = collections.defaultdict(list)
    for test in tests:
        by_test[test.split("[")[0]].append(test)
    kept = []
    for cases in by_test.values():
        fast = sorted((t for t in cases if durations[t] <= max_s), key=lambda t: durations[t])
        kept += fast[:per]
    return sorted(kept)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mutmut_dir", type=Path)
    parser.add_argument("--max-seconds", type=float, default=0.5)
    parser.add_argument("--per-test", type=int, default=2)
    args = parser.parse_args(argv)
    stats_path = args.mutmut_dir / "mutants" / "mutmut-stats.json"
    full = args.mutmut_dir / "mutants" / "mutmut-stats.full.json"
    if not full.exists():
        shutil.copy(stats_path, full)
    stats = json.loads(full.read_text())
    all_tests_of = dict(stats["tests_by_mangled_function_name"])
    untested = set()
    for meta in (args.mutmut_dir / "mutants").rglob("*.meta"):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        untested |= {key.split("__mutmut_")[0] for key, code in codes.items() if code is None}
    tests_of = stats["tests_by_mangled_function_name"]
    durations = stats["duration_by_test"]
    selection = {}
    for function in sorted(untested & set(tests_of)):
        selection[function] = narrow(tests_of[function], durations, args.max_seconds, args.per_test)
        tests_of[function] = selection[function]
        before = sum(durations[t] for t in all_tests_of[function])
        after = sum(durations[t] for t in selection[function])
        print(f"{function}: {before:.1f} s -> {after:.1f} s of tests a mutant")
    stats_path.write_text(json.dumps(stats))
    (args.mutmut_dir / "narrow-selection.json").write_text(
        json.dumps(selection, indent=1, sort_keys=True)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
