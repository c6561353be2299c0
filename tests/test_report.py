"""The loading report: deterministic bytes, strict parsing, schema paths, migration."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from harness.errors import ReportValidationError
from harness.report import (
    SCHEMA_PATH,
    dump_report,
    parse_report,
    summarise_trials,
    validate_report,
)
from harness.testing import delete_path, make_example_report, set_path

FIXTURES = Path(__file__).parent / "report_fixtures"
# SHA-256 of the byte fixtures, fixed when they were written; never regenerate them.
V1_FIXTURE_SHA256 = "8ef47e65a2eac48766c6a5fed7fd1019e724276600863c84052a533eb7d4a382"


def test_example_report_is_valid_and_round_trips() -> None:
    doc = make_example_report()
    data = dump_report(doc)
    assert data.endswith(b"\n") and b"\n" not in data[:-1]
    assert parse_report(data) == doc


def test_dump_is_independent_of_key_order() -> None:
    doc = make_example_report(seed=3)
    reversed_doc = json.loads(
        json.dumps(doc), object_pairs_hook=lambda pairs: dict(reversed(pairs))
    )
    assert list(reversed_doc) != list(doc)
    assert dump_report(reversed_doc) == dump_report(doc)


def test_v1_byte_fixture_parses_and_reserialises_identically() -> None:
    data = (FIXTURES / "loading-report.v1.json").read_bytes()
    doc = parse_report(FIXTURES / "loading-report.v1.json")
    assert doc["acquisitions"][0]["id"] == "fixture-a"
    assert dump_report(doc) == data


def test_v0_fixture_is_migrated_in_memory_only() -> None:
    path = FIXTURES / "loading-report.v0.json"
    before = path.read_bytes()
    doc = parse_report(path)
    assert doc["schema_version"] == 1
    assert doc["protocol_version"] == 1
    assert doc["baseline"] is None
    assert doc["status"]["performance"] == "no_baseline"
    assert path.read_bytes() == before
    # the migrated document equals the v1 fixture written from the same run
    assert doc == parse_report(FIXTURES / "loading-report.v1.json")


def test_schema_file_is_a_valid_2020_12_schema() -> None:
    from jsonschema import Draft202012Validator

    schema = json.loads(SCHEMA_PATH.read_text())
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize(
    ("path", "value", "json_path", "schema_fragment"),
    [
        ("status.performance", "maybe", "$.status.performance", "enum"),
        ("trials.3.seconds", -1.0, "$.trials[3].seconds", "minimum"),
        (
            "acquisitions.0.source_master_sha256",
            "XYZ",
            "$.acquisitions[0].source_master_sha256",
            "pattern",
        ),
        ("environment.host.cores", "two", "$.environment.host.cores", "type"),
        ("created_utc", "yesterday", "$.created_utc", "pattern"),
        ("trials.0.residency_before", 1.5, "$.trials[0].residency_before", "maximum"),
        ("conditions.cache_states", [], "$.conditions.cache_states", "minItems"),
    ],
)
def test_schema_error_names_json_path_and_schema_path(
    path: str, value: object, json_path: str, schema_fragment: str
) -> None:
    doc = make_example_report()
    set_path(doc, path, value)
    with pytest.raises(ReportValidationError) as info:
        parse_report(json.dumps(doc).encode())
    assert info.value.json_path == json_path
    assert schema_fragment in info.value.schema_path
    assert json_path in str(info.value)


def test_missing_required_section_is_named() -> None:
    doc = make_example_report()
    delete_path(doc, "memory")
    with pytest.raises(ReportValidationError, match="'memory' is a required property") as info:
        validate_report(doc)
    assert info.value.json_path == "$"


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.9, 0.999])
def test_truncated_json_is_refused(keep: float) -> None:
    data = dump_report(make_example_report())
    cut = data[: int(len(data) * keep)]
    with pytest.raises(ReportValidationError, match="truncated JSON") as info:
        parse_report(cut, name="cut.json")
    assert info.value.json_path == "$"
    assert "cut.json" in str(info.value)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"a": 1, "a": 2}', "duplicate key 'a'"),
        (b'{"a": NaN}', "NaN is not allowed"),
        (b'{"a": Infinity}', "Infinity is not allowed"),
        (b"[1, 2]", "a report is a JSON object"),
        (b'{"a": "\xff"}', "not UTF-8"),
        (b"", "truncated JSON"),
    ],
)
def test_ambiguous_json_is_refused(data: bytes, message: str) -> None:
    with pytest.raises(ReportValidationError, match=message):
        parse_report(data)


def test_newer_schema_version_is_refused_with_an_upgrade_hint() -> None:
    doc = make_example_report()
    doc["schema_version"] = 2
    with pytest.raises(ReportValidationError, match="upgrade quantem-harness") as info:
        parse_report(json.dumps(doc).encode())
    assert info.value.json_path == "$.schema_version"


def test_foreign_schema_name_is_refused() -> None:
    doc = make_example_report()
    doc["schema"] = "someone-else/report"
    with pytest.raises(ReportValidationError, match=r"\$\.schema: expected"):
        parse_report(json.dumps(doc).encode())


@pytest.mark.parametrize(
    ("path", "value", "json_path"),
    [
        ("trials.2.acquisition", "nowhere", "$.trials[2].acquisition"),
        ("trials.1.label", "not-cold", "$.trials[1].label"),
        ("trials.1.trial_index", 0, "$.trials[1].trial_index"),
        ("summaries.0.n", 99, "$.summaries[0].n"),
        ("acquisitions.1.id", "scan-a", "$.acquisitions[1].id"),
    ],
)
def test_cross_section_inconsistencies_are_refused(
    path: str, value: object, json_path: str
) -> None:
    doc = make_example_report(updates={path: value})
    with pytest.raises(ReportValidationError) as info:
        validate_report(doc)
    assert info.value.json_path == json_path


def test_trial_in_an_unmeasured_cache_state_is_refused() -> None:
    doc = make_example_report(cache_states=("cached",))
    doc["trials"][0]["cache_state"] = "cold"
    doc["trials"][0]["label"] = "cold"
    with pytest.raises(ReportValidationError, match="not in"):
        validate_report(doc)


def test_dump_refuses_invalid_and_non_finite_documents() -> None:
    doc = make_example_report()
    doc["trials"][0]["seconds"] = float("nan")
    with pytest.raises(ReportValidationError):
        dump_report(doc)
    with pytest.raises(ReportValidationError, match="cannot be serialised"):
        dump_report(doc, validate=False)


def test_summaries_match_numpy_reference() -> None:
    rng = np.random.default_rng(5)
    trials = []
    for index, seconds in enumerate(rng.uniform(0.1, 2.0, size=11)):
        kept = index % 4 != 1
        trials.append(
            {
                "acquisition": "a",
                "format": "qem",
                "cache_state": "cold",
                "trial_index": index,
                "kept": kept,
                "seconds": float(seconds),
            }
        )
    kept_seconds = np.array([t["seconds"] for t in trials if t["kept"]])
    (summary,) = summarise_trials(trials)
    assert summary["n"] == 11 and summary["n_kept"] == len(kept_seconds)
    assert summary["median"] == pytest.approx(np.median(kept_seconds), rel=1e-12)
    assert summary["p95"] == pytest.approx(np.percentile(kept_seconds, 95), rel=1e-12)
    assert summary["first"] == trials[0]["seconds"]
    assert summary["min"] == kept_seconds.min() and summary["max"] == kept_seconds.max()


def test_cell_without_kept_trials_has_null_statistics() -> None:
    doc = make_example_report(
        acquisition_ids=("a",), formats=("hdf5",), cache_states=("cold",), reps=2
    )
    for trial in doc["trials"]:
        trial["kept"] = False
        trial["label"] = "not-cold"
    doc["summaries"] = summarise_trials(doc["trials"])
    validate_report(doc)
    assert doc["summaries"][0]["median"] is None and doc["summaries"][0]["n_kept"] == 0


def test_byte_fixture_hashes_are_stable() -> None:
    digest = hashlib.sha256((FIXTURES / "loading-report.v1.json").read_bytes()).hexdigest()
    assert digest == V1_FIXTURE_SHA256
