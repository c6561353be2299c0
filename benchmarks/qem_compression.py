"""Compression of synthetic counting data: .qem vs bitshuffle-LZ4 vs zstd.

For each dose, the same frames (``quantem.stem4d.io.synthetic.make_frames``) are encoded as

* ``.qem`` (whole file: header, model, indexes, payload, footer);
* bitshuffle-LZ4 as the ARINA HDF5 filter stores it: one chunk per frame, the
  filter's 12-byte chunk header plus the LZ4 block stream (HDF5's own metadata not
  counted, which favours bitshuffle-LZ4);
* zstd level 3 per frame (one chunk per frame, like the HDF5 layout).

It prints bits per pixel, bits per count (compressed bits / detected counts on valid
pixels) and the size ratios, as a Markdown table. Usage::

    python benchmarks/qem_compression.py [--scan 32 32] [--det 192 192] [--doses 400 2000 40000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import git_revision

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from quantem.stem4d.acquisition import Acquisition
from quantem.stem4d.io.qem.writer import save_qem
from quantem.stem4d.io.synthetic import SyntheticModel, make_frames

BSHUF_CHUNK_HEADER = 12


def measure(scan: tuple[int, int], det: tuple[int, int], dose: float, seed: int) -> dict:
    import bitshuffle
    import zstandard

    n = scan[0] * scan[1]
    frames = make_frames(0, n, scan_shape=scan, detector_shape=det, dose=dose, seed=seed)
    mask = SyntheticModel(scan, det, "uint16", dose, seed).pixel_mask
    counts = int(frames[:, mask == 0].astype(np.int64).sum())
    pixels = frames.size
    bslz4 = sum(BSHUF_CHUNK_HEADER + bitshuffle.compress_lz4(f, 0).nbytes for f in frames)
    zstd = zstandard.ZstdCompressor(level=3)
    zst = sum(len(zstd.compress(f.tobytes())) for f in frames)
    acq = Acquisition(frames.reshape(*scan, *det), {"pixel_mask": mask}, mask == 0, "cpu")
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        path = save_qem(acq, Path(tmp) / "x.qem")
        encode = time.perf_counter() - started
        qem = os.path.getsize(path)
    return {
        "dose": dose,
        "mean_count": counts / (n * int((mask == 0).sum())),
        "nonzero": float((frames[:, mask == 0] != 0).mean()),
        "raw": frames.nbytes,
        "qem": qem,
        "bslz4": bslz4,
        "zstd": zst,
        "pixels": pixels,
        "counts": counts,
        "encode_s": encode,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scan", type=int, nargs=2, default=(32, 32))
    parser.add_argument("--det", type=int, nargs=2, default=(192, 192))
    parser.add_argument("--doses", type=float, nargs="+", default=(400.0, 2000.0, 40000.0))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    revision = git_revision()
    print(f"shape {tuple(args.scan) + tuple(args.det)} uint16, seed {args.seed}, rev {revision}")
    print()
    print(
        "| dose (counts/frame) | mean count/pixel | nonzero pixels | format | bytes | "
        "bits/pixel | bits/count | size vs .qem |"
    )
    print("|---:|---:|---:|---|---:|---:|---:|---:|")
    for dose in args.doses:
        r = measure(tuple(args.scan), tuple(args.det), dose, args.seed)
        for name in ("qem", "bslz4", "zstd", "raw"):
            label = {
                "qem": ".qem",
                "bslz4": "bitshuffle-LZ4",
                "zstd": "zstd-3",
                "raw": "uncompressed",
            }[name]
            size = r[name]
            print(
                f"| {dose:g} | {r['mean_count']:.4f} | {100 * r['nonzero']:.1f}% | {label} | "
                f"{size} | {8 * size / r['pixels']:.4f} | {8 * size / r['counts']:.4f} | "
                f"{size / r['qem']:.2f}x |"
            )
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
