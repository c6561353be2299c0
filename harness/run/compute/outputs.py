"""What a compute round produces: output hashes, determinism, saved arrays, output changes.

Every round hashes every output array (:func:`output_digest`: SHA-256 of the raw C-order
bytes, with dtype and shape); round 0's hashes and fitted values are the acquisition's
record, and a later round whose hashes differ is a correctness failure
(:func:`check_deterministic`). ``--save-outputs`` writes round 0's arrays and a JSON of
the calibration, parameters and fitted values (:func:`save_outputs`). Against a
baseline, differing output hashes are judged by :func:`judge_output_change`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from harness.compare import output_changes
from harness.run.checks import FailureLog


def output_digest(array: np.ndarray) -> dict:
    from quantem.stem4d.arrays import array_digest

    return array_digest(array)


def check_deterministic(
    log: FailureLog, acquisition: str, entry: dict, digests: dict[str, dict], index: int
) -> None:
    """Round ``index``'s ``digests`` against round 0's (``entry["outputs"]``)."""
    for name, digest in digests.items():
        if digest != entry["outputs"].get(name):
            entry["deterministic"] = False
            log.correctness(
                f"{acquisition}: output {name} of round {index} differs from round 0 "
                f"({digest['sha256'][:12]} vs {entry['outputs'][name]['sha256'][:12]}): "
                "the workload is not deterministic"
            )


def save_outputs(
    folder: Path,
    workload: str,
    acquisition: str,
    outputs: dict[str, np.ndarray],
    entry: dict,
    parameters,
) -> None:
    """``folder/<workload>.<output>.npy`` for every output and ``folder/<workload>.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    for output, array in outputs.items():
        np.save(folder / f"{workload}.{output}.npy", array, allow_pickle=False)
    meta = {
        "workload": workload,
        "acquisition": acquisition,
        "calibration": parameters.calibration().to_dict(),
        "parameters": parameters.to_dict(),
        "fitted": entry["fitted"],
        "outputs": entry["outputs"],
    }
    (folder / f"{workload}.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def judge_output_change(doc: dict, baseline, accept: bool) -> None:
    """Output hashes against a same-backend, same-device baseline (harness.run.compute.kind)."""
    changed = output_changes(baseline.doc, doc)
    if not changed:
        return
    doc["output_change"] = {
        "accepted": bool(accept),
        "changed": changed,
        "baseline_sha256": baseline.sha256,
    }
    if not accept:
        doc["status"]["correctness"] = "outputs_changed"
        doc["status"]["failures"].append(
            "outputs_changed: output hashes differ from the baseline on the same backend "
            f"and device: {', '.join(changed)} (pass --accept-output-change to accept)"
        )


def jsonable(value):
    """``value`` with numpy scalars as Python ones and non-finite floats as None."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (np.floating, float)):
        v = float(value)
        return v if v == v and abs(v) != float("inf") else None
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    return value
