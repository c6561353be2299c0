"""Floor cells of io-scale: the floor of the path each load takes, measured in its run.

``harness run io-scale --floors`` measures, for every acquisition, format and cache
state, what the load cannot do faster than (docs/io-scale.md, "Floors"):

* **cold**: the cold read of the same files (:mod:`harness.run.floors.reads`), one per
  round, interleaved with the cold loads and alternating which goes first, each with its
  cache state made and verified as a cold load's;
* **cached**: the warm read at its best over a stated sweep of threads and piece sizes,
  after the acquisition's trials; on cuda the host-to-device copy from registered
  page-cache pages (the path of a registered warm load) or from pinned memory (a
  pread-staged one), and for a load that decodes on the device the device-to-device
  copy of the decoded size (:mod:`harness.run.floors.cuda`); on the CPU the host copy of
  the decoded size.

A cell's floor is the slowest of its path's components (they overlap in a load, so the
load is bounded by the largest) and names that component's method. Each load cell
carries ``ratio_to_floor`` = load median / floor. A load faster than its floor marks the
floor ``too_weak``: the floor is wrong (it measured a path the load does not take, or
measured it badly), never a success of the load.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.report import quantile
from harness.run import trials
from harness.run.floors import cuda as floor_cuda
from harness.run.floors import reads as floor_reads

#: The version of the ``floors`` section (its fields and methods).
FLOORS_VERSION = 1
OK, TOO_WEAK, UNMEASURED = "ok", "too_weak", "unmeasured"


@dataclass(frozen=True)
class FloorSettings:
    """The stated sweep (recorded in the report's ``floors.settings``)."""

    threads: tuple[int, ...] = field(default_factory=floor_reads.default_threads)
    pieces: tuple[int, ...] = floor_reads.DEFAULT_PIECES
    copy_pieces: tuple[int, ...] = floor_cuda.DEFAULT_COPY_PIECES
    repeats: int = 3
    #: The cold read's setting (None: the load's thread count, else the CPU count).
    cold_threads: int | None = None
    cold_piece_bytes: int = 8 << 20

    def to_dict(self) -> dict:
        return {
            "warm_threads": list(self.threads),
            "warm_piece_bytes": list(self.pieces),
            "copy_piece_bytes": list(self.copy_pieces),
            "repeats": self.repeats,
            "cold_threads": self.cold_threads,
            "cold_piece_bytes": self.cold_piece_bytes,
        }


def decoded_bytes(shape: Sequence[int] | None, dtype: str | None) -> int:
    import numpy as np

    if not shape or not dtype:
        return 0
    n = 1
    for side in shape:
        n *= int(side)
    return n * np.dtype(dtype).itemsize


class IoScaleFloors:
    """The floor measurements of one io-scale run and the report's ``floors`` section.

    ``runtime``: the CUDA calls (None: :class:`~harness.run.floors.cuda.CupyRuntime` on
    the cuda backend, none elsewhere).
    """

    def __init__(
        self,
        backend: str,
        representation: str,
        settings: FloorSettings | None = None,
        threads: int | None = None,
        runtime: Any = None,
    ) -> None:
        self.backend = backend
        self.representation = representation
        self.settings = settings or FloorSettings()
        self.cold_threads = (
            self.settings.cold_threads or threads or max(floor_reads.default_threads())
        )
        self._runtime = runtime
        self.cold: list[dict] = []
        #: (acquisition, format or "decoded") -> {role: component}
        self.warm: dict[tuple[str, str], dict[str, dict]] = {}

    @property
    def runtime(self) -> Any:
        if self._runtime is None and self.backend == "cuda":
            self._runtime = floor_cuda.CupyRuntime()
        return self._runtime

    # -- measuring -----------------------------------------------------------------------
    def around_trial(
        self, state: Any, fmt: str, cache_state: str, index: int, load: Callable
    ) -> None:
        """The trial ``load()``, and for a cold cell the cold read of the same files, in
        alternating order (the load first in even rounds)."""
        if cache_state != trials.COLD:
            load()
            return
        if index % 2 == 0:
            load()
            self.cold_read(state, fmt, index, "after_load")
        else:
            self.cold_read(state, fmt, index, "before_load")
            load()

    def cold_read(self, state: Any, fmt: str, index: int, order: str) -> None:
        files = state.files_of(fmt)
        evict_also = [state.qem_path] if fmt == "hdf5" and state.qem_path else []
        record = floor_reads.cold_read(
            files, self.cold_threads, self.settings.cold_piece_bytes, evict_also
        )
        record.update(acquisition=state.selected.id, format=fmt, trial_index=index, order=order)
        self.cold.append(record)

    def after_acquisition(
        self, state: Any, formats: Sequence[str], trials_: Sequence[dict] = ()
    ) -> None:
        """The warm floors of each format's files (after the trials: they leave the
        load's registrations and pools as the trials found them). On cuda the warm host
        read is measured only when a cached trial staged by pread: a registered load
        never reads on the host, and the sweep is the costliest floor."""
        s = self.settings
        for fmt in formats:
            files = state.files_of(fmt)
            key = (state.selected.id, fmt, trials.CACHED)
            parts = {}
            if self.runtime is None or _staging_of(trials_, key) != "registered":
                parts["host_read"] = floor_reads.warm_sweep(files, s.threads, s.pieces, s.repeats)
            if self.runtime is not None:
                from quantem.stem4d.cuda import release_registered_files

                release_registered_files(files)  # measured on mappings of its own
                nbytes = sum(p.stat().st_size for p in files)
                parts["h2d_registered"] = floor_cuda.h2d_registered(
                    files, self.runtime, s.copy_pieces, s.repeats
                )
                parts["h2d_pinned"] = floor_cuda.h2d_pinned(
                    nbytes, self.runtime, s.copy_pieces, s.repeats
                )
            self.warm[(state.selected.id, fmt)] = parts
        nbytes = decoded_bytes(state.expected.shape, state.expected.dtype)
        if self.runtime is not None:
            decoded = floor_cuda.d2d_copy(nbytes, self.runtime, repeats=s.repeats)
        else:
            decoded = floor_reads.host_copy(nbytes, s.threads, s.repeats)
        self.warm[(state.selected.id, "decoded")] = {"write_decoded": decoded}

    def cold_components(self, acquisition: str, fmt: str) -> list[dict]:
        mine = [c for c in self.cold if (c["acquisition"], c["format"]) == (acquisition, fmt)]
        kept = sorted(c["seconds"] for c in mine if c["kept"])
        component = {
            "method": floor_reads.COLD_READ,
            "seconds": quantile(kept, 0.5) if kept else None,
            "bytes": mine[0]["bytes"] if mine else 0,
            "settings": mine[0]["settings"] if mine else None,
            "n": len(mine),
            "n_kept": len(kept),
        }
        return [component]

    def decode_component(self, acquisition: str, fmt: str) -> dict | None:
        """The write of the decoded size: a device-to-device copy on cuda, a host copy
        elsewhere (every load that decodes writes it)."""
        if fmt == "qem" and self.representation == "encoded":
            return None
        return self.warm.get((acquisition, "decoded"), {}).get("write_decoded")

    # -- the report ----------------------------------------------------------------------
    def path_components(
        self, entry: dict, fmt: str, cache_state: str, staging: str | None
    ) -> list[dict]:
        """The components of the path the cell's loads took (see the module docstring)."""
        by = self.warm.get((entry["id"], fmt), {})
        if cache_state == trials.COLD:
            parts = self.cold_components(entry["id"], fmt)
            if self.runtime is not None:
                parts.append(by.get("h2d_pinned"))
        elif self.runtime is not None and staging == "registered":
            parts = [by.get("h2d_registered")]
        elif self.runtime is not None:
            parts = [by.get("host_read"), by.get("h2d_pinned")]
        else:
            parts = [by.get("host_read")]
        parts.append(self.decode_component(entry["id"], fmt))
        return [p for p in parts if p is not None]

    def section(self, acquisitions: list[dict], trials_: list[dict], summaries: list[dict]) -> dict:
        """The ``floors`` section; adds ``ratio_to_floor`` and the floor to ``summaries``."""
        entries = {a["id"]: a for a in acquisitions}
        cells = []
        for summary in summaries:
            key = (summary["acquisition"], summary["format"], summary["cache_state"])
            entry = entries.get(key[0])
            if entry is None:
                continue
            staging = _staging_of(trials_, key)
            components = self.path_components(entry, key[1], key[2], staging)
            cell = judge_cell(key, components, summary.get("median"), staging)
            cells.append(cell)
            summary["floor_seconds"] = cell["floor_seconds"]
            summary["floor_method"] = cell["method"]
            summary["ratio_to_floor"] = cell["ratio_to_floor"]
            summary["floor_status"] = cell["status"]
        return {
            "version": FLOORS_VERSION,
            "settings": {**self.settings.to_dict(), "cold_threads": self.cold_threads},
            "cells": cells,
            "cold_reads": self.cold,
            "too_weak": [
                {k: c[k] for k in ("acquisition", "format", "cache_state", "method")}
                for c in cells
                if c["status"] == TOO_WEAK
            ],
        }


def _staging_of(trials_: list[dict], key: tuple[str, str, str]) -> str | None:
    """The staging most of the cell's kept trials took (cuda loads report it)."""
    seen = Counter(
        t.get("staging")
        for t in trials_
        if (t["acquisition"], t["format"], t["cache_state"]) == key and t["kept"]
    )
    seen.pop(None, None)
    return seen.most_common(1)[0][0] if seen else None


def judge_cell(
    key: tuple[str, str, str],
    components: list[dict],
    load_median: float | None,
    staging: str | None,
) -> dict:
    """One floor cell: the slowest measured component bounds the load; its ratio and status."""
    measured = [c for c in components if c.get("seconds")]
    bound = max(measured, key=lambda c: c["seconds"]) if measured else None
    floor = bound["seconds"] if bound else None
    ratio = load_median / floor if floor and load_median else None
    if ratio is None:
        status = UNMEASURED
    elif ratio < 1.0:
        status = TOO_WEAK
    else:
        status = OK
    return {
        "acquisition": key[0],
        "format": key[1],
        "cache_state": key[2],
        "staging": staging,
        "method": bound["method"] if bound else None,
        "floor_seconds": floor,
        "load_median": load_median,
        "ratio_to_floor": ratio,
        "status": status,
        "components": components,
    }


def floor_lines(doc: dict) -> list[str]:
    """The summary's floor lines: each cell's floor, its method and ``ratio_to_floor``."""
    floors = doc.get("floors")
    if not floors:
        return []
    lines = ["floors (the load's median / the floor of the path it takes):"]
    for c in floors["cells"]:
        floor = "-" if c["floor_seconds"] is None else f"{c['floor_seconds'] * 1e3:.2f} ms"
        ratio = "-" if c["ratio_to_floor"] is None else f"{c['ratio_to_floor']:.2f}x"
        flag = "  FLOOR TOO WEAK" if c["status"] == TOO_WEAK else ""
        lines.append(
            f"  {c['acquisition']} {c['format']} {c['cache_state']}: floor {floor} "
            f"({c['method'] or 'unmeasured'})  ratio_to_floor {ratio}{flag}"
        )
    if floors["too_weak"]:
        lines.append(
            "  a load below its floor marks the floor too_weak: a defect of the floor, "
            "never a success of the load"
        )
    return lines
