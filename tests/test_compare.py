"""Baseline comparison: verdicts, exit codes, comparability, statistics."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.compare import Verdict, compare_reports
from harness.history.store import register_reports
from harness.render import registration_renderer
from harness.report import dump_report
from harness.stats import mann_whitney_u, rank_with_ties, relative_spread, smallest_possible_p
from harness.testing import make_example_report

# --- statistics against published values -------------------------------------------------


def test_exact_mann_whitney_matches_table_values() -> None:
    # Complete separation of 5 vs 5: U = 0, two-sided exact p = 2 / C(10, 5) = 2/252.
    result = mann_whitney_u([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])
    assert result.u == 0 and result.method == "exact"
    assert result.p_value == pytest.approx(2 / 252)
    # 3 vs 3 separated: 2 / C(6, 3) = 0.1, the smallest p such samples can give.
    assert mann_whitney_u([1, 2, 3], [4, 5, 6]).p_value == pytest.approx(0.1)
    assert smallest_possible_p(3, 3) == pytest.approx(0.1)
    # Alternating 4 vs 4: ranks 1,3,5,7 give U = 16 - 10 = 6. The null distribution of U for
    # 4 vs 4 starts 1, 1, 2, 3, 5, 5, 7 (Mann & Whitney 1947, table I), so P(U <= 6) = 24/70
    # and the two-sided p-value is 48/70.
    result = mann_whitney_u([1, 3, 5, 7], [2, 4, 6, 8])
    assert result.u == 6 and result.p_value == pytest.approx(48 / 70)


def _brute_counts(n1: int, n2: int) -> list[int]:
    """Distribution of U by enumerating every split of 1..n1+n2 (an independent reference)."""
    from itertools import combinations

    counts = [0] * (n1 * n2 + 1)
    values = range(1, n1 + n2 + 1)
    for first in combinations(values, n1):
        rank_sum = sum(first)
        counts[rank_sum - n1 * (n1 + 1) // 2] += 1
    return counts


@pytest.mark.parametrize(("n1", "n2"), [(1, 1), (2, 5), (4, 4), (6, 3), (8, 8), (7, 8)])
def test_exact_p_matches_brute_force_enumeration(n1: int, n2: int) -> None:
    counts = _brute_counts(n1, n2)
    total = math.comb(n1 + n2, n1)
    for shift in range(0, n1 + n2 + 1, 2):
        first = [float(i) for i in range(n1)]
        second = [float(i) + shift - 0.5 for i in range(n2)]
        result = mann_whitney_u(first, second)
        u = int(result.u)
        small = min(u, n1 * n2 - u)
        expected = min(1.0, 2 * sum(counts[: small + 1]) / total)
        assert result.p_value == pytest.approx(expected, rel=1e-12)


@pytest.mark.slow  # importing scipy.stats takes seconds
def test_normal_approximation_with_ties_matches_scipy_when_available() -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    import random

    rng = random.Random(3)
    for _ in range(25):
        a = [round(rng.gauss(1.0, 0.2), 1) for _ in range(rng.randint(3, 20))]
        b = [round(rng.gauss(1.1, 0.2), 1) for _ in range(rng.randint(3, 20))]
        ours = mann_whitney_u(a, b)
        theirs = scipy_stats.mannwhitneyu(a, b, alternative="two-sided")
        assert ours.u == pytest.approx(theirs.statistic)
        assert ours.p_value == pytest.approx(theirs.pvalue, rel=1e-9, abs=1e-12)


def test_normal_approximation_textbook_value() -> None:
    # 10 vs 10 with no overlap: U = 0, mean 50, sd sqrt(10*10*21/12) = 13.2288;
    # z = (50 - 0.5) / 13.2288 = 3.7418, two-sided p = 1.8270e-4.
    result = mann_whitney_u(list(range(10)), list(range(10, 20)))
    assert result.method == "normal"
    assert result.p_value == pytest.approx(1.8270e-4, rel=1e-3)


def test_ranks_share_ties_and_spread_is_iqr_over_median() -> None:
    assert rank_with_ties([3.0, 1.0, 3.0, 2.0]) == [3.5, 1.0, 3.5, 2.0]
    # quartiles of 1..5 (linear): 2 and 4, median 3
    assert relative_spread([5, 1, 4, 2, 3]) == pytest.approx(2 / 3)
    assert relative_spread([]) is None
    with pytest.raises(ValueError):
        mann_whitney_u([], [1.0])


# --- verdicts ---------------------------------------------------------------------------


def test_same_conditions_within_threshold_pass() -> None:
    result = compare_reports(make_example_report(1), make_example_report(2, slowdown=1.05))
    assert result.verdict is Verdict.PASS and result.exit_code == 0
    assert len(result.cells) == 8 and not result.flagged_cells


def test_slowdown_past_threshold_is_review_with_flagged_cells() -> None:
    candidate = make_example_report(2)
    for trial in candidate["trials"]:
        if (
            trial["acquisition"] == "scan-b"
            and trial["format"] == "qem"
            and trial["cache_state"] == "cold"
        ):
            trial["seconds"] *= 1.5
    from harness.report import summarise_trials

    candidate["summaries"] = summarise_trials(candidate["trials"])
    result = compare_reports(make_example_report(1), candidate)
    assert result.verdict is Verdict.REVIEW and result.exit_code == 2
    (flagged,) = result.flagged_cells
    assert (flagged.acquisition, flagged.format, flagged.cache_state) == ("scan-b", "qem", "cold")
    assert flagged.change_percent == pytest.approx(50, abs=8)
    # 5 vs 5 fully separated: the one-sided (slower) exact p is 1 / C(10, 5); Holm over the
    # 8 cells multiplies the smallest p by 8, still below 0.05: a confirmed slowdown.
    assert flagged.p_value == pytest.approx(1 / 252)
    assert flagged.p_adjusted == pytest.approx(8 / 252)
    assert flagged.verdict.value == "slower"
    assert result.performance_status == "review"


def test_threshold_is_configurable_and_speedups_never_flag() -> None:
    baseline, candidate = make_example_report(1), make_example_report(2, slowdown=1.3)
    assert compare_reports(baseline, candidate, 20).verdict is Verdict.REVIEW
    assert compare_reports(baseline, candidate, 40).verdict is Verdict.PASS
    assert compare_reports(candidate, baseline, 20).verdict is Verdict.PASS
    with pytest.raises(ValueError):
        compare_reports(baseline, candidate, 0)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"storage_id": "other-disk"}, "environment.storage.storage_id"),
        ({"device_name": "Other GPU"}, "environment.device.name"),
        ({"device_uuid": "GPU-1234"}, "environment.device.uuid"),
        ({"backend": "native"}, "conditions.backend"),
        ({"representation": "encoded"}, "conditions.representation"),
        ({"timing_boundary": "device-array-ready"}, "conditions.timing_boundary"),
        ({"allocator_policy": "pool"}, "conditions.allocator_policy"),
        ({"cache_states": ("cold",)}, "conditions.cache_states"),
        ({"acquisition_ids": ("scan-a", "scan-c")}, "acquisitions[id, source_master_sha256]"),
        ({"updates": {"protocol_version": 2}}, "protocol_version"),
        (
            {"updates": {"acquisitions.0.source_master_sha256": "0" * 64}},
            "acquisitions[id, source_master_sha256]",
        ),
    ],
)
def test_each_comparability_field_makes_reports_incomparable(change: dict, field: str) -> None:
    result = compare_reports(make_example_report(1), make_example_report(2, **change))
    assert result.verdict is Verdict.INCOMPARABLE and result.exit_code == 2
    assert field in [d.field for d in result.differences]
    assert not result.cells


def test_cells_without_kept_trials_make_reports_incomparable() -> None:
    candidate = make_example_report(2)
    for trial in candidate["trials"]:
        if trial["cache_state"] == "cold" and trial["acquisition"] == "scan-a":
            trial["kept"] = False
            trial["label"] = "not-cold"
    result = compare_reports(make_example_report(1), candidate)
    assert result.verdict is Verdict.INCOMPARABLE
    assert result.differences[-1].field.startswith("measured cells")


def test_candidate_correctness_failure_exits_1_even_when_fast() -> None:
    result = compare_reports(
        make_example_report(1), make_example_report(2, slowdown=0.5, correctness="failed")
    )
    assert result.verdict is Verdict.FAILED and result.exit_code == 1
    assert "correctness failed" in result.failures


def test_failed_baseline_is_not_valid_evidence() -> None:
    result = compare_reports(make_example_report(1, correctness="failed"), make_example_report(2))
    assert result.verdict is Verdict.INCOMPARABLE
    assert result.differences[0].field.startswith("baseline status")


def test_too_few_and_too_noisy_trials_are_warned() -> None:
    few = compare_reports(make_example_report(1, reps=3), make_example_report(2, reps=3))
    # said once per cell, in the warnings of the cells no note already says it in
    for c in few.cells:
        said = [t for t in (*c.notes, *c.warnings) if t.startswith("not enough trials")]
        assert len(said) == 1, c
    noisy = compare_reports(make_example_report(1, noise=0.3), make_example_report(2, noise=0.02))
    assert any(any("baseline too noisy" in w for w in c.warnings) for c in noisy.cells)
    quiet = compare_reports(make_example_report(1), make_example_report(2))
    assert not any(c.warnings for c in quiet.cells)


# --- the command ------------------------------------------------------------------------


@pytest.fixture
def reports(tmp_path: Path) -> dict[str, Path]:
    named = {
        "base": make_example_report(1),
        "same": make_example_report(2, created_utc="2026-11-30T09:00:00Z"),
        "slow": make_example_report(3, slowdown=1.4),
        "other": make_example_report(4, storage_id="<img src=x onerror=alert(1)>|x"),
        "broken": make_example_report(5, correctness="failed"),
    }
    paths = {}
    for name, doc in named.items():
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_bytes(dump_report(doc))
    return paths


@pytest.mark.parametrize(
    ("candidate", "code"), [("same", 0), ("slow", 2), ("other", 2), ("broken", 1)]
)
def test_compare_command_exit_codes(reports, capsys, candidate: str, code: int) -> None:
    assert main(["compare", "--baseline", str(reports["base"]), str(reports[candidate])]) == code
    out = capsys.readouterr().out
    assert f"(exit {code})" in out
    if candidate == "slow":
        assert "**SLOWER**" in out and "p (Holm)" in out and "mann-whitney-exact" in out
    if candidate == "other":
        assert "storage\\_id" in out and "<img" not in out and "&lt;img" in out


def test_compare_by_sha_prefix_in_history_and_default_candidate(
    reports, tmp_path: Path, capsys
) -> None:
    history = tmp_path / "h"
    base, same = register_reports(
        history, [reports["base"], reports["same"]], render=registration_renderer("defer")
    )
    code = main(
        ["compare", "--baseline", base.sha256[:10], "--history-dir", str(history), "--json"]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["baseline_sha256"] == base.sha256 and data["candidate_sha256"] == same.sha256
    assert data["verdict"] == "pass" and data["baseline_path"].endswith(f"{base.sha256}.json")


def test_tampered_baseline_record_is_refused(reports, tmp_path: Path) -> None:
    import os

    history = tmp_path / "h"
    (base,) = register_reports(history, [reports["base"]], render=registration_renderer("defer"))
    os.chmod(base.path, 0o644)
    base.path.write_bytes(base.path.read_bytes().replace(b"bench-host", b"other-host"))
    code = main(
        [
            "compare",
            "--baseline",
            base.sha256[:8],
            str(reports["same"]),
            "--history-dir",
            str(history),
        ]
    )
    assert code == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["compare", "SOMETHING"],  # no --baseline
        ["compare", "--baseline", "zz", "--history-dir", "H"],  # not a hex prefix
        ["compare", "--baseline", "X.json", "--regression-percent", "-5"],
        ["compare", "--baseline", "X.json", "--regression-percent", "lots"],
    ],
)
def test_compare_usage_errors_exit_64(argv: list[str], tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse errors
        code = exc.code
    assert code == 64


def test_compare_usage_error_in_a_subprocess(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "harness", "compare", "--baseline", "zz", "--history-dir", "H"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert completed.returncode == 64, completed.stderr
    assert "Traceback" not in completed.stderr


def test_ambiguous_or_unknown_prefix_is_a_usage_error(reports, tmp_path: Path, capsys) -> None:
    history = tmp_path / "h"
    register_reports(history, [reports["base"]], render=registration_renderer("defer"))
    assert (
        main(["compare", "--baseline", "0000", str(reports["same"]), "--history-dir", str(history)])
        == 64
    )
    assert "no record" in capsys.readouterr().err


def test_comparison_key_follows_the_documented_fields() -> None:
    """The key is the first 16 hex digits of SHA-256 over the documented fields as canonical
    JSON (docs/history-format.md); rebuilt here by hand from the report."""
    import hashlib

    from harness.comparability import comparison_key

    doc = make_example_report(1, device_uuid="GPU-abc")
    fields = {
        "benchmark": "io-scale",
        "protocol_version": 1,
        "environment.device.name": "Example CPU",
        "environment.device.uuid": "GPU-abc",
        "environment.storage.storage_id": "test-nvme",
        "acquisitions[id, source_master_sha256]": sorted(
            [a["id"], a["source_master_sha256"]] for a in doc["acquisitions"]
        ),
        "conditions.timing_boundary": "host-array-returned",
        "conditions.allocator_policy": "default",
        "conditions.backend": "cpu",
        "conditions.representation": "dense",
        "conditions.cache_states": ["cached", "cold"],
    }
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    assert comparison_key(doc) == hashlib.sha256(text.encode()).hexdigest()[:16]
    # trial timings, dates and revisions do not change the group
    other = make_example_report(2, slowdown=2.0, device_uuid="GPU-abc", git_revision="f" * 40)
    assert comparison_key(other) == comparison_key(doc)


def test_missing_candidate_without_history_is_a_usage_error(reports, tmp_path: Path) -> None:
    code = main(
        ["compare", "--baseline", str(reports["base"]), "--history-dir", str(tmp_path / "none")]
    )
    assert code == 64


def test_verify_source_enters_the_key_only_when_on() -> None:
    """A record without the setting (every record before it existed) or with it off keeps
    its key; a run with --verify-source is another group, and compare names the field."""
    import copy

    from harness.comparability import collect_differences, comparison_key

    doc = make_example_report(1, device_uuid="GPU-abc")
    off = copy.deepcopy(doc)
    off["conditions"]["verify_source"] = False
    on = copy.deepcopy(doc)
    on["conditions"]["verify_source"] = True
    assert comparison_key(off) == comparison_key(doc)
    assert comparison_key(on) != comparison_key(doc)
    assert [d.field for d in collect_differences(doc, on)] == ["conditions.verify_source"]
    assert collect_differences(doc, off) == []
