"""The self-benchmark report (``self.json``): schema name, version and validation.

Mirrors ``evidence_schema/self-report.v1.json`` (docs/self-benchmark.md). Its cells are
stages like a compute report's (the scale, ``records-N``, is the acquisition), so the
history, the dashboard and ``harness compare`` read it with the same code;
:func:`harness.report.validate_report` dispatches here on ``schema``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from harness.compute_report import check_stage_report
from harness.resources import data_folder

SCHEMA_NAME = "quantem-harness/self-report"
SCHEMA_VERSION = 1
BENCHMARK = "self"
SCHEMA_PATH = data_folder("evidence_schema") / "self-report.v1.json"


@functools.cache
def _validator() -> Any:
    from jsonschema import Draft202012Validator

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def validate_self_report(doc: Mapping[str, Any], *, name: str = "report") -> None:
    """Schema check, then the stage rules shared with the compute report."""
    check_stage_report(doc, _validator(), name=name)


__all__ = ["BENCHMARK", "SCHEMA_NAME", "SCHEMA_PATH", "SCHEMA_VERSION", "validate_self_report"]
