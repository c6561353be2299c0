"""``harness data``: make test acquisitions (``harness data synth OUT ...``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.errors import UsageError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("data", help="make test acquisitions")
    commands = parser.add_subparsers(dest="data_command", metavar="DATA_COMMAND")
    synth = commands.add_parser(
        "synth",
        help="write a synthetic ARINA acquisition (master + data shards)",
        description=(
            "Write deterministic, physically plausible counting data in the Dectris ARINA "
            "HDF5 layout (bitshuffle-LZ4 chunks, one frame per chunk). Prints the master path."
        ),
    )
    synth.add_argument("out", metavar="OUT", help="output folder (created)")
    synth.add_argument("--name", default="synthetic", help="file-name prefix (default synthetic)")
    synth.add_argument(
        "--scan-shape",
        nargs=2,
        type=int,
        default=(16, 16),
        metavar=("R", "C"),
        help="scan rows and columns (default 16 16)",
    )
    synth.add_argument(
        "--detector-shape",
        nargs=2,
        type=int,
        default=(64, 64),
        metavar=("R", "C"),
        help="detector rows and columns (default 64 64; ARINA is 192 192)",
    )
    synth.add_argument(
        "--dtype",
        default="uint16",
        choices=("uint8", "uint16", "uint32"),
        help="stored data type (default uint16)",
    )
    synth.add_argument(
        "--frames-per-shard",
        type=int,
        default=None,
        help="frames per data file (default 10000)",
    )
    synth.add_argument(
        "--dose",
        type=float,
        default=None,
        help="mean counts per frame (default 40000: ~6:1 bitshuffle-LZ4 at 192x192 uint16)",
    )
    synth.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    synth.add_argument(
        "--dead-pixels",
        type=int,
        default=None,
        help="number of dead pixels (default min(4, detector pixels / 16))",
    )
    synth.add_argument(
        "--no-scan-shape-attr",
        action="store_true",
        help="omit the scan_shape attribute (readers then need a square scan or --scan-shape)",
    )
    synth.add_argument(
        "--processes", type=int, default=None, help="worker processes (default: all cores)"
    )
    synth.add_argument(
        "--overwrite", action="store_true", help="replace an acquisition of the same name"
    )
    synth.set_defaults(func=run)
    info = commands.add_parser(
        "info",
        help="describe an ARINA acquisition (shape, dtype, shards, compression)",
        description="Open an ARINA master file, check its layout and print a summary.",
    )
    info.add_argument("master", metavar="MASTER", help="the *_master.h5 file")
    info.add_argument(
        "--scan-shape",
        nargs=2,
        type=int,
        default=None,
        metavar=("R", "C"),
        help="scan rows and columns when the file does not say",
    )
    info.add_argument("--fresh-index", action="store_true", help="rebuild the frame index")
    info.set_defaults(func=run_info)
    parser.set_defaults(func=_missing_subcommand)


def _missing_subcommand(args: argparse.Namespace) -> int:
    raise UsageError("harness data: choose a subcommand (synth, info)")


def run_info(args: argparse.Namespace) -> int:
    from harness.commands._files import require_file
    from quantem.stem4d.io.arina import open_arina

    if Path(args.master).is_dir():
        require_file(args.master, "an ARINA master file (*_master.h5)")

    source = open_arina(
        args.master,
        scan_shape=tuple(args.scan_shape) if args.scan_shape else None,
        fresh_index=args.fresh_index,
    )
    logical = source.n_frames * source.frame_bytes
    compressed = source.index.compressed_bytes
    print(f"master      {source.master_path}")
    print(f"shape       {(*source.scan_shape, *source.detector_shape)} {source.dtype.name}")
    print(f"frames      {source.n_frames} in {len(source.shard_paths)} shard(s)")
    print(
        f"bytes       {logical} logical, {compressed} compressed "
        f"({logical / max(compressed, 1):.2f}:1)"
    )
    print(f"invalid     {source.metadata['invalid_pixels']} pixel(s) in pixel_mask")
    return 0


def run(args: argparse.Namespace) -> int:
    from quantem.stem4d.io import synthetic

    options = {}
    if args.frames_per_shard is not None:
        options["frames_per_shard"] = args.frames_per_shard
    if args.dose is not None:
        options["dose"] = args.dose
    if args.dead_pixels is not None:
        options["dead_pixels"] = args.dead_pixels
    if args.processes is not None and args.processes < 1:
        raise UsageError("--processes must be >= 1")
    try:
        master = synthetic.write_synthetic_arina(
            args.out,
            name=args.name,
            scan_shape=tuple(args.scan_shape),
            detector_shape=tuple(args.detector_shape),
            dtype=args.dtype,
            seed=args.seed,
            scan_shape_attr=not args.no_scan_shape_attr,
            processes=args.processes,
            overwrite=args.overwrite,
            **options,
        )
    except FileExistsError as exc:
        raise UsageError(f"{exc}; pass --overwrite to replace it") from None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(master)
    return 0
