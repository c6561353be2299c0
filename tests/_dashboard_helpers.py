"""Small histories for the dashboard tests: two keys, a baseline pair and a crafted report."""

from __future__ import annotations

from pathlib import Path

from harness.history.index_db import open_index
from harness.history.layout import HistoryLayout
from harness.history.store import register_reports
from harness.render import registration_renderer, render_all
from harness.report import dump_report
from harness.testing import make_example_report

CRAFTED_ACQUISITION = "scan<script>alert('acq')</script>"
CRAFTED_STORAGE = "<img src=x onerror=\"alert('storage')\">"
CRAFTED_DEVICE = "GPU</script><script>alert('device')</script>"
#: Records per key and trials per cell of :func:`build_history`.
RECORDS_PER_KEY = 4
REPS = 3


def build_history(root: Path, *, render: bool = True) -> dict[str, list[str]]:
    """A history with a plain key (the last record run against the first) and a crafted key.

    Records are registered with plots deferred, then everything is rendered once
    (``render``). Returns the records' SHA-256 per storage id, in registration order.
    """
    history = root / "h"
    shas: dict[str, list[str]] = {"nvme-a": [], "crafted": []}
    for index in range(RECORDS_PER_KEY):
        baseline = None
        if index == RECORDS_PER_KEY - 1:
            baseline = {"sha256": shas["nvme-a"][0], "path": None, "regression_percent": 20.0}
        doc = make_example_report(
            index,
            reps=REPS,
            storage_id="nvme-a",
            created_utc=f"2026-11-30T08:0{index}:00Z",
            git_revision=f"{index:x}" * 40,
            baseline=baseline,
            slowdown=1.5 if baseline else 1.0,
        )
        (result,) = register_reports(
            history, [dump_report(doc)], render=registration_renderer("defer")
        )
        shas["nvme-a"].append(result.sha256)
    for index in range(2):
        doc = make_example_report(
            100 + index,
            reps=REPS,
            acquisition_ids=(CRAFTED_ACQUISITION, "plain"),
            storage_id=CRAFTED_STORAGE,
            device_name=CRAFTED_DEVICE,
            created_utc=f"2026-11-30T09:0{index}:00Z",
        )
        (result,) = register_reports(
            history, [dump_report(doc)], render=registration_renderer("defer")
        )
        shas["crafted"].append(result.sha256)
    if render:
        render_history(history)
    return shas


def render_history(history: Path, **kwargs) -> None:
    layout = HistoryLayout.at(history)
    engine = open_index(layout.index_db, create=False)
    try:
        render_all(layout, engine, plots="all", **kwargs)
    finally:
        engine.dispose()


#: The cell of :func:`marked_reports`' third run that is slower than its baseline: the
#: one a tile's sparkline follows (cached, HDF5, first acquisition).
SLOWED_CELL = ("scan-a", "hdf5", "cached")
#: Which of :func:`marked_reports`' runs sampled a contended host.
CONTENDED_RUNS = (False, True, False, False)


def marked_reports() -> list[dict]:
    """Four runs of one key, as ``harness run`` writes them: the second on a contended
    host; the third judged against the first by the harness's comparison, with
    :data:`SLOWED_CELL` 1.5 times slower than there (the other cells as before); every
    run states its host load."""
    from harness.history.lookup import LoadedReport
    from harness.history.records import sha256_bytes
    from harness.report import summarise_trials
    from harness.run.reporting import compare_with_baseline, exit_code_of
    from harness.verdict.comparison import DEFAULT_REGRESSION_PERCENT

    docs = []
    for index, contended in enumerate(CONTENDED_RUNS):
        doc = make_example_report(
            200 + index,
            reps=REPS,
            storage_id="nvme-marked",
            created_utc=f"2026-11-30T10:0{index}:00Z",
            git_revision=f"{index + 5:x}" * 40,
        )
        doc["status"]["host_load"] = "contended" if contended else "quiet"
        if index == 2:
            for trial in doc["trials"]:
                if (trial["acquisition"], trial["format"], trial["cache_state"]) == SLOWED_CELL:
                    trial["seconds"] = round(trial["seconds"] * 1.5, 6)
            doc["summaries"] = summarise_trials(doc["trials"])
            baseline = LoadedReport(docs[0], sha256_bytes(dump_report(docs[0])), Path("first"))
            performance = compare_with_baseline(doc, baseline, DEFAULT_REGRESSION_PERCENT)
            doc["status"]["performance"] = performance
            doc["status"]["exit_code"] = exit_code_of(doc["status"], performance)
        docs.append(doc)
    return docs


def register_marked(history: Path) -> list[str]:
    """Register :func:`marked_reports` into ``history`` (plots deferred); their SHA-256s."""
    shas = []
    for doc in marked_reports():
        (result,) = register_reports(
            history, [dump_report(doc)], render=registration_renderer("defer")
        )
        shas.append(result.sha256)
    return shas
