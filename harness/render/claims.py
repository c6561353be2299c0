"""The project's published claims (``docs/performance/claims.toml``), resolved against records.

A claim names a question, its goal, one record of an evidence history (by full SHA-256)
and the cell of that record that answers it (the summary row matching ``cell``, or a
fresh-process cell of its ``first_call`` section, and the statistic to read). Its figure, floor, date, device, storage and provenance are read from
the record, never typed: ``harness history publish`` renders them into
``docs/performance/results.md``. A figure not measured again since an older revision is
declared apart (``[[not_remeasured]]``) with its old value, and is shown as such.

The file format (version 1)::

    version = 1

    [[claim]]
    id = "cpu-hdf5-cached-load"          # unique, the page's anchor
    question = "..."
    goal = "..."                         # in words
    goal_max_seconds = 0.05              # optional: met when the figure is at most this
    goal_max_ratio_to_floor = 1.5        # optional: met when the ratio is at most this
    record = "<64 hex>"                  # the record's SHA-256
    cell = { acquisition = "demo-u16", format = "hdf5", cache_state = "cached" }
    statistic = "median"                 # a summary field (default median)
    unit = "seconds"                     # or "fraction" (a rate, shown as a percentage)
    goal_max_value = 0.05                # optional: met when the figure is at most this
    goal_min_value = 0.8                 # optional: met when the figure is at least this
    goal_below_claims = ["id", ...]      # optional: met when the figure is below each of
                                         # these claims' figures (same unit)
    floor_cell = { ... }                 # optional: another summary row of the record as floor
    reproduce = "harness run io-scale --demo"   # may start with preparation: "A && B"
    revision = "<40 hex>"                # optional: the commit whose tree ran, where the
                                         # record's git fields cannot say (a device copy);
                                         # publish checks its files give the fingerprint

    [[not_remeasured]]
    id = "..."
    question = "..."
    goal = "..."
    old_figure = "..."                   # the old number, as it was published
    since = "<revision>"                 # the revision it was last measured at
    source = "..."                       # where the old number is (git show REV:PATH)
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

from harness.errors import UsageError
from harness.history.layout import SHA256_PATTERN, HistoryLayout
from harness.history.records import sha256_bytes

CLAIMS_FORMAT_VERSION = 1
REVISION_PATTERN = re.compile(r"^[0-9a-f]{40}$")
DEFAULT_STATISTIC = "median"
_CLAIM_KEYS = {
    "id",
    "question",
    "goal",
    "goal_max_seconds",
    "goal_max_ratio_to_floor",
    "record",
    "cell",
    "statistic",
    "floor_cell",
    "reproduce",
    "unit",
    "goal_max_value",
    "goal_min_value",
    "revision",
    "goal_below_claims",
}
UNITS = ("seconds", "fraction")
_CLAIM_REQUIRED = ("id", "question", "goal", "record", "cell", "reproduce")
_STALE_KEYS = {"id", "question", "goal", "old_figure", "since", "source"}
#: Summary fields a record may carry about the floor that bounds a cell (issue 38's floor cells).
FLOOR_FIELDS = ("floor", "floor_seconds", "floor_method", "ratio_to_floor", "floor_status")


class ClaimsError(UsageError):
    """The claims file, or a record it names, cannot give the page (names the claim)."""


@dataclass(frozen=True)
class Claim:
    id: str
    question: str
    goal: str
    record: str
    cell: dict[str, str]
    reproduce: str
    statistic: str = DEFAULT_STATISTIC
    floor_cell: dict[str, str] | None = None
    goal_max_seconds: float | None = None
    goal_max_ratio_to_floor: float | None = None
    unit: str = "seconds"
    goal_max_value: float | None = None
    goal_min_value: float | None = None
    revision: str | None = None
    goal_below_claims: tuple[str, ...] = ()


@dataclass(frozen=True)
class NotRemeasured:
    id: str
    question: str
    goal: str
    old_figure: str
    since: str
    source: str


@dataclass(frozen=True)
class Claims:
    claims: list[Claim]
    not_remeasured: list[NotRemeasured]


@dataclass(frozen=True)
class ResolvedClaim:
    """A claim with what its record says."""

    claim: Claim
    record_relpath: str
    report: dict[str, Any]
    summary: dict[str, Any]
    figure: float
    floor: dict[str, Any] = field(default_factory=dict)
    #: the figures of the claims named by ``goal_below_claims``, by id
    compared: dict[str, float] = field(default_factory=dict)

    @property
    def ratio_to_floor(self) -> float | None:
        return self.floor.get("ratio_to_floor")

    @property
    def goal_undetermined(self) -> bool:
        """A goal against the floor cannot be judged on a floor the figure beats (too_weak):
        that floor is broken, so neither "met" nor "not met" would be true."""
        return (
            self.claim.goal_max_ratio_to_floor is not None
            and self.floor.get("floor_status") == "too_weak"
        )

    @property
    def goal_met(self) -> bool | None:
        """Whether the record meets the claim's machine-checkable goal (None: none stated)."""
        checks = []
        if self.goal_undetermined:
            return None
        if self.claim.goal_max_seconds is not None:
            checks.append(self.figure <= self.claim.goal_max_seconds)
        if self.claim.goal_max_ratio_to_floor is not None:
            ratio = self.ratio_to_floor
            checks.append(ratio is not None and ratio <= self.claim.goal_max_ratio_to_floor)
        if self.claim.goal_max_value is not None:
            checks.append(self.figure <= self.claim.goal_max_value)
        if self.claim.goal_min_value is not None:
            checks.append(self.figure >= self.claim.goal_min_value)
        checks.extend(self.figure < other for other in self.compared.values())
        return all(checks) if checks else None


def _table(entry: Any, where: str) -> dict:
    if not isinstance(entry, dict):
        raise ClaimsError(f"{where}: expected a table")
    return entry


def _cell(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not value:
        raise ClaimsError(f"{where}: expected a non-empty inline table of summary fields")
    return {str(k): v for k, v in value.items()}


def parse_claims(path: str | Path) -> Claims:
    """Read and check a claims file; a clear error names the file and the claim."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ClaimsError(f"{path}: cannot read the claims file ({error.strerror})") from None
    except tomllib.TOMLDecodeError as error:
        raise ClaimsError(f"{path}: not valid TOML ({error})") from None
    if data.get("version") != CLAIMS_FORMAT_VERSION:
        raise ClaimsError(
            f"{path}: version {data.get('version')!r}; this harness reads version {CLAIMS_FORMAT_VERSION}"
        )
    unknown_top = set(data) - {"version", "claim", "not_remeasured"}
    if unknown_top:
        raise ClaimsError(f"{path}: unknown keys {sorted(unknown_top)}")
    claims: list[Claim] = []
    seen: set[str] = set()
    for number, raw in enumerate(data.get("claim", []), 1):
        where = f"{path}: claim {number}"
        raw = _table(raw, where)
        where = f"{path}: claim {raw.get('id', number)!r}"
        missing = [k for k in _CLAIM_REQUIRED if k not in raw]
        if missing:
            raise ClaimsError(f"{where}: missing {', '.join(missing)}")
        unknown = set(raw) - _CLAIM_KEYS
        if unknown:
            raise ClaimsError(f"{where}: unknown keys {sorted(unknown)}")
        for key in ("goal_max_seconds", "goal_max_ratio_to_floor"):
            value = raw.get(key)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0
            ):
                raise ClaimsError(f"{where}: {key} must be a positive number")
        for key in ("goal_max_value", "goal_min_value"):
            value = raw.get(key)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0
            ):
                raise ClaimsError(f"{where}: {key} must be a number at least 0")
        unit = str(raw.get("unit", "seconds"))
        if unit not in UNITS:
            raise ClaimsError(f"{where}: unit must be one of {', '.join(UNITS)}, not {unit!r}")
        if unit == "fraction" and (
            "goal_max_seconds" in raw or "goal_max_ratio_to_floor" in raw or "floor_cell" in raw
        ):
            raise ClaimsError(f"{where}: a fraction has no seconds goal and no floor")
        record = str(raw["record"]).lower()
        if not SHA256_PATTERN.match(record):
            raise ClaimsError(f"{where}: record must be a full SHA-256 (64 hex digits)")
        below = raw.get("goal_below_claims", [])
        if not isinstance(below, list) or not all(isinstance(v, str) for v in below):
            raise ClaimsError(f"{where}: goal_below_claims must be a list of claim ids")
        revision = raw.get("revision")
        if revision is not None and not REVISION_PATTERN.match(str(revision)):
            raise ClaimsError(f"{where}: revision must be a full git commit id (40 hex digits)")
        claims.append(
            Claim(
                id=str(raw["id"]),
                question=str(raw["question"]),
                goal=str(raw["goal"]),
                record=record,
                cell=_cell(raw["cell"], f"{where}: cell"),
                reproduce=str(raw["reproduce"]),
                statistic=str(raw.get("statistic", DEFAULT_STATISTIC)),
                floor_cell=_cell(raw["floor_cell"], f"{where}: floor_cell")
                if "floor_cell" in raw
                else None,
                goal_max_seconds=raw.get("goal_max_seconds"),
                goal_max_ratio_to_floor=raw.get("goal_max_ratio_to_floor"),
                unit=unit,
                goal_max_value=raw.get("goal_max_value"),
                goal_min_value=raw.get("goal_min_value"),
                revision=str(revision) if revision is not None else None,
                goal_below_claims=tuple(below),
            )
        )
    stale: list[NotRemeasured] = []
    for number, raw in enumerate(data.get("not_remeasured", []), 1):
        where = f"{path}: not_remeasured {number}"
        raw = _table(raw, where)
        if set(raw) != _STALE_KEYS:
            raise ClaimsError(f"{where}: needs exactly the keys {sorted(_STALE_KEYS)}")
        stale.append(NotRemeasured(**{k: str(v) for k, v in raw.items()}))
    for entry in [*claims, *stale]:
        if entry.id in seen:
            raise ClaimsError(f"{path}: the id {entry.id!r} is used twice")
        seen.add(entry.id)
    units = {c.id: c.unit for c in claims}
    for claim in claims:
        for other in claim.goal_below_claims:
            if units.get(other) != claim.unit or other == claim.id:
                raise ClaimsError(
                    f"{path}: claim {claim.id!r}: goal_below_claims names {other!r}, which is "
                    "not another current claim of the same unit"
                )
    return Claims(claims=claims, not_remeasured=stale)


def _matching(summaries: list[dict], cell: dict[str, str]) -> list[dict]:
    return [s for s in summaries if all(s.get(k) == v for k, v in cell.items())]


def _rows(report: dict) -> list[dict]:
    """The rows a claim may name: the summaries, a compute record's fresh-process cells
    (``first_call.cells``: one per acquisition and library), and an io-scale record's
    first loads (``first_load.cells``, named with ``section = "first_load"``: their
    acquisition, format and cache state are those of a summary too)."""
    first_loads = [
        {**row, "section": "first_load"}
        for row in (report.get("first_load") or {}).get("cells") or []
    ]
    return [
        *report.get("summaries", []),
        *((report.get("first_call") or {}).get("cells") or []),
        *first_loads,
    ]


def _one_summary(report: dict, cell: dict[str, str], where: str) -> dict:
    found = _matching(_rows(report), cell)
    if len(found) != 1:
        raise ClaimsError(
            f"{where}: the cell {json.dumps(cell, sort_keys=True)} matches {len(found)} "
            "summary rows of the record (exactly one needed)"
        )
    return found[0]


def _command_of(report: dict) -> list[str]:
    command = report.get("command") or []
    return [str(word) for word in command]


def _check_reproduce(claim: Claim, report: dict, where: str) -> None:
    """The printed command (its last step, after any ``&&``-joined preparation such as
    ``harness data synth``) must run the record's benchmark (same harness subcommand)."""
    recorded = _command_of(report)
    words = claim.reproduce.split("&&")[-1].split()
    head = [w for w in recorded[:4] if not w.startswith("-")][:3]
    if words[: len(head)] != head:
        raise ClaimsError(
            f"{where}: reproduce {claim.reproduce!r} does not run what the record ran "
            f"({' '.join(recorded[:4])} ...)"
        )


#: ``(revision, source fingerprint) -> bool | None``: whether the commit's files give the
#: fingerprint (None: git cannot tell here, e.g. the commit is not in this clone).
RevisionCheck = Callable[[str, str], "bool | None"]


def resolve_claim(
    claim: Claim, layout: HistoryLayout, check_revision: RevisionCheck | None = None
) -> ResolvedClaim:
    """Read the claim's record (re-hashed against its name) and the cell it publishes;
    a claim's ``revision`` must hold the record's code (``check_revision``)."""
    where = f"claim {claim.id!r}"
    path = layout.record_path(claim.record)
    try:
        data = path.read_bytes()
    except OSError:
        raise ClaimsError(
            f"{where}: record {claim.record} is not in the evidence history {layout.root}"
        ) from None
    if sha256_bytes(data) != claim.record:
        raise ClaimsError(f"{where}: {path} does not hash to its name (altered record)")
    try:
        report = json.loads(data)
    except ValueError:
        raise ClaimsError(f"{where}: {path} is not a JSON report") from None
    summary = _one_summary(report, claim.cell, where)
    figure = summary.get(claim.statistic)
    if isinstance(figure, bool) or not isinstance(figure, (int, float)):
        raise ClaimsError(f"{where}: the cell has no numeric {claim.statistic!r}")
    if claim.unit == "fraction" and not 0 <= figure <= 1:
        raise ClaimsError(f"{where}: {claim.statistic!r} is {figure}, not a fraction")
    floor = {k: summary[k] for k in FLOOR_FIELDS if summary.get(k) is not None}
    if claim.floor_cell is not None:
        floor_summary = _one_summary(report, claim.floor_cell, f"{where}: floor_cell")
        floor_figure = floor_summary.get(claim.statistic)
        if not isinstance(floor_figure, (int, float)) or floor_figure <= 0:
            raise ClaimsError(f"{where}: the floor cell has no positive {claim.statistic!r}")
        floor = {
            "floor_seconds": floor_figure,
            "floor_method": ", ".join(f"{k}={v}" for k, v in claim.floor_cell.items()),
            "ratio_to_floor": figure / floor_figure,
        }
    _check_reproduce(claim, report, where)
    if claim.revision is not None and check_revision is not None:
        fingerprint = str(report["provenance"].get("source_fingerprint_end"))
        if check_revision(claim.revision, fingerprint) is False:
            raise ClaimsError(
                f"{where}: revision {claim.revision[:12]} does not hold the code that ran (its "
                f"files do not give the record's source fingerprint {fingerprint[:12]})"
            )
    return ResolvedClaim(
        claim=claim,
        record_relpath=layout.record_relpath(claim.record),
        report=report,
        summary=summary,
        figure=float(figure),
        floor=floor,
    )


def compare_claims(resolved: list[ResolvedClaim]) -> list[ResolvedClaim]:
    """Each claim with the figures of the claims its ``goal_below_claims`` names."""
    figures = {r.claim.id: r.figure for r in resolved}
    return [
        dataclasses.replace(r, compared={o: figures[o] for o in r.claim.goal_below_claims})
        for r in resolved
    ]
