"""The refusals of ``harness recheck``: what must be the candidate's before anything is measured.

What is measured must be what the candidate measured, or the pooled verdict means
nothing; so before any measurement (each refusal is an :class:`IncomparableError`,
exit 2):

- the source fingerprint of this checkout equals the candidate's (:func:`check_same_source`);
- the selection manifest and every master file's SHA-256 are those the candidate names
  (:func:`check_same_inputs`);
- host, device and storage (:data:`SAME_PLACE_FIELDS`) equal the candidate's
  (:func:`check_same_place`).

After the trials the indexed products are compared with :func:`recorded_products`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.errors import IncomparableError, ManifestError
from harness.history.lookup import LoadedReport
from harness.run.manifest import SelectionManifest, check_master_hashes
from harness.run.provenance import SourceTracker

#: Where the recheck runs must be where the candidate ran: (name, how to read it from
#: a report's ``environment``). The device and storage id are comparison-key fields;
#: the host name and the storage's filesystem and mount are checked too, because a
#: storage id is only a label a user gives.
SAME_PLACE_FIELDS: tuple[tuple[str, Callable[[dict], Any]], ...] = (
    ("environment.host.hostname", lambda e: e["host"].get("hostname")),
    ("environment.device.kind", lambda e: e["device"].get("kind")),
    ("environment.device.name", lambda e: e["device"].get("name")),
    ("environment.device.uuid", lambda e: e["device"].get("uuid")),
    ("environment.storage.storage_id", lambda e: e["storage"].get("storage_id")),
    ("environment.storage.filesystem", lambda e: e["storage"].get("filesystem")),
    ("environment.storage.mount_source", lambda e: e["storage"].get("mount_source")),
)


def check_same_source(tracker: SourceTracker, candidate: LoadedReport) -> None:
    """IncomparableError unless this checkout fingerprints as the candidate's did."""
    provenance = candidate.doc["provenance"]
    expected = provenance["source_fingerprint_end"]
    if tracker.start_fingerprint != expected:
        revision = provenance.get("git_revision") or "unknown"
        raise IncomparableError(
            f"recheck: the source here (fingerprint {tracker.start_fingerprint[:12]}) is not the "
            f"code candidate {candidate.sha256[:12]} measured (fingerprint {expected[:12]}, git "
            f"revision {revision[:12]}{' with local changes' if provenance.get('git_dirty') else ''})"
            "; check out that code to recheck it"
        )


def check_same_inputs(manifest: SelectionManifest, candidate: LoadedReport) -> None:
    """IncomparableError unless the manifest and master files are those the candidate measured."""
    try:
        check_master_hashes(manifest)
    except ManifestError as exc:
        raise IncomparableError(
            f"recheck: the inputs of candidate {candidate.sha256[:12]} changed: {exc}"
        ) from exc
    selected = {a.id: a for a in manifest.acquisitions}
    problems = []
    for entry in candidate.doc["acquisitions"]:
        found = selected.get(entry["id"])
        if found is None:
            problems.append(f"{entry['id']}: not selected by {manifest.path}")
        elif found.source_master_sha256 != entry["source_master_sha256"]:
            problems.append(
                f"{entry['id']}: master SHA-256 {found.source_master_sha256[:12]} in the "
                f"manifest, the candidate measured {entry['source_master_sha256'][:12]}"
            )
        elif found.filename != entry["filename"]:
            problems.append(
                f"{entry['id']}: file {found.filename}, the candidate measured {entry['filename']}"
            )
    if problems:
        raise IncomparableError(
            f"recheck: {manifest.path} does not select what candidate {candidate.sha256[:12]} "
            "measured: " + "; ".join(problems)
        )


def check_same_place(environment: dict, candidate: LoadedReport) -> None:
    """IncomparableError unless host, device and storage are the candidate's."""
    theirs = candidate.doc["environment"]
    differences = [
        f"{name} {read(environment)!r} here, {read(theirs)!r} in the candidate"
        for name, read in SAME_PLACE_FIELDS
        if read(environment) != read(theirs)
    ]
    if differences:
        raise IncomparableError(
            f"recheck: not where candidate {candidate.sha256[:12]} was measured: "
            + "; ".join(differences)
        )


def recorded_products(candidate: LoadedReport) -> dict[str, str | None]:
    """The candidate's indexed product per acquisition (None where it recorded none)."""
    return {a["id"]: a.get("indexed_product_sha256") for a in candidate.doc["acquisitions"]}
