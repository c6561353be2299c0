"""The paired trials: two worker processes, one per code tree, asked in turn for one trial.

:class:`PairedWorker` starts ``python -m harness.run.paired_worker`` in a code tree and
speaks its protocol (the spec, then one trial request per line; the worker module's
docstring); :func:`measure_paired` asks the baseline's and the candidate's workers in turn
(:func:`order_of_round`: the baseline first in even rounds, the candidate first in odd
ones), so that drift hits both sides alike; the two workers are started in a random
order (:func:`start_order`).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from harness.errors import HarnessError, IncomparableError
from harness.run.paired.baseline_code import BaselineCode

CellKey = tuple[str, str, str]
WORKER_MODULE = "harness.run.paired_worker"
SIDES = ("baseline", "candidate")


@dataclass(frozen=True)
class PairedSpec:
    """What both workers prepare and measure (the candidate's conditions)."""

    root: str
    manifest: str
    backend: str
    storage_id: str
    representation: str
    fresh_index: bool
    threads: int | None
    first_index: int
    acquisitions: tuple[str, ...]
    #: every HDF5 load checks its chunks (a worker of older code ignores it)
    verify_source: bool = False
    #: the disposable .qem's format major version (``--qem-version``)
    qem_version: int = 1


class PairedWorker:
    """A worker process in ``tree``; :meth:`trial` asks it for one trial."""

    def __init__(self, side: str, tree: Path, spec: PairedSpec, scratch: Path) -> None:
        self.side = side
        scratch.mkdir(parents=True, exist_ok=True)
        self._stderr = open(scratch / f"{side}-worker.log", "w+b")  # noqa: SIM115 (closed in close())
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [env.get("PYTHONPATH")])])
        env.pop("COVERAGE_PROCESS_START", None)
        self._process = subprocess.Popen(
            [sys.executable, "-m", WORKER_MODULE],
            cwd=tree,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        try:
            self._send({**asdict(spec), "scratch": str(scratch / side)})
            ready = self._receive()
        except (HarnessError, OSError):
            self.close()
            raise
        self.fingerprint = ready.get("source_fingerprint")
        if not ready.get("ready"):
            failures = "; ".join(ready.get("failures") or []) or "not prepared"
            self.close()
            raise HarnessError(f"paired recheck: the {side} worker could not prepare: {failures}")

    def _died(self) -> HarnessError:
        """The error for a worker that ended early: its status and last words."""
        self._process.wait()
        self._stderr.seek(0)
        tail = self._stderr.read().decode(errors="replace").strip().splitlines()[-3:]
        return HarnessError(
            f"paired recheck: the {self.side} worker exited with status "
            f"{self._process.returncode}: " + (" | ".join(tail) or "no message")
        )

    def _send(self, message: dict[str, Any]) -> None:
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(json.dumps(message) + "\n")
            self._process.stdin.flush()
        except BrokenPipeError:
            raise self._died() from None

    def _receive(self) -> dict[str, Any]:
        stdout: IO[str] | None = self._process.stdout
        assert stdout is not None
        line = stdout.readline()
        if not line:
            raise self._died()
        return json.loads(line)

    def trial(self, cell: CellKey, index: int) -> dict[str, Any]:
        self._send({"cell": list(cell), "index": index})
        answer = self._receive()
        if "error" in answer:
            raise HarnessError(f"paired recheck: {self.side} trial {index}: {answer['error']}")
        return answer["trial"]

    def close(self) -> dict[str, Any]:
        """End the worker; its final message (fingerprint at the end, failures, products)."""
        final: dict[str, Any] = {}
        try:
            if self._process.poll() is None and self._process.stdin is not None:
                self._process.stdin.close()
                final = self._receive()
            elif self._process.stdin is not None:
                with contextlib.suppress(OSError):
                    self._process.stdin.close()
        except (HarnessError, OSError):
            pass  # a worker that died says nothing more; its failure is already raised
        finally:
            try:
                self._process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._stderr.close()
        return final


#: Rounds of every cell each worker measures first and drops (its start-up).
WARMUP_ROUNDS = 1


def order_of_round(index: int) -> tuple[str, str]:
    """Which side goes first: the baseline in even rounds, the candidate in odd ones."""
    return SIDES if index % 2 == 0 else SIDES[::-1]


def start_order(started_first: str | None = None) -> tuple[str, str]:
    """The order the two workers are started in: ``started_first``'s first, else a fair
    coin's choice (:mod:`secrets`).

    On a small shared host the worker started second measures slower than the first, and
    the bias follows the start order when it is swapped: a
    fixed order would put it on one side of every paired verdict; chosen at random, it is
    noise with mean zero, and the report says which order ran."""
    if started_first is None:
        started_first = secrets.choice(SIDES)
    if started_first not in SIDES:
        raise ValueError(f"started_first must be one of {SIDES}, not {started_first!r}")
    return (started_first, SIDES[1 - SIDES.index(started_first)])


def measure_paired(
    spec: PairedSpec,
    cells: Sequence[CellKey],
    rounds: int,
    *,
    baseline: BaselineCode,
    candidate_tree: Path,
    expected: dict[str, str],
    scratch: Path,
    on_trial: Callable[[], None] | None = None,
    started_first: str | None = None,
    looks: int = 1,
    undecided: Callable[[list[dict], list[dict]], Sequence[CellKey]] | None = None,
    warmup: int = WARMUP_ROUNDS,
) -> dict[str, Any]:
    """Measure ``cells`` ``rounds`` rounds with both codes, alternately.

    Up to ``looks`` batches of ``rounds`` rounds: after each batch but the last,
    ``undecided(baseline_trials, candidate_trials)`` names the cells that the trials so far
    cannot yet clear or confirm, and only those are measured on (a sequential recheck; the
    verdict splits its alpha over the looks). Each batch has fresh workers, started in the
    other order than the batch before (the worker started second measured slower than
    its twin running the same code on the development VM), and begins with ``warmup`` rounds of
    its cells whose trials are dropped (a fresh worker's first trials pay its start-up).

    ``expected`` is each side's recorded source fingerprint: a worker whose imported code
    fingerprints otherwise (an installed copy shadowing the tree, say) is refused
    (:class:`IncomparableError`) before any trial. The workers are started in
    :func:`start_order` (``started_first``, else at random) for the first batch.

    Returns ``{"baseline_trials", "candidate_trials", "workers", "started_first"}``: the
    trials of each side (trial indices from ``spec.first_index``), each worker's
    fingerprints, stability, failures and products, and the side whose worker was started
    first. Both workers are ended whatever happens.
    """
    trials: dict[str, list[dict]] = {side: [] for side in SIDES}
    first_order = order = start_order(started_first)
    trees = {"baseline": baseline.tree, "candidate": candidate_tree}
    summary: dict[str, dict[str, Any]] = {
        side: {"source_fingerprint_start": None, "source_fingerprint_end": None,
               "stable": True, "failures": [], "products": {}}
        for side in SIDES
    }  # fmt: skip
    index = spec.first_index
    active = [tuple(cell) for cell in cells]
    looks_done = 0
    while active:
        # fresh workers each look, the other one started first: the worker started second
        # measured slower on the development VM, so neither side keeps that place
        with _started_workers(order, trees, spec, scratch, expected, summary) as workers:
            for _ in range(warmup):
                for cell in active:
                    for side in order_of_round(index):
                        workers[side].trial(cell, index)
            for _ in range(rounds):
                for cell in active:
                    for side in order_of_round(index):
                        trials[side].append(workers[side].trial(cell, index))
                    if on_trial is not None:
                        on_trial()
                index += 1
        looks_done += 1
        order = (order[1], order[0])
        if looks_done >= looks or undecided is None:
            break
        active = [tuple(c) for c in undecided(trials["baseline"], trials["candidate"])]
    return {
        "baseline_trials": trials["baseline"],
        "candidate_trials": trials["candidate"],
        "started_first": first_order[0],
        "looks_done": looks_done,
        "warmup_rounds": warmup,
        "workers": summary,
    }


@contextlib.contextmanager
def _started_workers(
    order: tuple[str, str],
    trees: dict[str, Path],
    spec: PairedSpec,
    scratch: Path,
    expected: dict[str, str],
    summary: dict[str, dict[str, Any]],
):
    """Both workers started in ``order`` and checked by fingerprint; ended whatever
    happens, their final words merged into ``summary`` (per side: first fingerprint,
    last end fingerprint, stable in every look, all failures, the products)."""
    workers: dict[str, PairedWorker] = {}
    try:
        for side in order:
            workers[side] = PairedWorker(side, trees[side], spec, scratch)
            if summary[side]["source_fingerprint_start"] is None:
                summary[side]["source_fingerprint_start"] = workers[side].fingerprint
        for side, worker in workers.items():
            if worker.fingerprint != expected[side]:
                raise IncomparableError(
                    f"paired recheck: the {side} worker measures code with fingerprint "
                    f"{str(worker.fingerprint)[:12]}, not the {side}'s {expected[side][:12]}"
                )
        yield workers
    finally:
        for side, worker in workers.items():
            final = worker.close()
            merged = summary[side]
            merged["source_fingerprint_end"] = final.get("source_fingerprint_end")
            merged["stable"] = merged["stable"] and bool(final.get("stable"))
            merged["failures"] += list(final.get("failures") or [])
            merged["products"].update(final.get("products") or {})
