"""Paired rechecks: the baseline's code and the candidate's, measured alternately, now.

A recheck of the candidate alone (``--recheck K``) samples the candidate again but
not the baseline, whose run is over. On a host whose speed wanders from one run to
the next (the 2-core development VM: a cell's median moves 15-75% between runs while
the trials of one run agree to a few per cent; docs/verdicts.md), a baseline measured
at a fast moment makes every later candidate look slower, and no recheck of the
candidate clears that. A *paired* recheck (``--paired``) measures the flagged cells
with both codes at the same moment: two worker processes
(:mod:`harness.run.paired_worker`), one running the baseline's code tree and one the
candidate's, asked in turn for one trial each (the baseline first in even rounds, the
candidate first in odd ones), so that drift hits both sides alike. The verdict of a
cell rechecked this way is taken on the paired trials alone
(:func:`harness.verdict.cells.decide_cells`).

The baseline's code is ``--baseline-tree DIR``, or the baseline's git revision
exported with ``git archive`` from the repository of this checkout (only when the
baseline ran from a clean tree). Either way the tree's source fingerprint must equal
the baseline's recorded one, and the tree must have the worker (code from before
paired rechecks cannot be paired): otherwise :class:`IncomparableError` (exit 2)
before anything is measured. The candidate's worker runs in this checkout, whose
fingerprint the callers have already checked against the candidate's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from harness.errors import HarnessError, IncomparableError
from harness.run.provenance import compute_source_fingerprint, find_checkout

CellKey = tuple[str, str, str]
WORKER_MODULE = "harness.run.paired_worker"
WORKER_FILE = Path("harness") / "run" / "paired_worker.py"
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


@dataclass(frozen=True)
class BaselineCode:
    """The baseline's code tree and how it was obtained (recorded in the report)."""

    tree: Path
    origin: str


def _export_revision(repository: Path, revision: str, dest: Path) -> None:
    """``git archive REVISION`` of ``repository`` unpacked into ``dest``."""
    archive = dest.parent / "baseline.tar"
    with open(archive, "wb") as out:
        done = subprocess.run(
            ["git", "-C", str(repository), "archive", "--format=tar", revision],
            stdout=out,
            stderr=subprocess.PIPE,
        )
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip().splitlines()
        raise IncomparableError(
            f"paired recheck: cannot export the baseline's revision {revision[:12]} from "
            f"{repository}: {message[-1] if message else 'git archive failed'}; give its code "
            "with --baseline-tree DIR"
        )
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    archive.unlink()


def baseline_code(
    baseline_doc: dict,
    baseline_sha256: str,
    *,
    tree: Path | None,
    repository: Path | None,
    scratch: Path,
) -> BaselineCode:
    """The baseline's code tree, checked against its recorded source fingerprint."""
    provenance = baseline_doc["provenance"]
    expected = provenance["source_fingerprint_end"]
    check_pairable(baseline_doc, baseline_sha256, tree)
    if tree is not None:
        found, origin = tree.resolve(), f"tree {tree.resolve()}"
    else:
        revision = provenance["git_revision"]
        if repository is None:
            raise IncomparableError(
                "paired recheck: this checkout is not in a git repository, so the baseline's "
                f"revision {revision[:12]} cannot be exported; give its code with --baseline-tree"
            )
        found = scratch / "baseline-code"
        found.mkdir(parents=True)
        _export_revision(repository, revision, found)
        origin = f"git archive {revision}"
    if not (found / WORKER_FILE).is_file():
        raise IncomparableError(
            f"paired recheck: the baseline's code ({origin}) has no {WORKER_FILE.as_posix()}: it "
            "predates paired rechecks; recheck without --paired"
        )
    fingerprint = compute_source_fingerprint(found)
    if fingerprint != expected:
        raise IncomparableError(
            f"paired recheck: the code of {origin} (fingerprint {fingerprint[:12]}) is not the "
            f"code baseline {baseline_sha256[:12]} measured (fingerprint {expected[:12]})"
        )
    return BaselineCode(found, origin)


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


def order_of_round(index: int) -> tuple[str, str]:
    """Which side goes first: the baseline in even rounds, the candidate in odd ones."""
    return SIDES if index % 2 == 0 else SIDES[::-1]


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
) -> dict[str, Any]:
    """Measure ``cells`` ``rounds`` rounds with both codes, alternately.

    ``expected`` is each side's recorded source fingerprint: a worker whose imported code
    fingerprints otherwise (an installed copy shadowing the tree, say) is refused
    (:class:`IncomparableError`) before any trial.

    Returns ``{"baseline_trials", "candidate_trials", "workers"}``: the trials of each
    side (trial indices from ``spec.first_index``) and each worker's fingerprints,
    stability, failures and products. Both workers are ended whatever happens.
    """
    workers: dict[str, PairedWorker] = {}
    trials: dict[str, list[dict]] = {side: [] for side in SIDES}
    finals: dict[str, dict] = {}
    try:
        workers["baseline"] = PairedWorker("baseline", baseline.tree, spec, scratch)
        workers["candidate"] = PairedWorker("candidate", candidate_tree, spec, scratch)
        for side, worker in workers.items():
            if worker.fingerprint != expected[side]:
                raise IncomparableError(
                    f"paired recheck: the {side} worker measures code with fingerprint "
                    f"{str(worker.fingerprint)[:12]}, not the {side}'s {expected[side][:12]}"
                )
        for index in range(spec.first_index, spec.first_index + rounds):
            for cell in cells:
                for side in order_of_round(index):
                    trials[side].append(workers[side].trial(tuple(cell), index))
                if on_trial is not None:
                    on_trial()
    finally:
        for side, worker in workers.items():
            finals[side] = worker.close()
    return {
        "baseline_trials": trials["baseline"],
        "candidate_trials": trials["candidate"],
        "workers": {
            side: {
                "source_fingerprint_start": workers[side].fingerprint,
                "source_fingerprint_end": finals[side].get("source_fingerprint_end"),
                "stable": bool(finals[side].get("stable")),
                "failures": list(finals[side].get("failures") or []),
                "products": dict(finals[side].get("products") or {}),
            }
            for side in workers
        },
    }


def check_pairable(baseline_doc: dict, baseline_sha256: str, tree: Path | None) -> None:
    """Refuse at once (before any trial) a baseline whose code cannot be had back."""
    provenance = baseline_doc["provenance"]
    if tree is None and (not provenance.get("git_revision") or provenance.get("git_dirty")):
        raise IncomparableError(
            f"paired recheck: baseline {baseline_sha256[:12]} was measured from "
            + (
                "a tree with local changes"
                if provenance.get("git_revision")
                else "code outside git"
            )
            + ", which git cannot give back; give its code with --baseline-tree DIR"
        )


@dataclass(frozen=True)
class Pairing:
    """What a run's paired recheck needs: the baseline, its code, this code's checkout."""

    baseline: Any  # harness.history.lookup.LoadedReport
    code: BaselineCode
    checkout: Path
    fingerprint: str


@contextlib.contextmanager
def baseline_checked_out(
    baseline_doc: dict, baseline_sha256: str, *, tree: Path | None, checkout: Path
) -> Iterator[BaselineCode]:
    """The baseline's code (given or exported, and checked), for as long as it is needed.

    Used before anything is measured, so that a baseline whose code cannot be had back
    refuses the run or recheck at once (IncomparableError), not after the trials.
    """
    # outside any git checkout: a tree inside one would be taken for that checkout
    scratch = Scratch.create(Path(tempfile.gettempdir()))
    try:
        yield baseline_code(
            baseline_doc,
            baseline_sha256,
            tree=tree,
            repository=find_checkout(checkout),
            scratch=scratch.path,
        )
    finally:
        scratch.remove()


def paired_recheck(
    config: Any,
    acquisitions: Sequence[str],
    cells: Sequence[CellKey],
    rounds: int,
    *,
    code: BaselineCode,
    baseline_doc: dict,
    baseline_sha256: str,
    candidate_fingerprint: str,
    checkout: Path,
    scratch_parent: Path,
    on_trial: Callable[[], None] | None = None,
) -> tuple[list[dict], dict[str, Any]]:
    """The candidate's paired trials and the report's ``recheck.paired`` block.

    ``config`` is the candidate's io-scale configuration (root, manifest, backend, storage
    id, representation, fresh index, threads; ``reps`` is the first trial index). The
    workers' files go under ``scratch_parent``, on the candidate's filesystem.
    """
    spec = PairedSpec(
        root=str(Path(config.root).resolve()),
        manifest=str(Path(config.manifest).resolve()),
        backend=config.backend,
        storage_id=config.storage_id,
        representation=config.representation,
        fresh_index=bool(config.fresh_index),
        threads=config.threads,
        first_index=int(config.reps),
        acquisitions=tuple(acquisitions),
    )
    expected = {
        "baseline": baseline_doc["provenance"]["source_fingerprint_end"],
        "candidate": candidate_fingerprint,
    }
    scratch = Scratch.create(scratch_parent)
    try:
        measured = measure_paired(
            spec,
            cells,
            rounds,
            baseline=code,
            candidate_tree=checkout,
            expected=expected,
            scratch=scratch.path,
            on_trial=on_trial,
        )
    finally:
        scratch.remove()
    return measured["candidate_trials"], paired_block(measured, baseline_sha256, code)


def paired_block(
    measured: dict[str, Any], baseline_sha256: str, code: BaselineCode
) -> dict[str, Any]:
    """The report's ``recheck.paired`` block (the candidate's trials are ``recheck.trials``)."""
    workers = measured["workers"]
    return {
        "baseline_sha256": baseline_sha256,
        "baseline_code": code.origin,
        "order": "alternating per cell: baseline first in even rounds, candidate first in odd",
        "baseline_trials": measured["baseline_trials"],
        "workers": workers,
    }


def check_workers(log: Any, workers: dict[str, Any]) -> None:
    """Each worker's failures and stability into ``log`` (a FailureLog)."""
    for side, worker in workers.items():
        for failure in worker["failures"]:
            log.execution(f"paired recheck, {side} worker: {failure}")
        if not worker["stable"]:
            log.other(f"source-stability: the {side} worker's source changed during the recheck")


def candidate_products(block: dict[str, Any]) -> dict[str, str | None]:
    """The candidate worker's indexed product per acquisition."""
    return dict(block["workers"].get("candidate", {}).get("products", {}))


@dataclass
class Scratch:
    """A private folder for the baseline's exported code and the workers' files."""

    path: Path

    @classmethod
    def create(cls, parent: Path) -> Scratch:
        parent.mkdir(parents=True, exist_ok=True)
        return cls(Path(tempfile.mkdtemp(prefix=".harness-paired-", dir=parent)))

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
