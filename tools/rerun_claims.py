"""Measure every published claim again with the command printed beside it, and publish.

For each record that docs/performance/claims.toml names, this runs the claim's
``reproduce`` command (paths under /tmp moved into a fresh temporary folder, so that no
earlier run's output is in the way), registers the new report into the evidence history,
points the claims at the new record and regenerates docs/performance/results.md. Nothing
is rewritten unless every command succeeded. Run it on a quiet host, from a clean checkout
(commit first: a record names the revision that ran):

    python tools/rerun_claims.py [--only ID ...] [--dry-run]
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.commands.history_publish import (  # noqa: E402
    DEFAULT_CLAIMS,
    DEFAULT_EVIDENCE_DIR,
    DEFAULT_PAGE,
)
from harness.render.claims import parse_claims  # noqa: E402

STORED = re.compile(r"(?:stored|already stored) ([0-9a-f]{64})")


def _steps(reproduce: str, scratch: Path) -> list[list[str]]:
    """The reproduce command's steps, /tmp paths moved under ``scratch``, the last one
    registering into the evidence history."""
    steps = []
    for text in reproduce.split("&&"):
        words = []
        for word in shlex.split(text):
            if word.startswith("/tmp/"):
                word = str(scratch / word[len("/tmp/") :])
            words.append(word)
        steps.append(words)
    steps[-1] += ["--history-dir", DEFAULT_EVIDENCE_DIR]
    return steps


def _run(words: list[str]) -> str:
    command = [sys.executable, "-m", "harness", *words[1:]] if words[0] == "harness" else words
    print("$", shlex.join(words), flush=True)
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    sys.stdout.write(done.stdout[-4000:])
    if done.returncode not in (0, 2):  # 2: review (a contended host, a noisy cell)
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"failed (exit {done.returncode}): {shlex.join(words)}")
    return done.stdout + done.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="ID", help="only these claims' records")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args()
    claims = parse_claims(REPO / DEFAULT_CLAIMS).claims
    if args.only:
        unknown = set(args.only) - {c.id for c in claims}
        if unknown:
            parser.error(f"no such claim: {', '.join(sorted(unknown))}")
        claims = [c for c in claims if c.id in args.only]
    by_record: dict[str, str] = {}
    for claim in claims:
        by_record.setdefault(claim.record, claim.reproduce)
    replaced: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="rerun-claims-") as scratch:
        for old, reproduce in by_record.items():
            steps = _steps(reproduce, Path(scratch))
            if args.dry_run:
                for words in steps:
                    print("$", shlex.join(words))
                continue
            for words in steps[:-1]:
                _run(words)
            found = STORED.findall(_run(steps[-1]))
            if not found:
                raise SystemExit(f"no record registered by: {shlex.join(steps[-1])}")
            replaced[old] = found[-1]
    if args.dry_run:
        return 0
    claims_path = REPO / DEFAULT_CLAIMS
    text = claims_path.read_text()
    for old, new in replaced.items():
        text = text.replace(old, new)
        print(f"{old[:16]} -> {new[:16]}")
    claims_path.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "harness", "history", "publish", "--out", DEFAULT_PAGE],
        cwd=REPO,
        check=False,
    )
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
