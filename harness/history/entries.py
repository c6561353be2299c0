"""Index rows derived from one report (``docs/history-format.md`` "Index").

The same function feeds registration, rebuild and verification, so the index a
rebuild produces is exactly the one registration produced.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.comparability import canonical_json, comparison_fields, comparison_key
from harness.report import migrate_report, schema_version_of

TRIAL_FIELDS = (
    "acquisition",
    "format",
    "cache_state",
    "trial_index",
    "label",
    "kept",
    "seconds",
    "read_bytes",
    "file_bytes",
    "residency_before",
)
SUMMARY_FIELDS = (
    "acquisition",
    "format",
    "cache_state",
    "n",
    "n_kept",
    "first",
    "median",
    "p95",
    "min",
    "max",
    "verdict",
)


def host_load_of(doc: Mapping[str, Any]) -> str | None:
    """``status.host_load`` of a report (quiet or contended); None where it does not say
    (reports written before contention was sampled)."""
    return doc["status"].get("host_load")


def cell_verdicts_of(doc: Mapping[str, Any]) -> dict[tuple[str, str, str], str]:
    """Each cell's verdict against the report's explicit baseline (its ``comparison``),
    by (acquisition, format, cache state); empty without a comparison."""
    cells = (doc.get("comparison") or {}).get("cells") or []
    return {(c["acquisition"], c["format"], c["cache_state"]): c["verdict"] for c in cells}


def markers_of(data: bytes, name: str) -> tuple[str | None, dict] | None:
    """:func:`host_load_of` and :func:`cell_verdicts_of` a record's bytes (migrated in
    memory, as registration reads them); None when they no longer parse as a report."""
    try:
        doc = json.loads(data)
        doc = migrate_report(doc, schema_version_of(doc, name), name=name)
        return host_load_of(doc), cell_verdicts_of(doc)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None  # verify names such a record (its rows differ from what it gives)


@dataclass(frozen=True)
class IndexEntry:
    """What the index holds for one record: its row, its trials and its summaries."""

    record: dict[str, Any]
    trials: list[dict[str, Any]]
    summaries: list[dict[str, Any]]


def derive_entry(
    doc: Mapping[str, Any], *, sha256: str, path: str, size_bytes: int, schema_version: int
) -> IndexEntry:
    """Index rows for a (migrated, valid) report stored as ``path`` with ``sha256``."""
    device = doc["environment"]["device"]
    conditions = doc["conditions"]
    status = doc["status"]
    provenance = doc["provenance"]
    baseline = doc["baseline"] or {}
    key = comparison_key(doc)
    record = {
        "sha256": sha256,
        "path": path,
        "size_bytes": size_bytes,
        "schema_version": schema_version,
        "created_utc": doc["created_utc"],
        "git_revision": provenance["git_revision"],
        "git_dirty": bool(provenance["git_dirty"]),
        "device_kind": device["kind"],
        "device_name": device["name"],
        "device_uuid": device["uuid"],
        "storage_id": doc["environment"]["storage"]["storage_id"],
        "backend": conditions["backend"],
        "representation": conditions["representation"],
        "timing_boundary": conditions["timing_boundary"],
        "allocator_policy": conditions["allocator_policy"],
        "protocol_version": doc["protocol_version"],
        "execution": status["execution"],
        "correctness": status["correctness"],
        "source_stability": status["source_stability"],
        "performance": status["performance"],
        "exit_code": status["exit_code"],
        "baseline_sha256": baseline.get("sha256"),
        "baseline_path": baseline.get("path"),
        "comparison_key": key,
        "comparison_fields": canonical_json(comparison_fields(doc)),
        "host_load": host_load_of(doc),
    }
    record["index_entry"] = canonical_json(
        {
            "sha256": sha256,
            "path": path,
            "created_utc": record["created_utc"],
            "comparison_key": key,
            "provenance": {
                "git_revision": provenance["git_revision"],
                "git_dirty": record["git_dirty"],
                "diff_sha256": provenance["diff_sha256"],
                "python": provenance["python"],
            },
            "device": {k: device[k] for k in ("kind", "name", "uuid", "driver", "cuda_runtime")},
            "storage_id": record["storage_id"],
            "conditions": {
                k: conditions[k]
                for k in (
                    "backend",
                    "representation",
                    "timing_boundary",
                    "allocator_policy",
                    "cache_states",
                )
            },
            "protocol_version": record["protocol_version"],
            "acquisitions": [a["id"] for a in doc["acquisitions"]],
            "status": {
                k: status[k]
                for k in (
                    "execution",
                    "correctness",
                    "source_stability",
                    "performance",
                    "exit_code",
                )
            },
            "baseline": None
            if not baseline
            else {"sha256": baseline["sha256"], "path": baseline["path"]},
            # only where set, so that the entries of ordinary records keep their bytes
            **({"purpose": doc["purpose"]} if doc.get("purpose") else {}),
        }
    )
    trials = [{field: trial[field] for field in TRIAL_FIELDS} for trial in doc["trials"]]
    for trial in trials:
        trial["kept"] = bool(trial["kept"])
        trial["seconds"] = float(trial["seconds"])
        trial["residency_before"] = float(trial["residency_before"])
    verdicts = cell_verdicts_of(doc)
    summaries = [
        {
            **{field: summary[field] for field in SUMMARY_FIELDS if field != "verdict"},
            "verdict": verdicts.get(
                (summary["acquisition"], summary["format"], summary["cache_state"])
            ),
        }
        for summary in doc["summaries"]
    ]
    return IndexEntry(record=record, trials=trials, summaries=summaries)
