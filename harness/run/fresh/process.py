"""First load as the user feels it: a fresh process from spawn to the first exact product.

``--fresh-process N`` spawns, per acquisition and format, N processes running
:mod:`harness.run.fresh.child` (by path: it imports only quantem), each loading the
file with the library's defaults and computing the bright-field image. The cell's time
runs from the parent's clock before the spawn to the child's mark after the product
(``time.monotonic_ns``, one clock for both), imports and CUDA initialisation included;
its parts are the interpreter start, the imports, the CUDA context, the load (with the
kernel compilations' own seconds recorded apart) and the product. The page cache is
warm (the files are made resident and checked); this process releases its own
page-cache registrations of the files first, and the processes that still map the
files (``/proc/PID/maps``) are recorded, so a child never shares registered pages
unseen. The product is checked, after the timing, against this process's BF of the
same file.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.report import quantile
from harness.run import trials
from harness.run.checks import FailureLog
from harness.run.fresh import child as fresh_child

#: The parts of a fresh process's time, in the order they happen (kernel_compile lies
#: inside load and product; jit_import, numba's import, only in records made before the
#: first calls ran without numba).
PARTS = (
    "interpreter", "imports", "cuda_context", "jit_import", "load", "kernel_compile", "product"
)  # fmt: skip
METHOD = "fresh-process: spawn to the first exact BF product (imports and CUDA start included)"


def processes_mapping(files: Sequence[Path]) -> list[int]:
    """PIDs (other than this one) whose memory maps one of ``files`` (best effort: the
    processes whose maps this user may read)."""
    names = {str(Path(f).resolve()) for f in files}
    holders = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            text = (entry / "maps").read_text()
        except OSError:
            continue
        if any(line.rsplit(None, 1)[-1] in names for line in text.splitlines() if "/" in line):
            holders.append(int(entry.name))
    return holders


def expected_bf(path: Path, backend: str) -> str:
    """This process's BF of ``path`` loaded as the child loads it (the reference)."""
    import quantem.stem4d.io
    from quantem.stem4d.detector import prepare

    with quantem.stem4d.io.load(path, backend=backend) as acq:
        return trials.sha256_array(prepare(acq).bf())


def spawn_one(
    path: Path, backend: str, env: dict[str, str], products: Sequence[str] = ("bf",)
) -> dict[str, Any]:
    """One child computing ``products`` (``bf``, ``com``) in order; its parts in seconds
    (one per product, or ``product`` for the BF alone) and its products' SHA-256."""
    argv = [
        sys.executable,
        fresh_child.__file__,
        json.dumps({"path": str(path), "backend": backend, "products": list(products)}),
    ]
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    spawn = time.monotonic_ns()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(
            f"fresh process for {path} exited {done.returncode}: {done.stderr[-800:]}"
        )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    marks = report["marks"]
    order = [("interpreter", "start"), ("imports", "imports"), ("cuda_context", "context"),
             ("jit_import", "jit_import"), ("load", "load")]  # fmt: skip
    order += [("product", "product")] if list(products) == ["bf"] else [(p, p) for p in products]
    parts, last = {}, spawn
    for name, mark in order:
        if mark in marks:
            parts[name] = (marks[mark] - last) / 1e9
            last = marks[mark]
    if backend in ("cuda", "cpu"):
        parts["kernel_compile"] = float(report["kernel_compile_seconds"])
    return {
        "seconds": (marks["product"] - spawn) / 1e9,
        # user + system CPU of the whole child (to its exit): steadier than wall time
        # on a host whose cores other processes share
        "cpu_seconds": (reaped.ru_utime - used.ru_utime) + (reaped.ru_stime - used.ru_stime),
        "parts": parts,
        "kernel_paths": report["kernel_paths"],
        "numba_imported": bool(report.get("numba_imported")),
        "product_sha256": report["product_sha256"],
        "products_sha256": report.get("products_sha256", {}),
    }


def release_device_pool(backend: str) -> None:
    """cuda: hand this process's cached device memory back before a child loads (on an
    80 GB card a child found no room for the acquisition: the freed loads and the expected
    BF's data still sat in this process's CuPy pool)."""
    if backend != "cuda":
        return
    import cupy

    cupy.get_default_memory_pool().free_all_blocks()


def measure_fresh_processes(
    log: FailureLog, acquisition: str, fmt: str, path: Path, files: Sequence[Path],
    backend: str, count: int, index_dir: Path,
) -> dict[str, Any]:  # fmt: skip
    """``count`` fresh processes of one acquisition and format; the cell's record."""
    from quantem.stem4d.cuda import release_registered_files

    expected = expected_bf(path, backend)
    release_device_pool(backend)
    env = dict(os.environ, QUANTEM_INDEX_DIR=str(index_dir))
    runs = []
    for i in range(count):
        release_registered_files(files)
        residency = trials.prepare_cache_state(trials.CACHED, files)
        holders = processes_mapping(files)
        run = spawn_one(path, backend, env)
        run.update(run_index=i, residency_before=round(residency.fraction, 6), holders=holders)
        if run["product_sha256"] != expected:
            log.correctness(
                f"fresh process {i} of {acquisition} {fmt}: BF {run['product_sha256'][:12]} "
                f"differs from this process's {expected[:12]}"
            )
        runs.append(run)
    seconds = sorted(r["seconds"] for r in runs)
    cpu = sorted(r["cpu_seconds"] for r in runs)
    return {
        "acquisition": acquisition,
        "format": fmt,
        "cache_state": trials.CACHED,
        "method": METHOD,
        "n": len(runs),
        "median": quantile(seconds, 0.5) if seconds else None,
        "min": seconds[0] if seconds else None,
        "median_cpu_seconds": quantile(cpu, 0.5) if cpu else None,
        "expected_product_sha256": expected,
        "runs": runs,
    }


def fresh_cells(ctx: Any, state: Any, count: int) -> list[dict[str, Any]]:
    """The fresh-process cells of one acquisition, one per format of the run's backend."""
    return [
        measure_fresh_processes(
            ctx.log,
            state.selected.id,
            fmt,
            state.path_of(fmt),
            state.files_of(fmt),
            ctx.profile.python_backend,
            count,
            ctx.settings.index_dir,
        )
        for fmt in ctx.profile.formats
    ]


def first_load_lines(doc: dict) -> list[str]:
    """The summary's lines of the fresh-process cells."""
    cells = (doc.get("first_load") or {}).get("cells") or []
    lines = (
        ["first load as the user feels it (fresh process, spawn to BF in hand):"] if cells else []
    )
    for c in cells:
        parts: dict[str, list[float]] = {name: [] for name in PARTS}
        for run in c["runs"]:
            for name, value in run["parts"].items():
                parts.setdefault(name, []).append(value)
        shown = ", ".join(f"{k} {quantile(sorted(v), 0.5):.3f} s" for k, v in parts.items() if v)
        cpu = c.get("median_cpu_seconds")
        cpu_text = f", CPU {cpu:.3f} s" if cpu is not None else ""
        lines.append(
            f"  {c['acquisition']} {c['format']}: median {c['median']:.3f} s{cpu_text} of "
            f"{c['n']} ({shown})"
        )
        held = sorted({pid for run in c["runs"] for pid in run["holders"]})
        if held:
            lines.append(f"    other processes mapped the files meanwhile: PIDs {held}")
    return lines


__all__ = ["METHOD", "first_load_lines", "fresh_cells", "measure_fresh_processes"]
