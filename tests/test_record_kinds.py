"""Every record kind gets its page, and no record can wedge a render (issue 39, defect 1).

A compute report registered into a history broke every later render: the record page's
template reached ``doc.conversion``, which only a loading report has. Each kind now has
its own template that reaches only the sections its record has; a page that still
cannot be drawn is replaced by the record's JSON and the error, the rest of the render
completes, the command exits 1 naming the record, and ``history verify`` names it.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from _postgres import postgres_socket, postgres_url  # noqa: F401 (fixtures)
from jinja2 import UndefinedError

from harness.cli import main
from harness.history.importer import import_reports
from harness.history.index_db import open_index
from harness.history.layout import HistoryLayout
from harness.history.lookup import LoadedReport
from harness.history.records import sha256_bytes
from harness.history.store import register_reports
from harness.history.verify import ProblemKind, verify_history
from harness.render import check_rendered, record_pages, registration_renderer, render_all
from harness.render.record_pages import FALLBACK_MARKER, RecordPagesFailed
from harness.report import dump_report
from harness.run.checks import FailureLog
from harness.run.recheck.record import recheck_record
from harness.testing import make_example_report

FIXTURES = Path(__file__).parent / "report_fixtures"
COMPUTE = FIXTURES / "compute-report.v1.json"  # `run compute virtual` on tests/data/srtio3
#: the same run refused mid-way (a calibration it does not use): no warm trials, no medians
COMPUTE_FAILED = FIXTURES / "compute-report-failed.v1.json"
LOADING_V0 = FIXTURES / "loading-report.v0.json"


def _recheck_doc() -> dict:
    """A recheck record: a loading report's content plus its ``recheck`` block."""
    candidate = make_example_report(7, reps=2)
    data = dump_report(candidate)
    contention = {"before": {}, "after": {}, "thresholds": {}, "contended": False, "reasons": []}
    measured = {"trials": [], "contention": contention}
    fingerprint = "ab" * 32
    return recheck_record(
        LoadedReport(candidate, sha256_bytes(data), Path("candidate.json")),
        rounds=1,
        cells=[],
        command=["harness", "recheck"],
        measured=measured,
        created="2026-11-30T09:00:00Z",
        provenance={
            "source_fingerprint_start": fingerprint,
            "source_fingerprint_end": fingerprint,
        },
        stable=True,
        log=FailureLog(),
    )


def kinds_of_reports() -> dict[str, bytes]:
    """One report of each kind that `register` takes (bytes, as registered)."""
    return {
        "io-scale": dump_report(make_example_report(1, reps=2)),
        "compute": COMPUTE.read_bytes(),
        "compute-failed": COMPUTE_FAILED.read_bytes(),
        "recheck": dump_report(_recheck_doc()),
        "migrated": LOADING_V0.read_bytes(),  # schema_version 0, migrated in memory
    }


def _register_every_kind(history: Path, tmp_path: Path) -> dict[str, str]:
    shas = {}
    for kind, data in kinds_of_reports().items():
        (result,) = register_reports(history, [data], render=registration_renderer("defer"))
        shas[kind] = result.sha256
    # imported: `history import` of a folder holding an earlier loading.json
    folder = tmp_path / "earlier" / "run1"
    folder.mkdir(parents=True)
    doc = json.loads(LOADING_V0.read_bytes())
    doc["created_utc"] = "2026-01-02T03:04:05Z"  # another record than "migrated"
    (folder / "loading.json").write_text(json.dumps(doc))
    (result,), refused = import_reports(history, [tmp_path / "earlier"], render=None)
    assert not refused
    shas["imported"] = result.sha256
    return shas


def _render(history: Path) -> None:
    layout = HistoryLayout.at(history)
    engine = open_index(layout.index_db, create=False)
    try:
        render_all(layout, engine, plots="all")
    finally:
        engine.dispose()


def _verify(history: Path):
    return verify_history(history, check_rendered=check_rendered)


@pytest.mark.slow
def test_every_record_kind_renders_and_verifies(tmp_path: Path) -> None:
    history = tmp_path / "h"
    shas = _register_every_kind(history, tmp_path)
    _render(history)  # raised UndefinedError on doc.conversion before
    report = _verify(history)
    assert report.ok, [str(p) for p in report.problems]
    for kind, sha in shas.items():
        page = (history / "dashboard" / "records" / f"{sha}.html").read_bytes()
        assert FALLBACK_MARKER not in page, kind
        assert sha.encode() in page
    compute = (history / "dashboard" / "records" / f"{shas['compute']}.html").read_text()
    assert "Trials, one row per stage" in compute and "Conversion" not in compute
    recheck = (history / "dashboard" / "records" / f"{shas['recheck']}.html").read_text()
    assert 'id="recheck"' in recheck


def test_a_compute_record_registers_and_renders_through_the_cli(tmp_path: Path, capsys) -> None:
    history = tmp_path / "h"
    for report in (COMPUTE, COMPUTE_FAILED):  # plots and key pages drawn at registration
        code = main(["history", "register", str(report), "--history-dir", str(history)])
        assert code == 0, capsys.readouterr().err
    assert main(["render", "index", "--full", "--history-dir", str(history)]) == 0
    assert main(["history", "verify", "--history-dir", str(history)]) == 0


@pytest.mark.slow
def test_a_page_that_cannot_be_drawn_shows_its_json_and_never_wedges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    history = tmp_path / "h"
    shas = _register_every_kind(history, tmp_path)
    victim = shas["compute"]
    build = record_pages.RecordPageBuilder._build

    def failing(self, sha256, *args, **kwargs):
        if sha256 == victim:
            raise UndefinedError("'dict object' has no attribute 'conversion'")
        return build(self, sha256, *args, **kwargs)

    monkeypatch.setattr(record_pages.RecordPageBuilder, "_build", failing)
    with pytest.raises(RecordPagesFailed) as caught:
        _render(history)
    assert victim in str(caught.value) and "conversion" in str(caught.value)
    pages = history / "dashboard" / "records"
    for sha in shas.values():  # every other page is drawn; the render completed
        assert (FALLBACK_MARKER in (pages / f"{sha}.html").read_bytes()) == (sha == victim)
    assert (history / "index.html").is_file() and (history / "index.json").is_file()
    fallback = (pages / f"{victim}.html").read_text()
    assert "quantem-harness/compute-report" in fallback  # the record's JSON, escaped
    assert "&#39;dict object&#39; has no attribute" in fallback
    # verify names it, as an error
    report = _verify(history)
    failed = [p for p in report.problems if p.kind is ProblemKind.PAGE_FAILED]
    assert len(failed) == 1 and victim in failed[0].detail and not report.ok
    # through the CLI: exit 1, the record named, no traceback
    assert main(["render", "index", "--full", "--history-dir", str(history)]) == 1
    err = capsys.readouterr().err
    assert victim in err and "Traceback" not in err
    assert main(["history", "verify", "--history-dir", str(history)]) == 1
    captured = capsys.readouterr()
    assert victim in captured.out + captured.err
    # once the page can be drawn, a render draws it and verify is clean again
    monkeypatch.setattr(record_pages.RecordPageBuilder, "_build", build)
    assert main(["render", "index", "--full", "--history-dir", str(history)]) == 0
    assert FALLBACK_MARKER not in (pages / f"{victim}.html").read_bytes()
    assert main(["history", "verify", "--history-dir", str(history)]) == 0


@pytest.mark.slow
def test_a_record_whose_bytes_no_longer_parse_gets_the_fallback_page(tmp_path: Path) -> None:
    """A page is built from bytes the renderer cannot read as a report (here the record's
    schema name swapped in memory): its page is the fallback, the others are drawn."""
    history = tmp_path / "h"
    shas = _register_every_kind(history, tmp_path)
    read = record_pages.read_record_doc

    def odd(path):
        doc = copy.deepcopy(read(path))
        if path.name.startswith(shas["io-scale"]):
            del doc["trials"]
        return doc

    record_pages.read_record_doc = odd
    try:
        with pytest.raises(RecordPagesFailed) as caught:
            _render(history)
    finally:
        record_pages.read_record_doc = read
    assert shas["io-scale"] in str(caught.value) and "trials" in str(caught.value)


SRTIO3 = Path(__file__).parent / "data" / "srtio3" / "srtio3_focus_high_master.h5"
CALIBRATION = ["--energy-ev", "200e3", "--mrad-per-pixel", "2.14078876", "--scan-step", "0.488125"]
WORKLOAD_OPTIONS = {  # each workload's calibration: what it uses, no more (it refuses more)
    "virtual": [],
    "dpc": CALIBRATION,
    "parallax": CALIBRATION[2:],  # no energy without a convergence angle
    "ssb": [*CALIBRATION, "--convergence-mrad", "20", "--trials", "2", "--refine-evaluations", "3"],
}


@pytest.mark.slow
def test_every_compute_workload_registers_and_renders_from_run(tmp_path: Path, capsys) -> None:
    """The issue's command: `run compute WORKLOAD ... --history-dir H` for each workload."""
    history = tmp_path / "h"
    for workload, extra in WORKLOAD_OPTIONS.items():
        argv = ["run", "compute", workload, "--source", str(SRTIO3), "--backend", "cpu"]
        argv += ["--output-dir", str(tmp_path / workload), "--reps", "1", "--history-dir"]
        code = main([*argv, str(history), *extra])
        err = capsys.readouterr().err
        assert code == 0, (workload, err)
        assert "Traceback" not in err
    assert main(["render", "index", "--full", "--history-dir", str(history)]) == 0
    assert main(["history", "verify", "--history-dir", str(history)]) == 0
    pages = sorted((history / "dashboard" / "records").glob("*.html"))
    assert len(pages) == len(WORKLOAD_OPTIONS)
    assert not any(FALLBACK_MARKER in page.read_bytes() for page in pages)


@pytest.mark.slow
def test_every_record_kind_renders_from_a_postgres_history(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811
    capsys,
) -> None:
    assert main(["history", "init-db", postgres_url]) == 0
    where = ["--history-url", postgres_url]
    shas = {}
    for kind, data in kinds_of_reports().items():
        path = tmp_path / f"{kind}.json"
        path.write_bytes(data)
        assert main(["history", "register", str(path), *where]) == 0, capsys.readouterr().err
        shas[kind] = sha256_bytes(data)
    out = tmp_path / "out"
    code = main(["render", "index", "--out", str(out), *where])
    assert code == 0, capsys.readouterr().err
    for kind, sha in shas.items():
        page = (out / "dashboard" / "records" / f"{sha}.html").read_bytes()
        assert FALLBACK_MARKER not in page, kind
    assert main(["history", "verify", *where]) == 0, capsys.readouterr().err
