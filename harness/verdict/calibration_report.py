"""The calibration report: document, schema, and its place in a history.

``evidence_schema/calibration-report.v1.json`` is the schema. A calibration is built
from N >= 5 registered io-scale reports of the same comparison key, all of which
passed; it stores every cell's kept trial seconds per run (so any later comparison can
rebuild the calibrated null at its own rep counts) and the figures at the runs' own
rep count (A/A ratio quantiles, noise floor, minimum detectable change, false-positive
rates). It is serialised deterministically (sorted keys, compact separators, ASCII,
one newline) and stored content-addressed and read-only beside the history's records,
under ``calibrations/records/sha256/ab/<sha256>.json`` (docs/history-format.md,
"Calibrations"), written under the history's lock with the same write-once rule.
"""

from __future__ import annotations

import datetime
import functools
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.comparability import comparison_fields, comparison_key
from harness.errors import HistoryError, ReportValidationError, UsageError
from harness.fsio import write_new
from harness.history.backend import HistoryBackend, intact_calibrations
from harness.history.folder_history import FolderHistory
from harness.history.lookup import one_match, parse_sha_prefix
from harness.history.records import sha256_bytes
from harness.report import parse_report_json
from harness.resources import data_folder
from harness.verdict.calibration import DEFAULT_DRAWS_PER_PAIR, MIN_RUNS, CalibratedNull
from harness.verdict.comparison import CalibrationUse, collect_cells
from harness.verdict.resampling import DEFAULT_SEED

SCHEMA_NAME = "quantem-harness/calibration-report"
SCHEMA_VERSION = 1
SCHEMA_PATH = data_folder("evidence_schema") / "calibration-report.v1.json"
RATIO_QUANTILES = (0.025, 0.05, 0.5, 0.95, 0.975)

CellKey = tuple[str, str, str]


@dataclass(frozen=True)
class StoredCalibration:
    """A calibration read back: document, SHA-256 and path."""

    doc: dict[str, Any]
    sha256: str
    path: Path
    #: stored by this call (False: read back, or identical bytes already stored)
    created: bool = False

    def null(self) -> CalibratedNull:
        return null_from_document(self.doc)


def _runs_per_cell(run_docs: Sequence[Mapping[str, Any]]) -> dict[CellKey, list[list[float]]]:
    keys: set[CellKey] = set()
    per_run = [collect_cells(doc) for doc in run_docs]
    for cells in per_run:
        keys |= set(cells)
    return {key: [cells.get(key, []) for cells in per_run] for key in sorted(keys)}


def build_calibration(
    runs: Sequence[tuple[Mapping[str, Any], str]],
    *,
    regression_percent: float,
    alpha: float,
    command: Sequence[str],
    seed: int = DEFAULT_SEED,
    draws_per_pair: int = DEFAULT_DRAWS_PER_PAIR,
    created_utc: str | None = None,
) -> dict[str, Any]:
    """The calibration document of ``runs`` (each a parsed report and its SHA-256).

    Raises
    ------
    UsageError
        Fewer than :data:`MIN_RUNS` runs.
    ReportValidationError
        A run that did not pass, or runs of different comparison keys or rep counts.
    """
    if len(runs) < MIN_RUNS:
        raise UsageError(f"a calibration needs at least {MIN_RUNS} runs, not {len(runs)}")
    docs = [doc for doc, _ in runs]
    key = comparison_key(docs[0])
    for doc, sha in runs:
        status = doc["status"]
        if (status["execution"], status["correctness"], status["source_stability"]) != (
            "completed",
            "passed",
            "stable",
        ):
            raise ReportValidationError(f"calibration run {sha[:12]} did not pass: {status}")
        if comparison_key(doc) != key:
            raise ReportValidationError(
                f"calibration run {sha[:12]} has comparison key {comparison_key(doc)}, not {key}"
            )
    reps = {int(doc["conditions"]["reps"]) for doc in docs}
    if len(reps) != 1:
        raise ReportValidationError(f"calibration runs differ in reps: {sorted(reps)}")
    (rep_count,) = reps
    runs_per_cell = _runs_per_cell(docs)
    null = CalibratedNull(runs_per_cell, draws_per_pair=draws_per_pair, seed=seed)
    per_cell, overall = null.false_positive_rates(
        rep_count, rep_count, threshold_percent=regression_percent, alpha=alpha
    )
    cells = []
    for cell_key, seconds in runs_per_cell.items():
        if not null.usable(cell_key):
            continue
        ratios = null.null_ratios(cell_key, rep_count, rep_count)
        quantiles = np.quantile(ratios, RATIO_QUANTILES)
        rule, verdict = per_cell.get(cell_key, (0.0, 0.0))
        cells.append(
            {
                "acquisition": cell_key[0],
                "format": cell_key[1],
                "cache_state": cell_key[2],
                "runs_seconds": seconds,
                "ratio_quantiles": {f"{q:g}": float(v) for q, v in zip(RATIO_QUANTILES, quantiles)},
                "noise_floor_percent": null.noise_floor(cell_key, rep_count, rep_count),
                "flag_mdc_percent": null.flag_mdc(
                    cell_key, rep_count, rep_count, threshold_percent=regression_percent
                ),
                "mdc_percent": null.mdc(
                    cell_key,
                    rep_count,
                    rep_count,
                    threshold_percent=regression_percent,
                    alpha=alpha,
                    cells=len(runs_per_cell),
                ),
                "false_positive_rule": rule,
                "false_positive_verdict": verdict,
            }
        )
    created = created_utc or datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    return {
        "schema": SCHEMA_NAME,
        "schema_version": SCHEMA_VERSION,
        "benchmark": docs[0]["benchmark"],
        "created_utc": created,
        "command": [str(a) for a in command],
        "comparison_key": key,
        "comparison_fields": json.loads(json.dumps(comparison_fields(docs[0]))),
        "reps": rep_count,
        "regression_percent": float(regression_percent),
        "alpha": float(alpha),
        "seed": int(seed),
        "draws_per_pair": int(draws_per_pair),
        "runs": [
            {
                "sha256": sha,
                "created_utc": doc["created_utc"],
                "git_revision": doc["provenance"].get("git_revision"),
            }
            for doc, sha in runs
        ],
        "cells": cells,
        "comparison": {"false_positive_rule": overall[0], "false_positive_verdict": overall[1]},
    }


def null_from_document(doc: Mapping[str, Any]) -> CalibratedNull:
    """The calibrated null a stored calibration describes (same seed, same numbers)."""
    runs = {
        (c["acquisition"], c["format"], c["cache_state"]): c["runs_seconds"] for c in doc["cells"]
    }
    return CalibratedNull(runs, draws_per_pair=doc["draws_per_pair"], seed=doc["seed"])


@functools.cache
def _validator() -> Any:
    from jsonschema import Draft202012Validator

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def validate_calibration(doc: Mapping[str, Any], *, name: str = "calibration") -> None:
    from jsonschema.exceptions import best_match

    error = best_match(_validator().iter_errors(doc))
    if error is not None:
        path = "$" + "".join(
            f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path
        )
        raise ReportValidationError(f"{name}: {path}: {error.message[:300]}")


def dump_calibration(doc: Mapping[str, Any]) -> bytes:
    """Deterministic bytes of a (valid) calibration document."""
    validate_calibration(doc)
    text = json.dumps(
        doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )
    return text.encode("ascii") + b"\n"


def parse_calibration(data: bytes, *, name: str) -> dict[str, Any]:
    """Read a calibration: strict JSON, a known version, valid against its schema."""

    doc = parse_report_json(data, name=name)
    if doc.get("schema") != SCHEMA_NAME:
        raise ReportValidationError(
            f"{name}: not a calibration report (schema {doc.get('schema')!r})"
        )
    version = doc.get("schema_version")
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise ReportValidationError(
            f"{name}: calibration schema_version {version} is newer than this harness reads "
            f"({SCHEMA_VERSION}); upgrade quantem-harness"
        )
    validate_calibration(doc, name=name)
    return doc


def register_calibration(history_dir: str | Path, data: bytes) -> StoredCalibration:
    """Store a calibration's bytes in the history folder (validated, write-once)."""
    return store_calibration(FolderHistory(history_dir), data)


def store_calibration(history: HistoryBackend, data: bytes) -> StoredCalibration:
    """Validate a calibration's bytes and store them in ``history`` (write-once,
    content-addressed; identical bytes are a no-op)."""
    doc = parse_calibration(data, name="calibration")
    history.require_calibrations()
    sha256, created = history.store_calibration(data)
    return StoredCalibration(doc, sha256, Path(history.calibration_label(sha256)), created)


def _as_history(history: HistoryBackend | str | Path | None) -> HistoryBackend | None:
    """A history given by a folder's path, as a backend."""
    return FolderHistory(history) if isinstance(history, (str, Path)) else history


def iter_calibrations(history: HistoryBackend | str | Path) -> list[StoredCalibration]:
    """Every stored calibration that reads back intact, oldest first (by created_utc).

    One whose bytes are no valid calibration (an older server let it in, or an edit by
    hand) is never trusted and never fatal: skipped with a warning on stderr."""
    history = _as_history(history)
    found = []
    for sha256, data in intact_calibrations(history):
        label = history.calibration_label(sha256)
        try:
            doc = parse_calibration(data, name=label)
        except ReportValidationError as exc:
            print(f"warning: skipped {exc} (history verify names it)", file=sys.stderr)
            continue
        found.append(StoredCalibration(doc, sha256, Path(label)))
    return sorted(found, key=lambda c: (c.doc["created_utc"], c.sha256))


def _named_calibration(history: HistoryBackend, prefix: str) -> StoredCalibration:
    """The stored calibration whose SHA-256 starts with ``prefix``; its bytes re-hashed."""
    wanted = parse_sha_prefix(prefix, what="calibration")
    if not history.exists():
        raise HistoryError(f"{history.where}: no such history folder")
    rows = dict(history.calibration_rows())
    sha256 = one_match(
        sorted(sha for sha in rows if sha.startswith(wanted)),
        wanted,
        f"{history.where} (calibrations)",
        "calibration",
    )
    label = history.calibration_label(sha256)
    if sha256_bytes(rows[sha256]) != sha256:
        raise HistoryError(f"{label}: calibration bytes no longer match their name (tampered)")
    return StoredCalibration(parse_calibration(rows[sha256], name=label), sha256, Path(label))


def find_calibration(
    history: HistoryBackend | str | Path | None, *, prefix: str | None, key: str
) -> tuple[StoredCalibration | None, str]:
    """The calibration named by ``prefix`` (a calibration file, or a SHA-256 prefix of
    one in ``history``), else the newest in ``history`` whose comparison key is ``key``.

    Returns the calibration (or None) and a note saying which was chosen or why none.

    Raises
    ------
    UsageError
        A prefix that matches nothing, or several, or names a calibration of another key.
    """
    history = _as_history(history)
    if prefix is not None:
        path = Path(prefix)
        if path.is_file():
            data = path.read_bytes()
            stored = StoredCalibration(
                parse_calibration(data, name=str(path)), sha256_bytes(data), path
            )
        elif history is None:
            raise UsageError("--calibration needs --history-dir (where calibrations are stored)")
        else:
            stored = _named_calibration(history, prefix)
        check_calibration_key(stored, key)
        return stored, "named with --calibration"
    if history is None or not history.exists():
        return None, "no history to look calibrations up in"
    matching = [c for c in iter_calibrations(history) if c.doc["comparison_key"] == key]
    if not matching:
        return None, f"no calibration in {history.where} matches comparison key {key}"
    return matching[-1], "the most recent matching calibration"


def resolve_calibration(
    history: HistoryBackend | str | Path | None,
    prefix: str | None,
    candidate_doc: Mapping[str, Any],
) -> CalibrationUse:
    """What a comparison of ``candidate_doc`` uses: the named or newest matching
    calibration of ``history`` (a backend, or a history folder's path)."""
    history = _as_history(history)
    key = comparison_key(candidate_doc)
    stored, note = find_calibration(history, prefix=prefix, key=key)
    return calibration_use(stored, note)


def check_calibration_key(stored: StoredCalibration, key: str) -> None:
    """UsageError when a named calibration is for another comparison key than ``key``."""
    if stored.doc["comparison_key"] != key:
        raise UsageError(
            f"calibration {stored.sha256[:12]} is for comparison key "
            f"{stored.doc['comparison_key']}, not this comparison's {key}"
        )


def calibration_use(stored: StoredCalibration | None, note: str) -> CalibrationUse:
    """What a comparison records of the calibration it uses (or of none, and why)."""
    if stored is None:
        return CalibrationUse(sha256=None, note=note)
    return CalibrationUse(
        sha256=stored.sha256,
        runs=len(stored.doc["runs"]),
        reps=stored.doc["reps"],
        created_utc=stored.doc["created_utc"],
        note=note,
        null=stored.null(),
    )


def write_new_file(path: Path, data: bytes) -> None:
    """Write a new calibration file (complete or not at all); never overwrite one."""
    try:
        write_new(path, data, step="writing the calibration")
    except FileExistsError as exc:
        raise HistoryError(f"{path} exists; a calibration is never overwritten") from exc
