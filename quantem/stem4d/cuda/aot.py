"""Ahead-of-time fatbins for the common kernel specialisations.

A first load in a fresh process used to spend most of its time in NVRTC. The
specialisations listed by :func:`specialisations` (the ARINA detector's 192 x 192 frames,
and its 2x binning, in every supported element size) are built once with ``nvcc`` into
``quantem/stem4d/cuda/fatbin/`` (package data, committed: about 1 MB per file set, see
``docs/cuda-backend.md``) for sm_80, sm_90 and sm_100, with compute_100 PTX for newer
chips. :mod:`quantem.stem4d.cuda.module_loader` loads a fatbin when the rendered source's SHA-256
names one, and compiles with NVRTC otherwise, so an edited ``.cu`` file falls back to
NVRTC until the fatbins are rebuilt (``tests/test_cuda_aot.py`` fails while any is stale).

Rebuild (needs ``nvcc`` 12.8 or newer; nothing it builds needs a GPU to be built)::

    python -m quantem.stem4d.cuda.aot build
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from quantem.stem4d.cuda import detector_kernels, lz4_bitshuffle, module_loader, rans_decode, xxh3

#: Detector shapes the fatbins cover: the ARINA frame and its 2x binning.
DETECTOR_SHAPES = ((192, 192), (96, 96))
ARINA_DETECTOR = (192, 192)
#: ``.qem`` model sizes (2 contexts per class, 1 to MAX_CLASSES classes).
QEM_CONTEXTS = (2, 4, 6, 8)


def gencode_options() -> list[str]:
    """nvcc targets: machine code for each of AOT_ARCHES, PTX of the newest."""
    options = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in module_loader.AOT_ARCHES]
    newest = max(module_loader.AOT_ARCHES)
    options.append(f"-gencode=arch=compute_{newest},code=compute_{newest}")
    return options


def specialisations() -> Iterator[tuple[str, dict[str, int | str]]]:
    """Every (file, defines) the package ships a fatbin for."""
    from quantem.stem4d.io import arina_layout

    for elem in lz4_bitshuffle.SUPPORTED_ELEM_SIZES:
        block = arina_layout.default_block_elements(elem) * elem
        frame = ARINA_DETECTOR[0] * ARINA_DETECTOR[1]
        yield lz4_bitshuffle.SOURCE_FILE, lz4_bitshuffle.decoder_defines(elem, frame, block)
    for det in DETECTOR_SHAPES:
        for dtype in detector_kernels.ELEMENT_TYPES:
            yield detector_kernels.SOURCE_FILE, detector_kernels.module_defines(dtype, det)
    for itemsize in (1, 2, 4):
        for contexts in QEM_CONTEXTS:
            for reduce in (0, 1):
                defines = rans_decode.decoder_defines(itemsize, ARINA_DETECTOR, contexts, reduce)
                yield rans_decode.SOURCE_FILE, defines
    yield xxh3.SOURCE_FILE, {}


def stale() -> list[Path]:
    """Fatbins that the current sources name but that are missing."""
    return [
        module_loader.fatbin_path(name, defines)
        for name, defines in specialisations()
        if not module_loader.fatbin_path(name, defines).is_file()
    ]


def build_one(name: str, defines: dict[str, int | str], nvcc: str, out_dir: Path) -> Path:
    target = out_dir / module_loader.fatbin_path(name, defines).name
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / name
        source.write_text(module_loader.render_module_source(name, defines), encoding="utf-8")
        command = [
            nvcc, "-fatbin", *module_loader.COMPILE_OPTIONS, *gencode_options(),
            # Compressed for size (3x smaller; drivers of CUDA 12.8 and newer read it).
            "--compress-mode=size",
            "-o", str(target), str(source),
        ]  # fmt: skip
        subprocess.run(command, check=True, capture_output=True, text=True)
    return target


def build(out_dir: Path = module_loader.FATBIN_DIR, jobs: int | None = None) -> list[Path]:
    """Build every specialisation into ``out_dir``; remove fatbins no source names."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise RuntimeError("nvcc is not on PATH; the fatbins need the CUDA toolkit to build")
    out_dir.mkdir(parents=True, exist_ok=True)
    wanted = list(specialisations())
    with ThreadPoolExecutor(jobs or os.cpu_count() or 2) as pool:
        built = list(pool.map(lambda item: build_one(*item, nvcc, out_dir), wanted))
    keep = {p.name for p in built}
    for old in out_dir.glob("*.fatbin"):
        if old.name not in keep:
            old.unlink()
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m quantem.stem4d.cuda.aot", description=__doc__)
    parser.add_argument("command", choices=["build", "check"])
    parser.add_argument("--jobs", type=int, default=None)
    args = parser.parse_args(argv)
    if args.command == "check":
        missing = stale()
        for path in missing:
            print(f"missing: {path.name}")
        return 1 if missing else 0
    try:
        built = build(jobs=args.jobs)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or ""
        print(f"error: {exc}\n{detail}", file=sys.stderr)
        return 1
    total = sum(p.stat().st_size for p in built)
    print(f"built {len(built)} fatbins, {total / 1e6:.2f} MB, in {module_loader.FATBIN_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

__all__ = ["build", "gencode_options", "specialisations", "stale"]
