"""One side of a paired recheck: ``python -m harness.run.paired_worker``, run in a code tree.

:mod:`harness.run.paired.coordinator` starts two of these, one in the baseline's code tree and one
in the candidate's, and asks them in turn for one trial at a time. Each measures with
its own tree's code (its io-scale preparation, trial and product check), so each side
is measured as its run measured it; the coordinator only decides the order.

Protocol, one JSON object per line. The worker reads from stdin and writes on the
stdout it was started with (everything else the code prints goes to stderr):

- in: the *spec* (root, manifest, backend, storage id, representation, fresh index,
  threads, first trial index, the acquisition ids, a scratch folder);
- out: ``{"ready": true, "source_fingerprint": ..., "failures": [...]}`` once the
  acquisitions are prepared (their QEM written untimed in the worker's own temporary
  folder and checked);
- in: ``{"cell": [acquisition, format, cache_state], "index": i}``; out:
  ``{"trial": {...}}`` (a record with the fields of a report's ``trials[]``) or
  ``{"error": "..."}``;
- at end of input, out: ``{"done": true, "source_fingerprint_end": ..., "stable": ...,
  "failures": [...], "products": {id: sha256}}``, then it exits 0.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import IO, Any

from harness.run.io_scale import steps as io_steps
from harness.run.io_scale.config import IoScaleConfig
from harness.run.io_scale.kind import IoScaleRun
from harness.run.manifest import check_master_hashes, parse_manifest
from harness.run.provenance import SourceTracker
from harness.run.runner import EXECUTION_ERRORS
from harness.run.workspace import open_workspace


def _reply(channel: IO[str], message: dict[str, Any]) -> None:
    channel.write(json.dumps(message, sort_keys=True) + "\n")
    channel.flush()


def _config(spec: dict[str, Any]) -> IoScaleConfig:
    return IoScaleConfig(
        root=Path(spec["root"]),
        manifest=Path(spec["manifest"]),
        backend=spec["backend"],
        storage_id=spec["storage_id"],
        output_dir=Path(spec["scratch"]),
        reps=int(spec["first_index"]),
        load_only=True,  # the QEM is prepared untimed: the conversion is not what is measured
        representation=spec.get("representation", "dense"),
        qem_version=int(spec.get("qem_version", 1)),
        fresh_index=bool(spec.get("fresh_index", False)),
        verify_source=bool(spec.get("verify_source", False)),
        threads=spec.get("threads"),
        progress=False,
    )


def serve(requests: IO[str], channel: IO[str]) -> int:
    """Prepare, answer trial requests until end of input, report; the exit status."""
    spec = json.loads(requests.readline())
    # this tree is the measured code, even inside another checkout's folder
    tracker = SourceTracker(Path.cwd().resolve()).start()
    kind = IoScaleRun(_config(spec))
    kind.check_config()
    manifest = parse_manifest(kind.config.manifest, kind.config.root)
    check_master_hashes(manifest)
    wanted = set(spec["acquisitions"])
    with open_workspace(
        kind.config.output_dir, title="paired recheck", total=0, show_progress=False
    ) as workspace:
        prepared = True
        for selected in manifest.acquisitions:
            if selected.id not in wanted:
                continue
            try:
                prepared = kind.prepare(selected, workspace) is not None and prepared
            except EXECUTION_ERRORS as exc:
                kind.log.execution(f"{selected.id}: {type(exc).__name__}: {exc}")
                prepared = False
        _reply(
            channel,
            {
                "ready": prepared and not kind.log.failed,
                "source_fingerprint": tracker.start_fingerprint,
                "failures": list(kind.log.failures),
            },
        )
        ctx = kind.context(workspace)
        states = {s.selected.id: s for s in kind.states}
        for line in requests:
            request = json.loads(line)
            acquisition, fmt, cache_state = request["cell"]
            try:
                record = io_steps.run_trial(
                    ctx, states[acquisition], fmt, cache_state, int(request["index"])
                )
            except (*EXECUTION_ERRORS, KeyError) as exc:
                kind.log.execution(f"paired trial: {type(exc).__name__}: {exc}")
                _reply(channel, {"error": f"{type(exc).__name__}: {exc}"})
                continue
            _reply(channel, {"trial": record})
        kind.after_trials(workspace)
    provenance, stable = tracker.finish()
    products = {
        s.selected.id: (s.expected.products[0] if s.expected.products else None)
        for s in kind.states
    }
    _reply(
        channel,
        {
            "done": True,
            "source_fingerprint_end": provenance["source_fingerprint_end"],
            "stable": stable,
            "failures": list(kind.log.failures),
            "products": products,
        },
    )
    return 0


def main() -> int:
    # The protocol owns the original stdout; anything the measured code prints goes to stderr.
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return serve(sys.stdin, channel)


if __name__ == "__main__":
    sys.exit(main())
