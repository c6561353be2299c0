"""A one-shot script's BF and CoM as the user feels it: fresh processes, ours and the peers'.

``harness run compute products --fresh-process N [--peer-python PY]`` runs, per
acquisition and before the in-process rounds, N fresh processes of
:mod:`harness.run.fresh.child` (load the ARINA file with the defaults, BF, then CoM)
and, where ``PY`` has them, N of each peer's one-shot BF of the same disk (py4DSTEM's
ARINA reader; LiberTEM's inline context on the master's one data link, so one-shard
files only). Each cell's time runs from the parent's clock before the spawn to the
child's mark after its last product (``time.monotonic_ns``, one clock), imports
included; ``cpu_seconds`` is the reaped child's user and system CPU to its exit. The
processes run round-robin (ours, then each peer, N times), so on a shared host every
library sees the same contention. The page cache is warm (each file made resident
before each spawn, residency recorded).

Checked outside the timings: our products against this process's BF and CoM of the
same file (a difference is a correctness failure); a peer's BF against the exact integer
sum over the same disk (``pixel centre within the radius``), recorded as
``bf_equals_disk_sum`` (a peer's own pixel rule may differ: reported, not enforced). The
peers are asked for the BF only, so their cells are a lower bound of a BF and CoM.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.report import quantile
from harness.run import trials
from harness.run.checks import FailureLog
from harness.run.fresh.process import spawn_one

OURS = "quantem.stem4d"
PRODUCTS = ("bf", "com")
METHOD = "fresh-process: spawn to BF and CoM in hand (imports included), page cache warm"
PEER_METHOD = (
    "fresh-process: spawn to the peer's BF of the same disk (imports included; no CoM "
    "asked: a lower bound of BF and CoM), page cache warm"
)

_PRELUDE = """
import json, sys, time
marks = {"start": time.monotonic_ns()}
"""

#: Each peer's one-shot script: argv[1] the master, argv[2] the disk ``[cy, cx, r]``.
PEER_SCRIPTS = {
    "py4DSTEM": _PRELUDE
    + """
import hashlib
import numpy as np
import py4DSTEM
marks["imports"] = time.monotonic_ns()
dc = py4DSTEM.import_file(sys.argv[1], filetype="arina")
marks["load"] = time.monotonic_ns()
cy, cx, r = json.loads(sys.argv[2])
bf = dc.get_virtual_image(mode="circle", geometry=((cy, cx), r), verbose=False).data
marks["bf"] = time.monotonic_ns()
digest = hashlib.sha256(np.ascontiguousarray(bf, dtype=np.float64).tobytes()).hexdigest()
print(json.dumps({"marks": marks, "bf_float64_sha256": digest}))
""",
    "LiberTEM": _PRELUDE
    + """
import hashlib
import numpy as np
from libertem.api import Context
marks["imports"] = time.monotonic_ns()
ctx = Context.make_with("inline")
# LiberTEM 0.16 has no ARINA reader: its HDF5 dataset, on the master's one data link
ds = ctx.load("hdf5", path=sys.argv[1], ds_path="entry/data/data_000001")
marks["load"] = time.monotonic_ns()
cy, cx, r = json.loads(sys.argv[2])
bf = ctx.run(ctx.create_disk_analysis(ds, cx=cx, cy=cy, r=r))["intensity"].raw_data
marks["bf"] = time.monotonic_ns()
digest = hashlib.sha256(np.ascontiguousarray(bf, dtype=np.float64).tobytes()).hexdigest()
print(json.dumps({"marks": marks, "bf_float64_sha256": digest}))
""",
}

_VERSION_SCRIPT = {
    "py4DSTEM": "import py4DSTEM; print(py4DSTEM.__version__)",
    "LiberTEM": "import libertem; print(libertem.__version__)",
}


def peer_versions(python: str | os.PathLike | None) -> dict[str, str | None]:
    """Each peer's version in ``python``, None where it does not import there."""
    found: dict[str, str | None] = {name: None for name in PEER_SCRIPTS}
    if python is None:
        return found
    for name, script in _VERSION_SCRIPT.items():
        try:
            done = subprocess.run(
                [str(python), "-c", script], capture_output=True, text=True, timeout=300,
                env=_peer_env(), check=False,
            )  # fmt: skip
        except OSError:
            return found
        if done.returncode == 0 and done.stdout.strip():
            found[name] = done.stdout.strip().splitlines()[-1]
    return found


def _peer_env() -> dict[str, str]:
    # the peers' own environment: our tree must not shadow their packages
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _sha256(array: Any) -> str:
    import numpy as np

    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def to_host(array: Any) -> Any:
    return array.get() if hasattr(array, "get") and hasattr(array, "device") else array


def reference(master: Path, backend: str) -> dict[str, Any]:
    """This process's products of ``master`` (the reference), the disk and the disk sum."""
    import numpy as np

    import quantem.stem4d.io
    from quantem.stem4d.detector import prepare

    with quantem.stem4d.io.load(master, backend=backend) as acq:
        session = prepare(acq)
        bf = to_host(session.bf())
        com = session.center_of_mass()
        disk = session.bright_field_disk()
        cy, cx, r = float(disk.center[0]), float(disk.center[1]), float(disk.radius)
        frames = np.asarray(to_host(acq.data))
        rows, cols = np.ogrid[: frames.shape[-2], : frames.shape[-1]]
        inside = (rows - cy) ** 2 + (cols - cx) ** 2 <= r**2
        disk_sum = frames[..., inside].sum(axis=-1, dtype=np.int64).astype(np.float64)
        return {
            "products_sha256": {
                "bf": _sha256(bf),
                "com_row": _sha256(to_host(com.row)),
                "com_col": _sha256(to_host(com.col)),
            },
            "disk": [cy, cx, r],
            "disk_sum_float64_sha256": _sha256(disk_sum),
        }


def spawn_peer(python: str, name: str, master: Path, disk: list[float]) -> dict[str, Any]:
    """One fresh process of a peer's one-shot BF; its parts and its BF's hash."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    spawn = time.monotonic_ns()
    done = subprocess.run(
        [python, "-c", PEER_SCRIPTS[name], str(master), json.dumps(disk)],
        capture_output=True, text=True, env=_peer_env(), check=False,
    )  # fmt: skip
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{name} exited {done.returncode}: {done.stderr[-800:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    marks = report["marks"]
    parts, last = {}, spawn
    for part, mark in (("interpreter", "start"), ("imports", "imports"), ("load", "load"),
                       ("bf", "bf")):  # fmt: skip
        parts[part] = (marks[mark] - last) / 1e9
        last = marks[mark]
    return {
        "seconds": (marks["bf"] - spawn) / 1e9,
        "cpu_seconds": (reaped.ru_utime - used.ru_utime) + (reaped.ru_stime - used.ru_stime),
        "parts": parts,
        "bf_float64_sha256": report["bf_float64_sha256"],
    }


def _cell(acquisition: str, library: str, version: str | None, method: str, runs: list) -> dict:
    seconds = sorted(r["seconds"] for r in runs)
    cpu = sorted(r["cpu_seconds"] for r in runs)
    return {
        "acquisition": acquisition,
        "library": library,
        "version": version,
        "method": method,
        "n": len(runs),
        "median": quantile(seconds, 0.5) if seconds else None,
        "min": seconds[0] if seconds else None,
        "median_cpu_seconds": quantile(cpu, 0.5) if cpu else None,
        "runs": runs,
    }


def _warm(files: Sequence[Path]) -> float:
    return round(trials.prepare_cache_state(trials.CACHED, files).fraction, 6)


def measure_first_calls(
    log: FailureLog,
    acquisition: str,
    master: Path,
    backend: str,
    count: int,
    peer_python: str | None,
    versions: dict[str, str | None],
) -> list[dict[str, Any]]:
    """The fresh-process cells of one acquisition: ours and each installed peer's."""
    import quantem.stem4d as stem4d
    from quantem.stem4d.io.arina import read_shard_links

    links = read_shard_links(master)
    files = [master, *(Path(link.path) for link in links)]
    expected = reference(master, backend)
    env = dict(os.environ)
    peers = [name for name in PEER_SCRIPTS if peer_python is not None and versions.get(name)]
    skipped: dict[str, str] = {}
    if "LiberTEM" in peers and len(links) != 1:
        skipped["LiberTEM"] = f"LiberTEM reads one data link; this master has {len(links)}"
    runs: dict[str, list[dict]] = {name: [] for name in [OURS, *peers]}
    # round-robin, ours then each peer: on a shared host they see the same contention
    for i in range(count):
        for name in runs:
            if name in skipped:
                continue
            residency = _warm(files)
            if name == OURS:
                run = spawn_one(master, backend, env, PRODUCTS)
                _check_ours(log, acquisition, i, run, expected["products_sha256"])
            else:
                try:
                    run = spawn_peer(peer_python, name, master, expected["disk"])
                except RuntimeError as exc:
                    skipped[name], runs[name] = f"failed: {str(exc)[-400:]}", []
                    continue
                same = run["bf_float64_sha256"] == expected["disk_sum_float64_sha256"]
                run["bf_equals_disk_sum"] = same
            run.update(run_index=i, residency_before=residency)
            runs[name].append(run)
    ours = _cell(acquisition, OURS, stem4d.__version__, METHOD, runs[OURS])
    ours["expected_products_sha256"] = expected["products_sha256"]
    cells = [ours]
    for name in peers:
        cell = _cell(acquisition, name, versions[name], PEER_METHOD, runs[name])
        cell.update(disk=expected["disk"], skipped=skipped.get(name))
        cells.append(cell)
    return cells


def _check_ours(log: FailureLog, acquisition: str, i: int, run: dict, expected: dict) -> None:
    for name, digest in expected.items():
        got = run["products_sha256"].get(name)
        if got != digest:
            log.correctness(
                f"fresh process {i} of {acquisition}: {name} {str(got)[:12]} differs from "
                f"this process's {digest[:12]}"
            )


def first_call_section(cells: list[dict], peer_python: str | None, versions: dict) -> dict:
    """The report's ``first_call`` section."""
    return {
        "method": METHOD,
        "products": list(PRODUCTS),
        "peer_python": peer_python,
        "peer_versions": versions,
        "cells": cells,
    }


def first_call_lines(doc: dict) -> list[str]:
    """The summary's lines of the fresh-process cells, ours beside the peers'."""
    cells = (doc.get("first_call") or {}).get("cells") or []
    lines = ["first call as a one-shot script feels it (fresh process, spawn to products):"]
    for c in cells:
        if c.get("skipped"):
            lines.append(f"  {c['acquisition']} {c['library']}: skipped ({c['skipped']})")
            continue
        if c["median"] is None:
            continue
        parts: dict[str, list[float]] = {}
        for run in c["runs"]:
            for name, value in run["parts"].items():
                parts.setdefault(name, []).append(value)
        shown = ", ".join(f"{k} {quantile(sorted(v), 0.5):.3f}" for k, v in parts.items())
        what = "BF+CoM" if c["library"] == OURS else "BF"
        lines.append(
            f"  {c['acquisition']} {c['library']} {c.get('version') or ''} {what}: median "
            f"{c['median']:.3f} s, CPU {c['median_cpu_seconds']:.3f} s of {c['n']} ({shown})"
        )
    return lines if cells else []


__all__ = [
    "METHOD",
    "OURS",
    "PEER_SCRIPTS",
    "first_call_lines",
    "first_call_section",
    "measure_first_calls",
    "peer_versions",
    "reference",
]
