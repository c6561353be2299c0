"""The published results page: generated from docs/performance/claims.toml and the committed
evidence history, verifiable, and refused when page, claims and records disagree."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.commands.history_publish import DEFAULT_CLAIMS, DEFAULT_EVIDENCE_DIR, DEFAULT_PAGE
from harness.history.layout import HistoryLayout
from harness.history.records import sha256_bytes
from harness.history.store import register_reports
from harness.history.verify import ProblemKind, verify_history
from harness.render.claims import ClaimsError, parse_claims, resolve_claim
from harness.render.results_page import render_results_page
from harness.report import dump_report
from harness.testing import make_example_report

REPO = Path(__file__).resolve().parents[1]
EVIDENCE = REPO / DEFAULT_EVIDENCE_DIR


def _harness(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        timeout=300,
        check=False,
    )


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """The committed page, claims and evidence, copied (checks must not touch the checkout)."""
    root = tmp_path / "repo"
    (root / "docs" / "performance").mkdir(parents=True)
    shutil.copytree(
        EVIDENCE,
        root / DEFAULT_EVIDENCE_DIR,
        ignore=shutil.ignore_patterns(
            "index.sqlite*",
            ".lock",
            "index.json",
            "timings.csv",
            "README.md",
            "index.html",
            "plots",
            "dashboard",
        ),
    )
    shutil.copy(REPO / DEFAULT_CLAIMS, root / DEFAULT_CLAIMS)
    shutil.copy(REPO / DEFAULT_PAGE, root / DEFAULT_PAGE)
    return root


def test_committed_page_is_what_the_committed_records_give(tmp_path: Path):
    """In-process, fast: the CLI version below is the slow tier's."""
    history = tmp_path / "evidence"
    shutil.copytree(EVIDENCE / "records", history / "records")
    shutil.copy(EVIDENCE / "history.json", history)
    shutil.copy(EVIDENCE / "journal.jsonl", history)
    result = verify_history(history, records_only=True)
    assert result.ok, [str(p) for p in result.problems]
    expected = render_results_page(
        parse_claims(REPO / DEFAULT_CLAIMS), EVIDENCE, REPO / DEFAULT_PAGE
    )
    assert (REPO / DEFAULT_PAGE).read_text() == expected, "run `harness history publish`"


@pytest.mark.slow
def test_committed_evidence_verifies_and_the_page_is_what_the_records_give(repo_copy: Path):
    verified = _harness(
        "history", "verify", "--records-only", "--history-dir", DEFAULT_EVIDENCE_DIR, cwd=repo_copy
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert " 0 errors" in verified.stdout
    checked = _harness("history", "publish", "--check", cwd=repo_copy)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_every_claim_of_the_committed_file_resolves_to_a_committed_record():
    claims = parse_claims(REPO / DEFAULT_CLAIMS)
    assert claims.claims, "the page publishes no claim"
    layout = HistoryLayout.at(EVIDENCE)
    for claim in claims.claims:
        resolved = resolve_claim(claim, layout)
        if claim.unit == "fraction":
            assert 0 <= resolved.figure <= 1
        else:
            assert resolved.figure > 0
        assert (
            resolved.report["provenance"]["source_fingerprint_start"]
            in (REPO / DEFAULT_PAGE).read_text()
        )


@pytest.mark.slow
def test_an_edited_page_fails_the_check(repo_copy: Path):
    page = repo_copy / DEFAULT_PAGE
    text = page.read_text()
    # change one published figure, as a hand edit would
    edited = text.replace("| Figure | **", "| Figure | **1", 1)
    assert edited != text
    page.write_text(edited)
    checked = _harness("history", "publish", "--check", cwd=repo_copy)
    assert checked.returncode == 1
    assert "differs from what the records give" in checked.stderr


@pytest.mark.slow
def test_an_altered_record_fails_verify_and_publish(repo_copy: Path):
    claims = parse_claims(repo_copy / DEFAULT_CLAIMS)
    layout = HistoryLayout.at(repo_copy / DEFAULT_EVIDENCE_DIR)
    path = layout.record_path(claims.claims[0].record)
    path.chmod(0o644)
    path.write_bytes(path.read_bytes().replace(b'"median":', b'"median": ', 1))
    result = verify_history(layout.root, records_only=True)
    assert any(p.kind is ProblemKind.TAMPERED for p in result.errors)
    published = _harness("history", "publish", "--check", cwd=repo_copy)
    assert published.returncode == 64
    assert "does not hash to its name" in published.stderr


def _history_with(tmp_path: Path, reports: list[dict]) -> tuple[Path, list[str]]:
    history = tmp_path / "evidence"
    data = [dump_report(r) for r in reports]
    register_reports(history, data)
    return history, [sha256_bytes(d) for d in data]


def _claims_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "claims.toml"
    path.write_text("version = 1\n" + body)
    return path


def _claim(sha: str, extra: str = "", cell: str | None = None) -> str:
    cell = cell or '{ acquisition = "scan-a", format = "hdf5", cache_state = "cached" }'
    return f"""
[[claim]]
id = "c"
question = "How fast?"
goal = "fast"
record = "{sha}"
cell = {cell}
reproduce = "harness run io-scale --demo"
{extra}
"""


def test_records_only_verify_passes_without_derived_files_and_full_verify_does_not(tmp_path):
    history, _ = _history_with(tmp_path, [make_example_report(0)])
    layout = HistoryLayout.at(history)
    for derived in history.glob("index.sqlite*"):
        derived.unlink()
    for record in layout.iter_record_files():
        record.chmod(0o644)  # as git checks it out
    assert verify_history(history, records_only=True).ok
    full = verify_history(history)
    assert any(p.kind is ProblemKind.INDEX_MISSING for p in full.errors)


def test_floor_and_ratio_shown_when_the_record_has_them_and_goal_judged(tmp_path):
    report = make_example_report(0)
    with_floor = copy.deepcopy(report)
    for summary in with_floor["summaries"]:
        summary["floor_seconds"] = summary["median"] / 2
        summary["floor_method"] = "pread, 8 threads, 8 MiB pieces"
        summary["ratio_to_floor"] = 2.0
    history = tmp_path / "evidence"
    history.mkdir()
    layout = HistoryLayout.at(history)
    data = dump_report(with_floor)  # floor fields: written as a record would carry them
    sha = sha256_bytes(data)
    layout.record_path(sha).parent.mkdir(parents=True)
    layout.record_path(sha).write_bytes(data)
    claims = parse_claims(_claims_file(tmp_path, _claim(sha, "goal_max_ratio_to_floor = 1.5")))
    resolved = resolve_claim(claims.claims[0], layout)
    assert resolved.ratio_to_floor == 2.0
    assert resolved.goal_met is False
    page = render_results_page(claims, history, tmp_path / "results.md")
    assert "ratio to floor **2.00x**" in page
    assert "pread, 8 threads, 8 MiB pieces" in page
    assert "**not met**" in page


def test_a_goal_against_a_floor_the_figure_beats_is_undetermined_not_met(tmp_path):
    report = make_example_report(0)
    for summary in report["summaries"]:
        summary["floor_seconds"] = summary["median"] * 1.05
        summary["floor_method"] = "cold_pread_parallel"
        summary["ratio_to_floor"] = 1 / 1.05
        summary["floor_status"] = "too_weak"
    history, sha = _raw_history(tmp_path, report)
    claims = parse_claims(_claims_file(tmp_path, _claim(sha, "goal_max_ratio_to_floor = 1.2")))
    resolved = resolve_claim(claims.claims[0], HistoryLayout.at(history))
    # 0.95x is "at most 1.2x", but a floor the load beats bounds nothing
    assert resolved.goal_undetermined and resolved.goal_met is None
    page = render_results_page(claims, history, tmp_path / "results.md")
    assert "**undetermined**" in page and "| undetermined |" in page
    assert "**met**" not in page and "| met |" not in page


def test_a_record_without_floor_says_so_and_floor_cell_gives_a_ratio(tmp_path):
    history, (sha,) = _history_with(tmp_path, [make_example_report(0)])
    claims = parse_claims(_claims_file(tmp_path, _claim(sha)))
    page = render_results_page(claims, history, tmp_path / "results.md")
    assert "| Floor | none in this record |" in page
    floor_cell = '\nfloor_cell = { acquisition = "scan-a", format = "hdf5", cache_state = "cold" }'
    claims = parse_claims(_claims_file(tmp_path, _claim(sha, floor_cell)))
    resolved = resolve_claim(claims.claims[0], HistoryLayout.at(history))
    summaries = {
        s["cache_state"]: s
        for s in resolved.report["summaries"]
        if s["acquisition"] == "scan-a" and s["format"] == "hdf5"
    }
    assert resolved.ratio_to_floor == pytest.approx(
        summaries["cached"]["median"] / summaries["cold"]["median"]
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('record = "abc"', "full SHA-256"),
        ('cell = { acquisition = "nope" }', "matches 0 summary rows"),
        ('reproduce = "harness run compute dpc"', "does not run what the record ran"),
        ('goal = "fast"\ngoal_max_seconds = "soon"', "positive number"),
    ],
)
def test_bad_claims_are_refused_naming_the_claim(tmp_path, body, message):
    history, (sha,) = _history_with(tmp_path, [make_example_report(0)])
    text = _claim(sha)
    key = body.split(" =")[0]
    text = "\n".join(body if line.startswith(key + " =") else line for line in text.splitlines())
    claims_path = _claims_file(tmp_path, text)
    with pytest.raises(ClaimsError, match=message) as info:
        render_results_page(parse_claims(claims_path), history, tmp_path / "results.md")
    assert "'c'" in str(info.value)


def test_not_remeasured_figures_are_listed_apart_never_as_current(tmp_path):
    history, (sha,) = _history_with(tmp_path, [make_example_report(0)])
    stale = """
[[not_remeasured]]
id = "gpu-old"
question = "How fast is the warm GPU load?"
goal = "at most 1.5x its floor"
old_figure = "0.0248 s"
since = "ba87168"
source = "archive/performance-diary.md"
"""
    page = render_results_page(
        parse_claims(_claims_file(tmp_path, _claim(sha) + stale)), history, tmp_path / "r.md"
    )
    current, _, old = page.partition("## Not re-measured")
    assert "0.0248 s" not in current and "0.0248 s" in old
    assert "`ba87168`" in old


@pytest.mark.slow
def test_publish_cli_usage_errors(tmp_path):
    done = _harness(
        "history", "publish", "--history-dir", str(tmp_path), "--out", str(tmp_path / "p.md")
    )
    assert done.returncode == 64
    assert "not a history folder" in done.stderr
    assert "Traceback" not in done.stderr


BENCHMARKS = REPO / "benchmarks"


@pytest.mark.slow
def test_benchmarks_folder_is_small_and_every_script_has_help():
    files = sorted(p for p in BENCHMARKS.iterdir() if p.name != "__pycache__")
    assert len(files) <= 8, [p.name for p in files]
    assert (BENCHMARKS / "README.md") in files
    for script in files:
        if script.suffix != ".py":
            continue
        done = subprocess.run(
            [sys.executable, str(script), "--help"],
            capture_output=True,
            text=True,
            cwd=BENCHMARKS,
            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
            timeout=120,
            check=False,
        )
        assert done.returncode == 0 and "usage:" in done.stdout, (script.name, done.stderr)


def test_reproduce_may_prepare_data_first_but_must_end_in_the_records_command(tmp_path):
    history, (sha,) = _history_with(tmp_path, [make_example_report(0)])
    layout = HistoryLayout.at(history)
    good = _claim(sha).replace(
        'reproduce = "harness run io-scale --demo"',
        'reproduce = "harness data synth /tmp/a && harness run io-scale /tmp/a"',
    )
    assert resolve_claim(parse_claims(_claims_file(tmp_path, good)).claims[0], layout)
    bad = _claim(sha).replace(
        'reproduce = "harness run io-scale --demo"',
        'reproduce = "harness run io-scale --demo && harness run compute dpc"',
    )
    with pytest.raises(ClaimsError, match="does not run what the record ran"):
        resolve_claim(parse_claims(_claims_file(tmp_path, bad)).claims[0], layout)


@pytest.mark.slow
def test_a_demo_claim_is_comparable_with_a_fresh_demo_run(tmp_path: Path):
    """The page tells a reader to rerun `harness run io-scale --demo` and compare: a demo
    whose data or default conditions moved on would make that comparison `incomparable`."""
    import json

    claims = parse_claims(REPO / DEFAULT_CLAIMS).claims
    demo = [c for c in claims if c.reproduce.startswith("harness run io-scale --demo")]
    assert demo, "no published demo claim"
    layout = HistoryLayout(EVIDENCE)
    for reproduce, record in sorted({(c.reproduce, c.record) for c in demo}):
        words = reproduce.split()[1:]
        run = _harness(*words, "--output-dir", str(tmp_path / record[:12]), cwd=tmp_path)
        assert run.returncode in (0, 2), run.stdout + run.stderr
        compared = _harness(
            "compare",
            "--baseline",
            str(layout.record_path(record)),
            str(tmp_path / record[:12] / "loading.json"),
            "--format",
            "json",
            cwd=tmp_path,
        )
        document = json.loads(compared.stdout)
        assert document["differences"] == [], (record, document["differences"])


def _with_rate(report: dict, rate: float) -> dict:
    doc = copy.deepcopy(report)
    for summary in doc["summaries"]:
        summary["exit_2_rate"] = rate  # as a self-benchmark's verdict-e2e row carries it
    return doc


def _raw_history(tmp_path: Path, doc: dict) -> tuple[Path, str]:
    history = tmp_path / "evidence"
    history.mkdir()
    layout = HistoryLayout.at(history)
    data = dump_report(doc)
    sha = sha256_bytes(data)
    layout.record_path(sha).parent.mkdir(parents=True)
    layout.record_path(sha).write_bytes(data)
    return history, sha


@pytest.mark.parametrize(
    ("rate", "goal", "met"),
    [
        (0.05, "goal_max_value = 0.05", True),
        (0.10, "goal_max_value = 0.05", False),
        (0.80, "goal_min_value = 0.8", True),
        (0.75, "goal_min_value = 0.8", False),
    ],
)
def test_a_fraction_claim_is_shown_as_a_percentage_and_its_goal_judged(tmp_path, rate, goal, met):
    history, sha = _raw_history(tmp_path, _with_rate(make_example_report(0), rate))
    extra = f'statistic = "exit_2_rate"\nunit = "fraction"\n{goal}'
    claims = parse_claims(_claims_file(tmp_path, _claim(sha, extra)))
    resolved = resolve_claim(claims.claims[0], HistoryLayout.at(history))
    assert resolved.figure == rate and resolved.goal_met is met
    page = render_results_page(claims, history, tmp_path / "results.md")
    assert f"| Figure | **{rate * 100:.3g}%**, the exit_2_rate of" in page
    assert ("**met**" if met else "**not met**") in page


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('unit = "furlongs"', "unit must be one of"),
        ('unit = "fraction"\ngoal_max_seconds = 1', "a fraction has no seconds goal"),
        ("goal_min_value = -1", "at least 0"),
        ('statistic = "median"\nunit = "fraction"', "not a fraction"),
    ],
)
def test_bad_fraction_claims_are_refused(tmp_path, extra, message):
    doc = make_example_report(0)
    for summary in doc["summaries"]:
        summary["median"] = 2.5  # a median of seconds is no fraction
    history, sha = _raw_history(tmp_path, doc)
    with pytest.raises(ClaimsError, match=message):
        claims = parse_claims(_claims_file(tmp_path, _claim(sha, extra)))
        resolve_claim(claims.claims[0], HistoryLayout.at(history))


def test_a_claimed_revision_is_checked_against_the_records_fingerprint(tmp_path):
    # Device records named the device copy's stale .git: the claim names the tree instead.
    report = make_example_report(0)
    history, (sha,) = _history_with(tmp_path, [report])
    fingerprint = report["provenance"]["source_fingerprint_end"]
    rev = "ab" * 20
    claims = parse_claims(_claims_file(tmp_path, _claim(sha, f'revision = "{rev}"')))
    seen = []

    def holds(revision, fp):
        seen.append((revision, fp))
        return fp == fingerprint

    page = render_results_page(claims, history, tmp_path / "r.md", check_revision=holds)
    assert seen == [(rev, fingerprint)]
    assert f"`{rev[:12]}`, named by the claim" in page
    with pytest.raises(ClaimsError, match="does not hold the code that ran"):
        render_results_page(claims, history, tmp_path / "r.md", check_revision=lambda r, f: False)
    # git cannot tell (not in this clone): the same page, not refused
    unknown = render_results_page(
        claims, history, tmp_path / "r.md", check_revision=lambda r, f: None
    )
    assert unknown == page
    with pytest.raises(ClaimsError, match="40 hex"):
        parse_claims(_claims_file(tmp_path, _claim(sha, 'revision = "baa2be1"')))


def test_the_committed_gpu_claims_name_the_tree_their_records_ran():
    from harness.commands.history_publish import _revision_checker

    claims = [c for c in parse_claims(REPO / DEFAULT_CLAIMS).claims if c.revision]
    assert claims, "the device claims name their revision"
    check = _revision_checker(REPO)
    layout = HistoryLayout.at(REPO / DEFAULT_EVIDENCE_DIR)
    for claim in claims:
        fingerprint = resolve_claim(claim, layout).report["provenance"]["source_fingerprint_end"]
        if check(claim.revision, fingerprint) is None:
            pytest.skip("a clone without the claimed revision")
        assert check(claim.revision, fingerprint) is True, claim.id


def test_a_goal_below_other_claims_is_judged_by_their_figures(tmp_path):
    history, (sha,) = _history_with(tmp_path, [make_example_report(0)])

    def cell(cache: str) -> str:
        return f'{{ acquisition = "scan-a", format = "hdf5", cache_state = "{cache}" }}'

    def page(mine: str, theirs: str) -> str:
        body = _claim(sha, 'goal_below_claims = ["other"]', cell(mine))
        body += _claim(sha, cell=cell(theirs)).replace('id = "c"', 'id = "other"')
        return render_results_page(
            parse_claims(_claims_file(tmp_path, body)), history, tmp_path / "r.md"
        )

    # the example's cached load is faster than its cold one
    assert "**met** (against [other](#other)" in page("cached", "cold")
    assert "**not met** (against [other](#other)" in page("cold", "cached")
    with pytest.raises(ClaimsError, match="goal_below_claims names 'nowhere'"):
        parse_claims(_claims_file(tmp_path, _claim(sha, 'goal_below_claims = ["nowhere"]')))
