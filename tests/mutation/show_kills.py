"""Show that a test kills a mutmut survivor: apply the mutant, run the test, expect failure.

Each line of the kill list names a mutant and the test meant to kill it (or several,
separated by commas, run together)::

    quantem.stem4d.io.arina.x_chunk_mismatch_error__mutmut_7  tests/test_x.py::test_y

For each line, the mutant's diff (``mutmut show NAME``, run in the mutmut folder given
by ``--mutmut-dir``, where the run's ``mutants/`` lie) is applied to a scratch copy of
this repository, the test is run there (it must fail: the mutant is killed), and the same
test is run on the unchanged copy first (it must pass, else the kill proves nothing).
Prints one line per mutant and the count. Usage, from the repository root::

    python tests/mutation/show_kills.py --mutmut-dir /tmp/mut-reader KILLS.txt

A diff that no longer applies (the source changed since the run) is reported as
``stale``, not counted as a kill.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def mutant_diff(mutmut_dir: Path, name: str) -> str:
    for _attempt in range(5):  # a running mutmut may be rewriting the .meta file just read
        done = subprocess.run(
            [sys.executable, "-m", "mutmut", "show", name],
            cwd=mutmut_dir,
            capture_output=True,
            text=True,
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        )
        if done.returncode == 0:
            break
        time.sleep(2)
    if done.returncode != 0 or "+++ " not in done.stdout:
        raise SystemExit(f"show_kills: mutmut show {name} failed in {mutmut_dir}: {done.stderr}")
    return done.stdout[done.stdout.index("--- ") :]


def run_test(copy: Path, test: str, timeout: float) -> str:
    env = {**os.environ, "PYTHONPATH": str(copy)}
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-x",
                "-q",
                "-p",
                "no:cacheprovider",
                *test.split(","),
            ],
            cwd=copy,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return "timeout"
    return "pass" if done.returncode == 0 else "fail"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def apply(copy: Path, diff: str) -> str | None:
    """Apply a one-file diff to ``copy``; returns the original text to restore, or None
    when a hunk's old lines are not found exactly once.

    mutmut numbers a hunk's lines from its function and shows a method dedented (its
    docstring's lines not), so ``patch`` cannot place it: the old lines are found by
    their text without leading spaces, and each new line takes the indentation the old
    line before it has in the file."""
    lines = diff.splitlines(keepends=True)
    path = copy / lines[0][4:].strip()
    original = path.read_text()
    text = original.splitlines(keepends=True)
    hunks: list[list[str]] = []
    for line in lines[2:]:
        if line.startswith("@@"):
            hunks.append([])
        elif hunks and line[:1] in (" ", "-", "+"):
            hunks[-1].append(line)
    for hunk in hunks:
        old = [line[1:].strip() for line in hunk if line[0] != "+"]
        starts = [
            i
            for i in range(len(text) - len(old) + 1)
            if [t.strip() for t in text[i : i + len(old)]] == old
        ]
        if len(starts) != 1:
            return None
        at, replaced, delta = starts[0], [], 0
        for line in hunk:
            kind, body = line[0], line[1:]
            if kind == "+":
                pad = max(0, _indent(body) + delta) if body.strip() else 0
                replaced.append(" " * pad + body.lstrip(" "))
                continue
            delta = _indent(text[at]) - _indent(body) if body.strip() else delta
            if kind == " ":
                replaced.append(text[at])
            at += 1
        text[starts[0] : at] = replaced
    path.write_text("".join(text))
    return original


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kills", type=Path, help="lines of 'MUTANT TEST'")
    parser.add_argument("--mutmut-dir", type=Path, required=True)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    pairs = [
        line.split()[:2]
        for line in args.kills.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    killed = 0
    with tempfile.TemporaryDirectory(prefix="show-kills-") as folder:
        copy = Path(folder) / "repo"
        shutil.copytree(
            REPO, copy, ignore=shutil.ignore_patterns(".git", "mutants", "__pycache__", "web")
        )
        clean: dict[str, str] = {}
        for name, test in pairs:
            if test not in clean:
                clean[test] = run_test(copy, test, args.timeout)
            diff = mutant_diff(args.mutmut_dir, name)
            if clean[test] != "pass":
                print(f"unproven {name} {test} (the test does not pass unmutated)", flush=True)
                continue
            target = copy / diff.splitlines()[0][4:].strip()
            original = apply(copy, diff)
            if original is None:
                print(f"stale    {name} (its diff no longer applies)", flush=True)
                continue
            try:
                result = run_test(copy, test, args.timeout)
            finally:
                target.write_text(original)
            is_killed = result in ("fail", "timeout")
            killed += is_killed
            print(f"{'killed  ' if is_killed else 'SURVIVED'} {name} {test} ({result})", flush=True)
    print(f"{killed} of {len(pairs)} killed")
    return 0 if killed == len(pairs) else 1


if __name__ == "__main__":
    sys.exit(main())
