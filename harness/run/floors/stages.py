"""Which floor bounds each stage of a compute workload, measured once the data is resident.

A workload names, per stage, the floor of the path that stage takes (``Workload.floors``):
``read_once`` for a stage that reads every byte of the data (the summed pattern, a centre
of mass over all pixels), ``mask_lines`` for a masked sum (the lines of its mask,
:mod:`harness.run.floors.mask_lines`). A stage it leaves out (``prepare``, a fit, an FFT of
derived arrays) reads no resident data, or a part no floor here models: it gets no ratio,
never one against a pass it need not make.

A masked stage's floor takes no frame totals as known: every round prepares a fresh session
and the products workload takes its centre of mass (which keeps the totals) last, so its BF
and ADF are bounded by their own masks' lines, not by the complement's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from harness.run.floors.mask_lines import mask_lines_floor
from harness.run.floors.read_once import read_once_floor


def measure_stage_floors(
    plan: Mapping[str, str],
    masks: Callable[[dict], dict[str, Any]] | None,
    state: dict,
    backend: str,
    barrier: Callable[[], None],
) -> dict[str, dict | None]:
    """``stage -> floor`` (None where none could be measured) for the stages ``plan`` names."""
    kinds = set(plan.values())
    whole = read_once_floor(state, backend, barrier) if "read_once" in kinds else None
    acq = state.get("acq")
    array = getattr(acq, "array", None)
    host = backend == "cpu" and array is not None and masks is not None
    drawn = masks(state) if host and "mask_lines" in kinds else {}
    out: dict[str, dict | None] = {}
    for stage, kind in plan.items():
        if kind == "read_once":
            out[stage] = whole
        elif kind == "mask_lines":
            out[stage] = (
                mask_lines_floor(np.asarray(array), drawn[stage], np.asarray(acq.validity, bool))
                if stage in drawn
                else None
            )
        else:
            raise ValueError(f"stage {stage}: unknown floor {kind!r}")
    return out


def with_ratios(
    summaries: list[dict], floors: Mapping[str, Mapping[str, dict | None]]
) -> list[dict]:
    """Each summary of a stage with a floor gets ``ratio_to_floor`` = its median / the
    floor, and ``floor_status`` (``too_weak`` below 1: a broken floor, never a fast stage)."""
    for s in summaries:
        floor = floors.get(s["acquisition"], {}).get(s["stage"])
        if not floor or not floor.get("seconds"):
            continue
        ratio = s["median"] / floor["seconds"] if s["median"] else None
        s.update(
            floor_method=floor["method"],
            floor_seconds=floor["seconds"],
            ratio_to_floor=ratio,
            floor_status=None if ratio is None else ("too_weak" if ratio < 1 else "ok"),
        )
    return summaries
