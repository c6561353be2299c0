"""Registrations killed with SIGKILL: no record ever differs from its name, no completed
registration is lost, and verify/rebuild bring the history back (issue 6, reliability)."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.history.layout import HistoryLayout
from harness.history.rebuild import rebuild_history
from harness.history.store import register_reports
from harness.history.verify import ProblemKind, scan_records, verify_history
from harness.render import check_rendered, rebuild_renderer, registration_renderer
from harness.report import dump_report
from harness.testing import make_example_report

# Kinds verify may report right after a kill (the index or renders lag); never damage.
LAG_KINDS = {
    ProblemKind.UNINDEXED,
    ProblemKind.STALE_RENDER,
    ProblemKind.UNREGISTERED,
    ProblemKind.TORN_JOURNAL,
    ProblemKind.STALE_TEMP,
    ProblemKind.PLOT_PENDING,
}

REGISTER_LOOP = """
import sys
from harness.render import registration_renderer
from harness.history.store import register_reports
from harness.report import dump_report
from harness.testing import make_example_report
history, first, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for seed in range(first, first + count):
    (result,) = register_reports(history, [dump_report(make_example_report(seed, reps=2))], render=registration_renderer("defer"))
    print("done", result.sha256, flush=True)
"""

# Kill the process at one named point inside a registration.
INJECT = """
import os, signal, sys
from harness import fsio
from harness.history import index_db, store
from harness.render import index_json, pages, targets, timings, update
from harness.report import dump_report
from harness.testing import make_example_report
from harness.render import registration_renderer
history, point, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

if point == "before-rename":
    fsio.os.link = die
elif point == "before-journal":
    store.append_journal = die
elif point == "mid-journal":
    real_open = open
    def torn_append(layout, entries):
        if not entries:
            return
        with real_open(layout.journal, "ab") as handle:
            handle.write(b'{"registered_utc":"2026-')
            handle.flush()
        die()
    store.append_journal = torn_append
elif point == "mid-index":
    def half_insert(connection, entry):
        from sqlalchemy import insert
        connection.execute(insert(index_db.RecordRow).values(**entry.record))
        die()
    store.insert_entry = half_insert
elif point == "mid-render":
    for module in (index_json, pages, targets, timings, update):
        module.write_atomic = die
elif point == "mid-csv-append":
    real = timings.timings_csv_text
    def partial(rows, header):
        data = real(rows, header=header)
        with open(os.path.join(history, "timings.csv"), "ab") as handle:
            handle.write(data[: len(data) // 2])
        die()
    timings.timings_csv_text = partial
store.register_reports(history, [dump_report(make_example_report(seed, reps=2))], render=registration_renderer("defer"))
print("survived")
"""


def _run(script: str, *args: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def _assert_no_damage(history: Path) -> None:
    scan = scan_records(HistoryLayout.at(history))
    assert not [p for p in scan.problems if p.kind is not ProblemKind.WRITABLE], scan.problems


def _indexed(history: Path) -> set[str]:
    import sqlite3

    with sqlite3.connect(history / "index.sqlite") as connection:
        return {row[0] for row in connection.execute("SELECT sha256 FROM records")}


@pytest.mark.slow
@pytest.mark.parametrize(
    "point",
    ["before-rename", "before-journal", "mid-journal", "mid-index", "mid-render", "mid-csv-append"],
)
def test_kill_at_each_point_of_a_registration(tmp_path: Path, point: str) -> None:
    history = tmp_path / "h"
    register_reports(
        history,
        [dump_report(make_example_report(s, reps=2)) for s in (1, 2)],
        render=registration_renderer("defer"),
    )
    before = _indexed(history)
    killed = _run(INJECT, history, point, 3)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    _assert_no_damage(history)
    errors = verify_history(history, check_rendered=check_rendered).errors
    assert {p.kind for p in errors} <= LAG_KINDS, [str(p) for p in errors]
    assert before <= _indexed(history)
    # the history keeps working without a rebuild: rerunning the killed registration
    # registers (or adopts) its record, and the next registration succeeds ...
    register_reports(
        history,
        [dump_report(make_example_report(s, reps=2)) for s in (3, 4)],
        render=registration_renderer("defer"),
    )
    # ... and a rebuild leaves nothing but pending plots
    rebuild_history(history, render=rebuild_renderer(plots=False))
    after = verify_history(history, check_rendered=check_rendered)
    assert after.ok, [str(p) for p in after.errors]
    assert {p.kind for p in after.problems} <= {ProblemKind.PLOT_PENDING, ProblemKind.TORN_JOURNAL}
    assert not list(HistoryLayout.at(history).temp.iterdir())
    assert len(_indexed(history)) == len(before) + 2


@pytest.mark.slow
def test_sigkill_at_random_moments_loses_no_completed_registration(tmp_path: Path) -> None:
    history = tmp_path / "h"
    rng = random.Random(20261130)
    completed: set[str] = set()
    for round_number in range(6):
        process = subprocess.Popen(
            [sys.executable, "-c", REGISTER_LOOP, str(history), str(round_number * 1000), "1000"],
            stdout=subprocess.PIPE,
            text=True,
        )
        lines: list[str] = []
        reader = threading.Thread(target=lines.extend, args=(process.stdout,), daemon=True)
        reader.start()
        # start the random delay at the first completed registration (imports take a
        # while on a loaded machine), so the kill lands while registrations are running
        started = time.monotonic()
        while not lines and process.poll() is None and time.monotonic() - started < 120:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 1.5))
        process.send_signal(signal.SIGKILL)
        process.wait()
        reader.join(timeout=10)
        process.stdout.close()
        buffer = "".join(lines)
        round_done = {line.split()[1] for line in buffer.splitlines() if line.startswith("done ")}
        completed |= round_done
        # after every kill: nothing damaged, every completed registration stored and indexed
        _assert_no_damage(history)
        stored = {p.stem for p in HistoryLayout.at(history).iter_record_files()}
        assert completed <= stored
        assert completed <= _indexed(history)
        errors = verify_history(history, check_rendered=check_rendered).errors
        assert {p.kind for p in errors} <= LAG_KINDS, [str(p) for p in errors]
    assert len(completed) >= 6  # the kills did not all land before the first registration
    rebuilt = rebuild_history(history, render=rebuild_renderer(plots=False))
    # a record a kill left unjournalled is listed, never adopted silently; registering
    # it again adopts it explicitly
    if rebuilt.unregistered:
        register_reports(
            history,
            [history / path for path in rebuilt.unregistered],
            render=registration_renderer("defer"),
        )
    final = verify_history(history, check_rendered=check_rendered)
    assert final.ok, [str(p) for p in final.errors]
    assert completed <= _indexed(history)
