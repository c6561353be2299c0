"""What makes two reports comparable, and the comparison key built from it.

Two io-scale reports measure the same thing only when every field in
:data:`COMPARABILITY_FIELDS` is equal: device identity, storage, fixtures (ids and
source hashes), timing boundary, allocator policy, backend, representation,
protocol version and the cache conditions measured. The history groups records by
:func:`comparison_key`, a short hash of those fields; ``harness compare`` lists
every field that differs (:func:`collect_differences`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: Hex digits of the comparison key (64 bits: collisions are not a practical concern
#: for one lab's histories, and the full fields are stored next to the key).
COMPARISON_KEY_DIGITS = 16


def _acquisitions(doc: Mapping[str, Any]) -> list[list[str]]:
    return sorted([a["id"], a["source_master_sha256"]] for a in doc["acquisitions"])


#: (field name shown to users, how to read it from a report).
COMPARABILITY_FIELDS: tuple[tuple[str, Callable[[Mapping[str, Any]], Any]], ...] = (
    ("benchmark", lambda d: d["benchmark"]),
    ("protocol_version", lambda d: d["protocol_version"]),
    ("environment.device.name", lambda d: d["environment"]["device"]["name"]),
    ("environment.device.uuid", lambda d: d["environment"]["device"]["uuid"]),
    ("environment.storage.storage_id", lambda d: d["environment"]["storage"]["storage_id"]),
    ("acquisitions[id, source_master_sha256]", _acquisitions),
    ("conditions.timing_boundary", lambda d: d["conditions"]["timing_boundary"]),
    ("conditions.allocator_policy", lambda d: d["conditions"]["allocator_policy"]),
    ("conditions.backend", lambda d: d["conditions"]["backend"]),
    ("conditions.representation", lambda d: d["conditions"]["representation"]),
    ("conditions.cache_states", lambda d: sorted(d["conditions"]["cache_states"])),
)

#: Fields added after records existed: (name, reader, default). A field at its default
#: stays out of the key, so every earlier record keeps the key it was stored under; any
#: other value enters the key and a difference is always listed.
OPTIONAL_COMPARABILITY_FIELDS: tuple[tuple[str, Callable[[Mapping[str, Any]], Any], Any], ...] = (
    (
        "conditions.verify_source",
        lambda d: bool(d.get("conditions", {}).get("verify_source", False)),
        False,
    ),
    # The run's disposable .qem written in another format than 1.0 (``--qem-version``).
    ("conditions.qem_version", lambda d: d.get("conditions", {}).get("qem_version", 1), 1),
    # Compute runs on a .qem converted from the source (``run compute --format qem``).
    (
        "conditions.source_format",
        lambda d: d.get("conditions", {}).get("source_format", "hdf5"),
        "hdf5",
    ),
    # Sharded runs (``--devices``) only: the GPUs (id, name, UUID, in order).
    ("conditions.devices", lambda d: d.get("conditions", {}).get("devices"), None),
)


@dataclass(frozen=True)
class FieldDifference:
    """One field on which baseline and candidate differ."""

    field: str
    baseline: Any
    candidate: Any


def comparison_fields(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The comparability fields of a (current-version) report, by name (optional fields
    only where they differ from their default)."""
    fields = {name: read(doc) for name, read in COMPARABILITY_FIELDS}
    for name, read, default in OPTIONAL_COMPARABILITY_FIELDS:
        value = read(doc)
        if value != default:
            fields[name] = value
    return fields


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def comparison_key(doc: Mapping[str, Any]) -> str:
    """Short hex key grouping reports that measure the same thing."""
    digest = hashlib.sha256(canonical_json(comparison_fields(doc)).encode("ascii")).hexdigest()
    return digest[:COMPARISON_KEY_DIGITS]


def collect_differences(
    baseline: Mapping[str, Any], candidate: Mapping[str, Any]
) -> list[FieldDifference]:
    """Every comparability field whose values differ, in :data:`COMPARABILITY_FIELDS` order."""
    differences = []
    for name, read in COMPARABILITY_FIELDS:
        before, after = read(baseline), read(candidate)
        if before != after:
            differences.append(FieldDifference(name, before, after))
    for name, read, _default in OPTIONAL_COMPARABILITY_FIELDS:
        before, after = read(baseline), read(candidate)
        if before != after:
            differences.append(FieldDifference(name, before, after))
    return differences
