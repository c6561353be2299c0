"""The loading report (``loading.json``): parse, validate, migrate and serialise.

The format is specified by ``evidence_schema/loading-report.v1.json`` (JSON Schema
2020-12) and described in ``docs/history-format.md``; this module mirrors it with
named constants. Reports are evidence: serialisation is deterministic
(:func:`dump_report`), parsing rejects anything ambiguous (duplicate keys, NaN,
truncated JSON), older ``schema_version`` values are migrated in memory only, and
newer ones are refused with an actionable message.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.compute_report import SCHEMA_NAME as COMPUTE_SCHEMA_NAME
from harness.compute_report import validate_compute_report
from harness.errors import ReportValidationError
from harness.resources import data_folder
from harness.self_report import SCHEMA_NAME as SELF_SCHEMA_NAME
from harness.self_report import validate_self_report

#: Value of the top-level ``schema`` field.
SCHEMA_NAME = "quantem-harness/loading-report"
#: The ``schema_version`` this harness writes; it reads this and every older one.
SCHEMA_VERSION = 1
#: Version of the measurement protocol (what a trial means); part of the comparison key.
PROTOCOL_VERSION = 1
#: Value of the top-level ``benchmark`` field.
BENCHMARK = "io-scale"
#: The schema file (source tree, or the copy inside an installed wheel; see harness.resources).
SCHEMA_PATH = data_folder("evidence_schema") / "loading-report.v1.json"

EXECUTION_STATES = ("completed", "failed")
CORRECTNESS_STATES = ("passed", "failed")
SOURCE_STABILITY_STATES = ("stable", "changed")
PERFORMANCE_STATES = ("no_baseline", "pass", "review", "incomparable")
BACKENDS = ("cpu", "cuda", "native", "webgpu")
REPRESENTATIONS = ("dense", "encoded")
FORMATS = ("hdf5", "qem")
CACHE_STATES = ("cold", "cached")
TRIAL_LABELS = ("cold", "cached", "not-cold", "not-cached")
SUMMARY_STATISTICS = ("first", "median", "p95", "min", "max")

#: Largest report accepted (bytes); a report is a few hundred kilobytes at most.
MAX_REPORT_BYTES = 64 * 1024 * 1024


def dump_report(doc: Mapping[str, Any], *, validate: bool = True) -> bytes:
    """Serialise a report deterministically: sorted keys, compact separators, ASCII, newline.

    The same document always gives the same bytes, so its SHA-256 names it in the
    history. ``validate`` (default) refuses to serialise an invalid report.
    """
    if validate:
        validate_report(doc)
    try:
        text = json.dumps(
            doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
        )
    except ValueError as exc:  # NaN or infinity
        raise _report_error(f"report cannot be serialised: {exc}") from exc
    return text.encode("ascii") + b"\n"


def parse_report(source: bytes | str | Path, *, name: str | None = None) -> dict[str, Any]:
    """Read, check and migrate a report; return the document at :data:`SCHEMA_VERSION`.

    Parameters
    ----------
    source
        The report's bytes, or a path to it (``str`` or ``Path``).
    name
        How to name the report in error messages (defaults to the path, or ``<bytes>``).

    Raises
    ------
    ReportValidationError
        With ``json_path`` and ``schema_path`` of the first error, for malformed or
        truncated JSON, a newer ``schema_version``, a schema violation or an
        inconsistency between sections (see :func:`validate_report`).
    """
    data, label = read_report_bytes(source, name=name)
    doc = parse_report_json(data, name=label)
    version = schema_version_of(doc, label)
    doc = migrate_report(doc, version, name=label)
    validate_report(doc, name=label)
    return doc


def read_report_bytes(source: bytes | str | Path, *, name: str | None = None) -> tuple[bytes, str]:
    """Return ``(bytes, label)`` for a report given as bytes or a path; size-limited."""
    if isinstance(source, bytes | bytearray | memoryview):
        return bytes(source), name or "<bytes>"
    path = Path(source)
    label = name or str(path)
    try:
        size = path.stat().st_size
        if size > MAX_REPORT_BYTES:
            raise _report_error(
                f"{label}: {size} bytes is larger than the {MAX_REPORT_BYTES} bytes a report may have"
            )
        return path.read_bytes(), label
    except FileNotFoundError as exc:
        raise _report_error(f"{label}: no such report file") from exc
    except IsADirectoryError as exc:
        raise _report_error(f"{label}: is a folder, not a report file") from exc


def parse_report_json(data: bytes, *, name: str = "<bytes>") -> dict[str, Any]:
    """Decode strict JSON: UTF-8, one object, no duplicate keys, no NaN or infinity."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _report_error(
            f"{name}: not UTF-8 text (byte {exc.start})", source=name, json_path="$"
        ) from exc
    try:
        doc = json.loads(
            text, object_pairs_hook=_reject_duplicate_keys, parse_constant=_reject_constant
        )
    except json.JSONDecodeError as exc:
        hint = "truncated JSON" if looks_truncated(text) else "malformed JSON"
        raise _report_error(
            f"{name}: {hint}: {exc.msg} at line {exc.lineno} column {exc.colno} "
            f"(character {exc.pos} of {len(text)})",
            source=name,
            json_path="$",
        ) from exc
    except _StrictJsonError as exc:
        raise _report_error(f"{name}: {exc}", source=name, json_path="$") from exc
    if not isinstance(doc, dict):
        raise _report_error(
            f"{name}: $: a report is a JSON object, not {type(doc).__name__}",
            source=name,
            json_path="$",
        )
    return doc


def validate_report(doc: Mapping[str, Any], *, name: str = "report") -> None:
    """Check a current-version report against the schema, then across its sections.

    Schema errors are reported by the JSON path of the first (most relevant) error
    and the schema path that rejected it. The cross-section checks are those the
    schema cannot express: unique acquisition ids, trials and summaries that name a
    known acquisition, unique trial keys, summary counts equal to the trials, and
    labels consistent with cache states.
    """
    from jsonschema.exceptions import best_match

    if doc.get("schema") == COMPUTE_SCHEMA_NAME:  # a compute report: its own schema
        validate_compute_report(doc, name=name)
        return
    if doc.get("schema") == SELF_SCHEMA_NAME:  # a self-benchmark report: its own schema
        validate_self_report(doc, name=name)
        return
    error = best_match(_validator().iter_errors(doc))
    if error is not None:
        json_path = _format_json_path(error.absolute_path)
        schema_path = "/".join(str(part) for part in error.absolute_schema_path)
        raise _report_error(
            f"{name}: {json_path}: {_shorten(error.message)} (schema: {schema_path})",
            source=name,
            json_path=json_path,
            schema_path=schema_path,
        )
    _check_consistency(doc, name)


def migrate_report(doc: dict[str, Any], version: int, *, name: str = "report") -> dict[str, Any]:
    """Bring a document of ``version`` up to :data:`SCHEMA_VERSION`, in memory only.

    Evidence on disk is never rewritten; callers keep the original bytes.
    """
    if version > SCHEMA_VERSION:
        raise _report_error(
            f"{name}: $.schema_version: report has schema_version {version}, but this harness "
            f"reads only up to {SCHEMA_VERSION}; upgrade quantem-harness to read it",
            source=name,
            json_path="$.schema_version",
        )
    if version == SCHEMA_VERSION:
        return doc
    doc = copy.deepcopy(doc)
    while version < SCHEMA_VERSION:
        doc = _MIGRATIONS[version](doc)
        version += 1
    return doc


def summarise_trials(trials: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per-cell summaries (``first``, ``median``, ``p95``, ``min``, ``max``) of kept trials.

    A cell is (acquisition, format, cache state); cells are listed in the order they
    first appear. ``first`` is the kept trial with the lowest ``trial_index``;
    ``p95`` interpolates linearly between order statistics (numpy's default).
    Statistics are ``None`` for a cell with no kept trial.
    """
    cells: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for trial in trials:
        key = (trial["acquisition"], trial["format"], trial["cache_state"])
        cells.setdefault(key, []).append(trial)
    summaries = []
    for (acquisition, fmt, cache_state), members in cells.items():
        kept = sorted((t for t in members if t["kept"]), key=lambda t: t["trial_index"])
        seconds = sorted(float(t["seconds"]) for t in kept)
        summary: dict[str, Any] = {
            "acquisition": acquisition,
            "format": fmt,
            "cache_state": cache_state,
            "n": len(members),
            "n_kept": len(kept),
        }
        if seconds:
            summary.update(
                first=float(kept[0]["seconds"]),
                median=quantile(seconds, 0.5),
                p95=quantile(seconds, 0.95),
                min=seconds[0],
                max=seconds[-1],
            )
        else:
            summary.update(dict.fromkeys(SUMMARY_STATISTICS))
        summaries.append(summary)
    return summaries


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolation quantile of already sorted values (numpy's default method)."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    position = q * (len(sorted_values) - 1)
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    fraction = position - low
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * fraction


# --- internals -------------------------------------------------------------------


class _StrictJsonError(ValueError):
    pass


def _report_error(
    message: str,
    *,
    source: str | None = None,
    json_path: str | None = None,
    schema_path: str | None = None,
) -> ReportValidationError:
    """A ReportValidationError carrying where the problem is, for callers and tests."""
    error = ReportValidationError(message)
    error.source = source
    error.json_path = json_path
    error.schema_path = schema_path
    return error


def looks_truncated(text: str) -> bool:
    """True when ``text`` ends inside a string or with brackets still open (a cut-off file)."""
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
    return in_string or depth > 0 or not text.strip()


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _StrictJsonError(f"duplicate key {key!r} in a JSON object")
        result[key] = value
    return result


def _reject_constant(token: str) -> Any:
    raise _StrictJsonError(f"{token} is not allowed in a report (JSON has no such number)")


@functools.cache
def _validator() -> Any:
    from jsonschema import Draft202012Validator

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    # Local "#/$defs/..." references are inlined: resolving them per value is most of
    # jsonschema's cost on a report's hundreds of trials. Validation is unchanged.
    return Draft202012Validator(_inline_local_refs(schema, schema.get("$defs", {})))


def _inline_local_refs(node: Any, definitions: Mapping[str, Any]) -> Any:
    if isinstance(node, dict):
        reference = node.get("$ref")
        if isinstance(reference, str) and reference.startswith("#/$defs/") and len(node) == 1:
            return _inline_local_refs(definitions[reference.removeprefix("#/$defs/")], definitions)
        return {key: _inline_local_refs(value, definitions) for key, value in node.items()}
    if isinstance(node, list):
        return [_inline_local_refs(item, definitions) for item in node]
    return node


def schema_version_of(doc: Mapping[str, Any], name: str) -> int:
    """The ``schema_version`` a parsed document declares (0 for pre-schema reports)."""
    if "schema" not in doc and "schema_version" not in doc:
        # Reports written before the schema existed carry neither field: version 0.
        return 0
    if doc.get("schema") not in (SCHEMA_NAME, COMPUTE_SCHEMA_NAME, SELF_SCHEMA_NAME):
        raise _report_error(
            f"{name}: $.schema: expected {SCHEMA_NAME!r}, found {doc.get('schema')!r}",
            source=name,
            json_path="$.schema",
        )
    version = doc.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise _report_error(
            f"{name}: $.schema_version: expected a non-negative integer, found {version!r}",
            source=name,
            json_path="$.schema_version",
        )
    return version


def _migrate_0_to_1(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 0: reports from before the schema; same sections, no identification fields.

    Adds ``schema``/``schema_version``, ``protocol_version`` 1 (the only protocol
    those runs used), ``baseline`` null and ``status.performance`` ``no_baseline``
    when absent. Everything else must already be in the version 1 shape.
    """
    doc["schema"] = SCHEMA_NAME
    doc["schema_version"] = 1
    doc.setdefault("protocol_version", 1)
    doc.setdefault("baseline", None)
    status = doc.get("status")
    if isinstance(status, dict):
        status.setdefault("performance", "no_baseline")
    return doc


_MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {0: _migrate_0_to_1}


def _format_json_path(parts: Iterable[Any]) -> str:
    path = "$"
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _shorten(message: str, limit: int = 200) -> str:
    return message if len(message) <= limit else message[: limit - 3] + "..."


def _fail(name: str, json_path: str, detail: str) -> None:
    raise _report_error(f"{name}: {json_path}: {detail}", source=name, json_path=json_path)


def _check_consistency(doc: Mapping[str, Any], name: str) -> None:
    ids: set[str] = set()
    for i, acquisition in enumerate(doc["acquisitions"]):
        if acquisition["id"] in ids:
            _fail(
                name, f"$.acquisitions[{i}].id", f"duplicate acquisition id {acquisition['id']!r}"
            )
        ids.add(acquisition["id"])
    measured_states = set(doc["conditions"]["cache_states"])
    seen_trials: set[tuple[str, str, str, int]] = set()
    counts: dict[tuple[str, str, str], list[int]] = {}
    for i, trial in enumerate(doc["trials"]):
        path = f"$.trials[{i}]"
        if trial["acquisition"] not in ids:
            _fail(name, f"{path}.acquisition", f"unknown acquisition {trial['acquisition']!r}")
        if trial["cache_state"] not in measured_states:
            _fail(
                name,
                f"{path}.cache_state",
                f"{trial['cache_state']!r} is not in $.conditions.cache_states",
            )
        key = (trial["acquisition"], trial["format"], trial["cache_state"], trial["trial_index"])
        if key in seen_trials:
            _fail(name, f"{path}.trial_index", f"duplicate trial {key}")
        seen_trials.add(key)
        expected_label = trial["cache_state"] if trial["kept"] else f"not-{trial['cache_state']}"
        if trial["label"] != expected_label:
            _fail(
                name,
                f"{path}.label",
                f"label {trial['label']!r} contradicts cache_state {trial['cache_state']!r} "
                f"with kept={trial['kept']} (expected {expected_label!r})",
            )
        cell = counts.setdefault(key[:3], [0, 0])
        cell[0] += 1
        cell[1] += bool(trial["kept"])
    summarised: set[tuple[str, str, str]] = set()
    for i, summary in enumerate(doc["summaries"]):
        path = f"$.summaries[{i}]"
        key = (summary["acquisition"], summary["format"], summary["cache_state"])
        if key in summarised:
            _fail(name, path, f"duplicate summary for cell {key}")
        summarised.add(key)
        n, n_kept = counts.get(key, [0, 0])
        if (summary["n"], summary["n_kept"]) != (n, n_kept):
            _fail(
                name,
                f"{path}.n",
                f"summary says n={summary['n']}, n_kept={summary['n_kept']} but the trials "
                f"of cell {key} give n={n}, n_kept={n_kept}",
            )
        missing = [s for s in SUMMARY_STATISTICS if (summary[s] is None) != (n_kept == 0)]
        if missing:
            _fail(
                name,
                f"{path}.{missing[0]}",
                "statistics must be numbers when trials were kept and null when none were",
            )
    unsummarised = sorted(set(counts) - summarised)
    if unsummarised:
        _fail(name, "$.summaries", f"no summary for measured cell {unsummarised[0]}")
