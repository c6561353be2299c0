"""``harness manifest make ROOT [--out M.json]``: a selection manifest for real data."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.errors import EXIT_OK, UsageError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("manifest", help="write selection manifests")
    commands = parser.add_subparsers(dest="manifest_command", metavar="MANIFEST_COMMAND")
    make = commands.add_parser(
        "make",
        help="a selection manifest for the ARINA acquisitions under ROOT",
        description=(
            "Find every *_master.h5 under ROOT and write a selection manifest (docs/io-scale.md): "
            "an id from its path, the filename relative to ROOT, the master's SHA-256, shape and "
            "dtype, and each linked shard's size, SHA-256 and per-frame chunk checksums (every "
            "run checks the files against them before measuring; reads all data once); with --products also the indexed product of a trusted CPU load, which every "
            "later run must reproduce exactly."
        ),
    )
    make.add_argument("root", metavar="ROOT", help="the data folder")
    make.add_argument(
        "--out", metavar="M.json", help="write here (refuses to overwrite); default stdout"
    )
    make.add_argument(
        "--products",
        action="store_true",
        help="also record indexed_product_sha256 from a CPU load of each acquisition (reads all data)",
    )
    make.set_defaults(func=run_make)
    parser.set_defaults(func=_missing_subcommand)


def _missing_subcommand(args: argparse.Namespace) -> int:
    raise UsageError("manifest needs a subcommand: make")


def run_make(args: argparse.Namespace) -> int:
    from harness.run.manifest_make import build_manifest

    out = Path(args.out) if args.out else None
    if out is not None and out.exists():
        raise UsageError(f"{out}: exists; manifest make never overwrites (choose another --out)")
    progress = None
    if args.products and sys.stderr.isatty():
        progress = lambda name: print(f"loading {name}", file=sys.stderr)  # noqa: E731
    data = build_manifest(args.root, products=args.products, progress=progress)
    if out is None:
        sys.stdout.write(data.decode("utf-8"))
    else:
        with open(out, "xb") as handle:  # "x": never replace an existing manifest
            handle.write(data)
        print(f"wrote {out}")
    return EXIT_OK
