"""Many processes registering at once, some with byte-identical reports (issue 6, reliability)."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from harness.history.layout import HistoryLayout
from harness.history.verify import verify_history
from harness.render import check_rendered, registration_renderer
from harness.testing import write_example_reports

PROCESSES = 8
REPORTS_PER_PROCESS = 25
UNIQUE_REPORTS = 120


def _seeds_for(process: int) -> list[int]:
    # overlapping windows: every process shares reports with its neighbours, and seed 0 with all
    return [0] + [(process * 15 + i) % UNIQUE_REPORTS for i in range(1, REPORTS_PER_PROCESS)]


def _worker(history: str, paths: list[str], barrier, queue) -> None:
    from harness.history.store import register_reports

    barrier.wait()
    outcomes = []
    try:
        for path in paths:
            (result,) = register_reports(history, [path], render=registration_renderer("defer"))
            outcomes.append((result.sha256, result.created))
    except BaseException:  # report it to the test instead of leaving it waiting
        import traceback

        queue.put(traceback.format_exc())
        raise
    queue.put(outcomes)


@pytest.mark.slow
def test_eight_processes_register_concurrently(tmp_path: Path) -> None:
    inputs = write_example_reports(tmp_path / "in", range(UNIQUE_REPORTS), reps=2)
    history = tmp_path / "h"
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(PROCESSES)
    queue = context.Queue()
    workers = [
        context.Process(
            target=_worker,
            args=(str(history), [str(inputs[s]) for s in _seeds_for(p)], barrier, queue),
        )
        for p in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    outcomes = [queue.get(timeout=300) for _ in workers]
    failures = [o for o in outcomes if isinstance(o, str)]
    assert not failures, failures[0]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    registered = {s for p in range(PROCESSES) for s in _seeds_for(p)}
    import hashlib

    expected = {hashlib.sha256(inputs[s].read_bytes()).hexdigest() for s in registered}
    created = [sha for process in outcomes for sha, was_created in process if was_created]
    # every unique report was stored exactly once, and every other registration said so
    assert sorted(created) == sorted(expected)
    assert sum(len(p) for p in outcomes) == PROCESSES * REPORTS_PER_PROCESS
    layout = HistoryLayout.at(history)
    assert {p.stem for p in layout.iter_record_files()} == expected
    with sqlite3.connect(history / "index.sqlite") as connection:
        shas = [r[0] for r in connection.execute("SELECT sha256 FROM records")]
        (trials,) = connection.execute("SELECT count(*) FROM trials").fetchone()
    assert sorted(shas) == sorted(expected)
    assert trials == len(expected) * 2 * 2 * 2 * 2  # acquisitions x formats x cache states x reps
    journal = (history / "journal.jsonl").read_text().splitlines()
    assert len(journal) == len(expected)
    result = verify_history(history, check_rendered=check_rendered)
    assert result.ok, [str(p) for p in result.errors]


def _create_worker(history: str, path: str, barrier, queue) -> None:
    from harness.history.store import register_reports

    barrier.wait()
    try:
        (result,) = register_reports(history, [path], render=None)
        queue.put(result.sha256)
    except BaseException:
        import traceback

        queue.put("ERROR " + traceback.format_exc())
        raise


@pytest.mark.slow
def test_processes_racing_to_create_a_new_history(tmp_path: Path) -> None:
    """Eight processes register into a history that does not exist yet, at the same moment;
    the creator's half-made folder must not look foreign to the others."""
    import hashlib

    import harness.history.store  # noqa: F401  (imported before forking, as a runner would)

    inputs = write_example_reports(tmp_path / "in", range(PROCESSES), reps=1)
    context = multiprocessing.get_context("fork")
    for attempt in range(5):
        history = tmp_path / f"h{attempt}"
        barrier = context.Barrier(PROCESSES)
        queue = context.Queue()
        workers = [
            context.Process(
                target=_create_worker, args=(str(history), str(inputs[p]), barrier, queue)
            )
            for p in range(PROCESSES)
        ]
        for worker in workers:
            worker.start()
        results = [queue.get(timeout=120) for _ in workers]
        for worker in workers:
            worker.join(timeout=60)
        errors = [r for r in results if r.startswith("ERROR")]
        assert not errors, errors[0]
        expected = {hashlib.sha256(p.read_bytes()).hexdigest() for p in inputs}
        assert set(results) == expected
        assert {p.stem for p in HistoryLayout.at(history).iter_record_files()} == expected
