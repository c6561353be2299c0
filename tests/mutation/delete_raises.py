"""Delete each ``raise`` of the ARINA reader in turn and run its refusal tests.

A targeted mutation run: for every ``raise`` statement of ``quantem/stem4d/io/arina.py``
(found with ``ast``), a copy of the repository has that statement replaced by ``pass``
and the given tests run (``-x``, stop at the first failure); the mutant is *killed* when
a test fails or the tests run past ``--timeout`` (a deleted check can turn a read loop
into one that never ends). Prints one line per mutant and the score. Usage, from the repository root::

    python tests/mutation/delete_raises.py [--jobs 2] [TESTS ...]

(default tests: tests/test_arina_refusals.py tests/test_arina_errors.py).
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TARGET = Path("quantem/stem4d/io/arina.py")
DEFAULT_TESTS = ["tests/test_arina_refusals.py", "tests/test_arina_errors.py"]


def raise_spans(source: str) -> list[tuple[int, int]]:
    """(first line, last line), 1-based, of every raise statement."""
    return sorted(
        (node.lineno, node.end_lineno or node.lineno)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Raise)
    )


def mutant(source: str, span: tuple[int, int]) -> str:
    lines = source.splitlines(keepends=True)
    first, last = span
    indent = lines[first - 1][: len(lines[first - 1]) - len(lines[first - 1].lstrip())]
    return "".join([*lines[: first - 1], f"{indent}pass\n", *lines[last:]])


def run_one(
    span: tuple[int, int], source: str, tests: list[str], timeout: float
) -> tuple[tuple[int, int], bool]:
    with tempfile.TemporaryDirectory(prefix="raise-mutant-") as folder:
        copy = Path(folder) / "repo"
        shutil.copytree(
            REPO, copy, ignore=shutil.ignore_patterns(".git", "mutants", "__pycache__", "web")
        )
        (copy / TARGET).write_text(mutant(source, span))
        env = {**os.environ, "PYTHONPATH": str(copy)}
        try:
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                cwd=copy, env=env, capture_output=True, text=True, timeout=timeout,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return span, True  # e.g. a read loop that no longer stops: noticed, as mutmut counts it
        return span, done.returncode != 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds per mutant; past it: killed"
    )
    parser.add_argument(
        "--lines", type=int, nargs="+", help="only the raises starting on these lines"
    )
    parser.add_argument("tests", nargs="*", default=DEFAULT_TESTS)
    args = parser.parse_args(argv)
    source = (REPO / TARGET).read_text()
    spans = raise_spans(source)
    if args.lines:
        spans = [span for span in spans if span[0] in args.lines]
    lines = source.splitlines()
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda s: run_one(s, source, args.tests, args.timeout), spans))
    killed = 0
    for (first, _), dead in results:
        killed += dead
        print(f"{'killed  ' if dead else 'SURVIVED'} {TARGET}:{first}: {lines[first - 1].strip()}")
    print(
        f"score: {killed}/{len(results)} raise deletions killed ({100 * killed / len(results):.1f}%)"
    )
    return 0 if killed == len(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
