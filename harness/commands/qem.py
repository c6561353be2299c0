"""``harness qem``: convert to, verify, inspect and archive the header of ``.qem`` files.

* ``convert SRC OUT``: write ``OUT`` from an ARINA master (or another ``.qem``);
  ``--verify`` decodes it and compares every count before it is moved into place. The
  ``.<name>.<pid>.partial`` files that killed converts left in OUT's folder are removed
  first (:func:`harness.fsio.remove_stale_partials`).
* ``verify FILE``: every checksum plus a full decode; exit 1 naming the first bad block.
* ``inspect FILE``: header, layout and byte accounting (``--json`` for machines).
* ``header FILE``: the archivable header document (deterministic JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from harness.commands._files import require_file
from harness.errors import EXIT_OK, HarnessError, UsageError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "qem",
        help="convert, verify and inspect .qem files",
        description="The .qem container (docs/qem-format.md): convert, verify, inspect, header.",
    )
    commands = parser.add_subparsers(dest="qem_command", metavar="QEM_COMMAND")

    convert = commands.add_parser("convert", help="write a .qem file from an ARINA master")
    convert.add_argument("source", metavar="SRC", help="ARINA *_master.h5 (or a .qem file)")
    convert.add_argument("out", metavar="OUT", help="the .qem file to write (must not exist)")
    convert.add_argument(
        "--verify", action="store_true", help="decode the result and compare with the source"
    )
    convert.add_argument(
        "--source-hashes", action="store_true", help="record the SHA-256 of every source file"
    )
    convert.add_argument(
        "--block-frames",
        type=int,
        default=None,
        metavar="N",
        help="frames per block (default: >= 262144 pixels per block)",
    )
    convert.add_argument(
        "--keep-source-dtype",
        action="store_true",
        help="store the source dtype instead of the narrowest that fits",
    )
    convert.add_argument(
        "--format-version",
        type=int,
        choices=(1, 2),
        default=1,
        help="1 (default): masks and values; 2: per-pixel symbols in detector row bands, "
        "whose masked sums decode only the bands a mask touches (docs/qem-format.md §19)",
    )
    convert.add_argument(
        "--band-rows",
        type=int,
        default=None,
        metavar="N",
        help="--format-version 2 only: detector rows per band (default: chosen by the writer)",
    )
    convert.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    convert.set_defaults(func=run_convert)

    verify = commands.add_parser(
        "verify",
        help="check every checksum and decode every block",
        description=(
            "Check the header, index and block checksums of a .qem file and decode every "
            "block; exits 0 only when all of it is intact."
        ),
    )
    verify.add_argument("file", metavar="FILE")
    verify.set_defaults(func=run_verify)

    inspect = commands.add_parser(
        "inspect",
        help="header, layout and byte accounting",
        description=(
            "Print a .qem file's header, block layout and byte accounting (payload, index, "
            "padding, compression ratio) without decoding the blocks."
        ),
    )
    inspect.add_argument("file", metavar="FILE")
    inspect.add_argument("--json", action="store_true", help="print JSON")
    inspect.set_defaults(func=run_inspect)

    header = commands.add_parser(
        "header",
        help="print the archivable header JSON",
        description=(
            "Print the .qem file's header as canonical JSON (sorted keys), the document to "
            "archive beside the data (docs/qem-format.md)."
        ),
    )
    header.add_argument("file", metavar="FILE")
    header.set_defaults(func=run_header)

    parser.set_defaults(func=lambda args: _missing(parser))


def _missing(parser: argparse.ArgumentParser) -> int:
    raise UsageError("harness qem needs a command: convert, verify, inspect or header")


def _dump(document: dict) -> str:
    return json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n"


def run_convert(args: argparse.Namespace) -> int:
    from pathlib import Path

    from quantem.stem4d.io.qem.writer import save_qem

    out = Path(args.out)
    if out.suffix.lower() != ".qem":
        raise UsageError(f"OUT must end in .qem: {out}")
    if args.block_frames is not None and args.block_frames < 1:
        raise UsageError("--block-frames must be >= 1")
    if args.band_rows is not None and args.format_version != 2:
        raise UsageError("--band-rows applies to --format-version 2 only")
    if args.band_rows is not None and args.band_rows < 1:
        raise UsageError("--band-rows must be >= 1")
    from harness.fsio import remove_stale_partials

    # a killed convert leaves its .partial file: the next convert into the folder removes it
    for stale in remove_stale_partials(out.absolute().parent):
        print(f"removed {stale} (left by a killed writer)", file=sys.stderr)
    started = time.perf_counter()
    try:
        save_qem(
            args.source,
            out,
            verify=args.verify,
            source_hashes=args.source_hashes,
            block_frames=args.block_frames,
            keep_source_dtype=args.keep_source_dtype,
            overwrite=args.overwrite,
            version=args.format_version,
            band_rows=args.band_rows,
        )
    except ValueError as exc:  # the writer's checks of the options against this source
        raise HarnessError(f"cannot write {out} from {args.source}: {exc}") from None
    seconds = time.perf_counter() - started
    from quantem.stem4d.io.qem.reader import QemFile

    with QemFile(out, verify=False) as qem:
        layout = qem.layout()
    verified = " (verified)" if args.verify else ""
    print(
        f"wrote {out}{verified}: {layout['file_bytes']} bytes, "
        f"{layout['bits_per_pixel']:.3f} bits/pixel, ratio {layout['compression_ratio']:.2f} "
        f"vs decoded, {seconds:.2f} s"
    )
    return EXIT_OK


def run_verify(args: argparse.Namespace) -> int:
    require_file(args.file, "a .qem file")
    import numpy as np

    from quantem.stem4d.io.qem.reader import QemFile

    started = time.perf_counter()
    with QemFile(args.file, verify=True) as qem:
        qem.verify_checksums()
        per = max(
            1,
            (64 << 20)
            // max(1, qem.block_frames * qem.header.frame_pixels * qem.header.stored_itemsize),
        )
        for first in range(0, qem.n_blocks, per):
            qem.decode_blocks(np.arange(first, min(first + per, qem.n_blocks)))
        n_blocks, n_frames = qem.n_blocks, qem.n_frames
    seconds = time.perf_counter() - started
    print(
        f"{args.file}: OK ({n_blocks} blocks, {n_frames} frames, checksums and full decode, "
        f"{seconds:.2f} s)"
    )
    return EXIT_OK


def run_inspect(args: argparse.Namespace) -> int:
    require_file(args.file, "a .qem file")
    from quantem.stem4d.io.qem.reader import QemFile

    with QemFile(args.file, verify=False) as qem:
        layout = qem.layout()
        header = qem.header
        metadata = qem.metadata
    document = {
        "file": str(args.file),
        "version": f"{header.version_major}.{header.version_minor}",
        "shape": [*header.scan_shape, *header.detector_shape],
        "dtype": metadata["dtype"],
        "source_dtype": metadata["source_dtype"],
        "encoder": metadata.get("encoder"),
        "source": metadata.get("source"),
        **layout,
    }
    if args.json:
        sys.stdout.write(_dump(document))
        return EXIT_OK
    out = sys.stdout
    out.write(
        f"{args.file}: .qem {document['version']}, shape {tuple(document['shape'])}, "
        f"{document['dtype']} (source {document['source_dtype']})\n"
    )
    out.write(
        f"  {layout['file_bytes']} bytes, {layout['bits_per_pixel']:.4f} bits/pixel, "
        f"compression ratio {layout['compression_ratio']:.2f} (decoded bytes / file bytes)\n"
    )
    blocks = layout["blocks"]
    out.write(
        f"  blocks: {blocks['count']} x {blocks['frames_per_block']} frames "
        f"(rans {blocks['rans']}, zero {blocks['zero']}, raw {blocks['raw']})\n"
    )
    model = layout["model"]
    out.write(
        f"  model: {model['n_classes']} classes, {model['n_contexts']} contexts, "
        f"{'quads' if header.version_major == 2 else 'groups'} per class "
        f"{model['class_groups']}\n"
    )
    out.write("  sections:\n")
    for name, section in layout["sections"].items():
        out.write(
            f"    {name:<16} offset {section['offset']:>14}  length {section['length']:>14}"
            f"  xxh3 {section['xxh3']}\n"
        )
    out.write("  bytes:\n")
    total = layout["file_bytes"]
    for name, value in layout["bytes"].items():
        label = f"  {name[len('payload_') :]}" if name.startswith("payload_") else name
        out.write(f"    {label:<24} {value:>14}  {100 * value / total:6.2f}%\n")
    return EXIT_OK


def run_header(args: argparse.Namespace) -> int:
    require_file(args.file, "a .qem file")
    from quantem.stem4d.io.qem.reader import QemFile

    with QemFile(args.file, verify=False) as qem:
        sys.stdout.write(_dump(qem.header_document()))
    return EXIT_OK
