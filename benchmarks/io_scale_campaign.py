"""Prepare the io-scale campaign data: synthetic ARINA acquisitions plus their manifest.

The full-size campaign is two 512x512 scans of 192x192 frames (the ARINA detector), one
uint8 and one uint16. This script writes them (skipping any already present with the
same parameters, so it can be resumed) and a selection manifest with each master's
SHA-256; ``harness run io-scale`` then measures them:

    python benchmarks/io_scale_campaign.py DATA_DIR
    harness run io-scale DATA_DIR --backend cuda --selection-manifest DATA_DIR/manifest.json \\
        --storage-id ID --output-dir OUT --reps 5 --load-only

``--scan`` and ``--detector`` shrink the campaign for a rehearsal on a small machine.
The manifest lists the acquisitions of the ``--dtypes`` given; to split the (long)
writing over several commands, run once per dtype, then once with the default
``--dtypes`` (existing acquisitions with the same parameters are reused, not rewritten).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

#: (dtype, dose) of the campaign acquisitions; the dose gives realistic sparsity.
CAMPAIGN_DTYPES = {"uint8": 40000.0, "uint16": 40000.0}


def _acquisition_id(scan: tuple[int, int], det: tuple[int, int], dtype: str) -> str:
    return f"campaign-{scan[0]}x{scan[1]}x{det[0]}x{det[1]}-{dtype}"


def prepare(
    data_dir: Path,
    scan: tuple[int, int],
    det: tuple[int, int],
    dtypes: list[str],
    processes: int | None,
) -> Path:
    """Write (or reuse) the acquisitions and the manifest; return the manifest path."""
    from harness.run.manifest import dump_manifest, manifest_entry
    from quantem.stem4d.io.synthetic import write_synthetic_arina

    data_dir.mkdir(parents=True, exist_ok=True)
    entries = []
    for seed, dtype in enumerate(dtypes):
        name = _acquisition_id(scan, det, dtype)
        folder = data_dir / name
        master = folder / f"{name}_master.h5"
        parameters = {
            "scan": list(scan),
            "detector": list(det),
            "dtype": dtype,
            "dose": CAMPAIGN_DTYPES[dtype],
            "seed": seed,
        }
        stamp = folder / "parameters.json"
        if not (master.exists() and stamp.exists() and json.loads(stamp.read_text()) == parameters):
            start = time.perf_counter()
            master = write_synthetic_arina(
                folder,
                name=name,
                scan_shape=scan,
                detector_shape=det,
                dtype=dtype,
                dose=CAMPAIGN_DTYPES[dtype],
                seed=seed,
                processes=processes,
                overwrite=True,
            )
            stamp.write_text(json.dumps(parameters, sort_keys=True) + "\n")
            print(f"wrote {master} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        entries.append(manifest_entry(name, master, data_dir, scan, det, dtype))
    manifest = data_dir / "manifest.json"
    manifest.write_bytes(dump_manifest(entries, description="io-scale campaign (synthetic ARINA)"))
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("data_dir", type=Path, metavar="DATA_DIR")
    parser.add_argument("--scan", type=int, nargs=2, default=(512, 512), metavar=("R", "C"))
    parser.add_argument("--detector", type=int, nargs=2, default=(192, 192), metavar=("R", "C"))
    parser.add_argument(
        "--dtypes", nargs="+", default=list(CAMPAIGN_DTYPES), choices=list(CAMPAIGN_DTYPES)
    )
    parser.add_argument(
        "--processes", type=int, default=None, help="writer processes (default: all cores)"
    )
    args = parser.parse_args(argv)
    manifest = prepare(
        args.data_dir, tuple(args.scan), tuple(args.detector), args.dtypes, args.processes
    )
    print(manifest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
