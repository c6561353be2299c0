"""The compute report (``compute.json``): its schema name, version, validation, serialisation.

Mirrors ``evidence_schema/compute-report.v1.json`` (docs/compute.md "Report"). The shared
sections follow the loading report, so the history and ``harness compare`` read both;
:func:`harness.report.validate_report` dispatches here on ``schema``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from harness.errors import ReportValidationError
from harness.resources import data_folder

SCHEMA_NAME = "quantem-harness/compute-report"
SCHEMA_VERSION = 1
BENCHMARK = "compute"
SCHEMA_PATH = data_folder("evidence_schema") / "compute-report.v1.json"


@functools.cache
def _validator() -> Any:
    from jsonschema import Draft202012Validator

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def validate_compute_report(doc: Mapping[str, Any], *, name: str = "report") -> None:
    """Schema check, then the cross-section rules: trials and summaries name known
    acquisitions and stages, and unique (acquisition, stage, trial_index)."""
    check_stage_report(doc, _validator(), name=name)
    # the schema allows any workload name (a new workload is one registry entry): the
    # benchmark must still be the workload's
    workload = doc["conditions"]["workload"]
    if doc["benchmark"] != f"compute-{workload}":
        raise _report_error(
            f"{name}: $.benchmark: {doc['benchmark']!r} is not the benchmark of workload "
            f"{workload!r} (compute-{workload})",
            source=name,
        )


def check_stage_report(doc: Mapping[str, Any], validator: Any, *, name: str) -> None:
    """The rules of every report whose cells are stages (compute, self): ``validator``'s
    schema, then trials that name known acquisitions and stages, each once."""
    from jsonschema.exceptions import best_match

    error = best_match(validator.iter_errors(doc))
    if error is not None:
        json_path = "$" + "".join(
            f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path
        )
        schema_path = "/".join(str(part) for part in error.absolute_schema_path)
        raise _report_error(
            f"{name}: {json_path}: {error.message[:200]} (schema: {schema_path})",
            source=name,
            json_path=json_path,
            schema_path=schema_path,
        )
    ids = [a["id"] for a in doc["acquisitions"]]
    stages = set(doc["conditions"]["stages"])
    if len(set(ids)) != len(ids):
        raise _report_error(f"{name}: $.acquisitions: duplicate ids", source=name)
    seen = set()
    for i, trial in enumerate(doc["trials"]):
        key = (trial["acquisition"], trial["stage"], trial["trial_index"])
        if trial["acquisition"] not in ids or trial["stage"] not in stages or key in seen:
            raise _report_error(
                f"{name}: $.trials[{i}]: unknown acquisition or stage, or a repeated trial",
                source=name,
            )
        if trial["cache_state"] != trial["stage"]:
            raise _report_error(
                f"{name}: $.trials[{i}]: cache_state must be the stage", source=name
            )
        seen.add(key)


def _report_error(
    message: str, *, source: str | None = None, **where: Any
) -> ReportValidationError:
    error = ReportValidationError(message)
    error.source = source
    error.json_path = where.get("json_path")
    error.schema_path = where.get("schema_path")
    return error


__all__ = [
    "BENCHMARK",
    "SCHEMA_NAME",
    "SCHEMA_PATH",
    "SCHEMA_VERSION",
    "check_stage_report",
    "validate_compute_report",
]
