"""Change points over a history: E-Divisive means on each cell's series of medians.

For every comparison key and cell (acquisition, format, cache state), the series is
the per-record median of kept trial seconds, ordered by source revision (the git
commit order of the repository when every record's revision is in it; otherwise by
creation time). Change points are found by E-Divisive with means (Matteson & James
2014, as used for performance series by MongoDB's signal-processing-algorithms and
Apache Otava), implemented here:

- the divergence of a split at tau of a segment is
  ``Q = m n / (m + n) * (2/(m n) sum|x - y| - sum|x - x'| / C(m, 2) - sum|y - y'| / C(n, 2))``
  (energy distance with exponent 1), computed for every tau at once from prefix sums
  of the pairwise distance matrix;
- the segment and split with the largest Q is tested by permutation: the segment is
  shuffled ``permutations`` times (seeded) and p is the add-one fraction of shuffles
  whose best Q reaches the observed one; a change point with p <= ``p_threshold`` is
  kept and both halves are searched again, until none is significant.

Why not the packages: ``signal-processing-algorithms`` 2.1.6 requires Python 3.11
exactly and numpy < 2, and ``apache-otava`` 0.8.0 pins numpy 2.2.0 and scipy < 1.17
and brings BigQuery, Postgres and Slack clients; neither installs beside this
project's numpy 2.x. The algorithm is short; the tests check it on series with known
steps and against a brute-force evaluation of Q.
"""

from __future__ import annotations

import hashlib
import itertools
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.stats import median

DEFAULT_PERMUTATIONS = 499
DEFAULT_P_THRESHOLD = 0.01
#: Smallest segment on either side of a change point.
MIN_SEGMENT = 3

CellKey = tuple[str, str, str]


def divergence_curve(values: Sequence[float]) -> np.ndarray:
    """Q(tau) for tau = 0..n (NaN where a side would be shorter than MIN_SEGMENT)."""
    z = np.asarray(values, dtype=np.float64)
    n = z.size
    q = np.full(n + 1, np.nan)
    if n < 2 * MIN_SEGMENT:
        return q
    distances = np.abs(z[:, None] - z[None, :])
    prefix = np.zeros((n + 1, n + 1))
    prefix[1:, 1:] = distances.cumsum(axis=0).cumsum(axis=1)
    tau = np.arange(MIN_SEGMENT, n - MIN_SEGMENT + 1)
    left_block = prefix[tau, tau]  # both indices < tau, each pair twice
    cross = prefix[tau, n] - prefix[tau, tau]
    right_block = prefix[n, n] - prefix[tau, n] - prefix[n, tau] + prefix[tau, tau]
    m = tau.astype(np.float64)
    k = n - m
    within_left = left_block / (m * (m - 1))  # = (block/2) / C(m, 2)
    within_right = right_block / (k * (k - 1))
    q[tau] = m * k / (m + k) * (2 * cross / (m * k) - within_left - within_right)
    return q


def _best_split(values: np.ndarray) -> tuple[int | None, float]:
    curve = divergence_curve(values)
    if np.all(np.isnan(curve)):
        return None, float("-inf")
    tau = int(np.nanargmax(curve))
    return tau, float(curve[tau])


@dataclass(frozen=True)
class ChangePoint:
    """A change at ``index`` (the first point of the new level) of a series."""

    index: int
    statistic: float
    p_value: float
    before_median: float
    after_median: float

    @property
    def change_percent(self) -> float:
        return (
            (self.after_median / self.before_median - 1) * 100
            if self.before_median
            else float("inf")
        )


def e_divisive(
    values: Sequence[float],
    *,
    permutations: int = DEFAULT_PERMUTATIONS,
    p_threshold: float = DEFAULT_P_THRESHOLD,
    seed: int = 0,
) -> list[ChangePoint]:
    """Significant change points of ``values``, by index; see the module docstring."""
    z = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    bounds = [0, z.size]
    found: list[tuple[int, float, float]] = []
    tested: dict[tuple[int, int], tuple[int | None, float, float]] = {}
    while True:
        best = None
        for start, end in itertools.pairwise(bounds):
            if (start, end) not in tested:
                tau, stat = _best_split(z[start:end])
                p = 1.0
                if tau is not None:
                    segment = z[start:end].copy()
                    reached = 0
                    for _ in range(permutations):
                        rng.shuffle(segment)
                        if _best_split(segment)[1] >= stat:
                            reached += 1
                    p = (reached + 1) / (permutations + 1)
                tested[start, end] = (None if tau is None else start + tau, stat, p)
            index, stat, p = tested[start, end]
            if index is not None and (best is None or stat > best[1]):
                best = (index, stat, p)
        if best is None or best[2] > p_threshold:
            break
        found.append(best)
        bounds = sorted({*bounds, best[0]})
    points = []
    edges = sorted({0, z.size, *(i for i, _, _ in found)})
    for index, stat, p in sorted(found):
        position = edges.index(index)
        before = z[edges[position - 1] : index]
        after = z[index : edges[position + 1]]
        points.append(
            ChangePoint(index, stat, p, float(np.median(before)), float(np.median(after)))
        )
    return points


# --- series from a history -----------------------------------------------------------------


@dataclass(frozen=True)
class SeriesPoint:
    sha256: str
    created_utc: str
    revision: str | None
    median: float


@dataclass(frozen=True)
class SeriesChanges:
    """One cell's series in one comparison group and its change points."""

    comparison_key: str
    cell: CellKey
    ordered_by: str  # "git" or "created_utc"
    points: list[SeriesPoint]
    changes: list[ChangePoint]

    def to_dict(self) -> dict[str, Any]:
        """JSON form: used by ``history changes --format json`` and the index views."""
        return {
            "comparison_key": self.comparison_key,
            "acquisition": self.cell[0],
            "format": self.cell[1],
            "cache_state": self.cell[2],
            "ordered_by": self.ordered_by,
            "series": [
                {
                    "sha256": p.sha256,
                    "created_utc": p.created_utc,
                    "revision": p.revision,
                    "median": p.median,
                }
                for p in self.points
            ],
            "changes": [
                {
                    "index": c.index,
                    "from_revision": self.points[c.index - 1].revision,
                    "to_revision": self.points[c.index].revision,
                    "from_record": self.points[c.index - 1].sha256,
                    "to_record": self.points[c.index].sha256,
                    "before_median": c.before_median,
                    "after_median": c.after_median,
                    "change_percent": c.change_percent,
                    "statistic": c.statistic,
                    "p_value": c.p_value,
                }
                for c in self.changes
            ],
        }


def git_commit_order(repository: Path | None) -> dict[str, int] | None:
    """Position of every commit reachable from any ref (oldest first), or None without git."""
    if repository is None:
        return None
    try:
        completed = subprocess.run(
            ["git", "-C", str(repository), "rev-list", "--all", "--topo-order", "--reverse"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return {sha: i for i, sha in enumerate(completed.stdout.split())}


def order_points(
    points: Sequence[SeriesPoint], commit_order: Mapping[str, int] | None
) -> tuple[list[SeriesPoint], str]:
    """Points by git commit order when every revision is known there, else by creation time."""
    if commit_order and all(p.revision in commit_order for p in points):
        return sorted(
            points, key=lambda p: (commit_order[p.revision], p.created_utc, p.sha256)
        ), "git"
    return sorted(points, key=lambda p: (p.created_utc, p.sha256)), "created_utc"


def collect_series(
    records: Iterable[tuple[str, Mapping[str, Any]]],
) -> dict[str, dict[CellKey, list[SeriesPoint]]]:
    """Per comparison key and cell, one point per passing record: its median of kept trials."""
    from harness.comparability import comparison_key
    from harness.verdict.comparison import collect_cells

    series: dict[str, dict[CellKey, list[SeriesPoint]]] = {}
    for sha, doc in records:
        status = doc["status"]
        if status["execution"] != "completed" or status["correctness"] != "passed":
            continue  # a failed run's timings are not a level of the series
        if (doc.get("recheck") or {}).get("candidate_sha256"):
            continue  # `harness recheck`'s record: its trials are its candidate's, counted there
        key = comparison_key(doc)
        revision = (doc.get("provenance") or {}).get("git_revision")
        for cell, seconds in collect_cells(doc).items():
            series.setdefault(key, {}).setdefault(cell, []).append(
                SeriesPoint(sha, doc["created_utc"], revision, median(seconds))
            )
    return series


def iter_history_records(history_dir: str | Path) -> Iterable[tuple[str, dict[str, Any]]]:
    """(sha256, report) of every record of a history folder that reads back intact."""
    from harness.history.folder_history import FolderHistory

    return FolderHistory(history_dir).iter_reports()


def history_changes(
    history_dir: str | Path,
    *,
    key: str | None = None,
    repository: Path | None = None,
    permutations: int = DEFAULT_PERMUTATIONS,
    p_threshold: float = DEFAULT_P_THRESHOLD,
    records: Iterable[tuple[str, dict[str, Any]]] | None = None,
) -> list[SeriesChanges]:
    """Change points of every cell series of a history (or of one comparison key).

    This is the function the history index views call; ``repository`` is the git
    checkout whose commit order orders the records (None: creation time); ``records``
    ((sha256, report) pairs) replaces the folder's record files (a history on a server).
    """
    series = collect_series(iter_history_records(history_dir) if records is None else records)
    order = git_commit_order(repository)
    results = []
    for comparison in sorted(series):
        if key is not None and not comparison.startswith(key):
            continue
        for cell in sorted(series[comparison]):
            points, ordered_by = order_points(series[comparison][cell], order)
            label = f"{comparison}/{'/'.join(cell)}".encode()
            seed = int.from_bytes(hashlib.sha256(label).digest()[:8], "little")
            changes = e_divisive(
                [p.median for p in points],
                permutations=permutations,
                p_threshold=p_threshold,
                seed=seed,
            )
            results.append(SeriesChanges(comparison, cell, ordered_by, points, changes))
    return results
