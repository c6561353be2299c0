"""``harness native build``: configure and build the native C++ reader with CMake.

Prints the path of the built ``qem-native-load`` on stdout, which is what
``harness run io-scale --backend native --native-binary PATH`` takes.
"""

from __future__ import annotations

import argparse
import sys


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "native",
        help="build the native C++ .qem reader (qem-native-load)",
        description="Build the independent C++ reader of docs/qem-format.md.",
    )
    actions = parser.add_subparsers(dest="native_command", metavar="ACTION")
    build = actions.add_parser(
        "build",
        help="configure and build native/ with CMake; print the binary's path",
        description=(
            "Configure and build native/ with CMake (C++17, libxxhash and libcrypto from "
            "pkg-config; native/ci-deps.sh installs them on Debian) and print the path of "
            "qem-native-load."
        ),
    )
    build.add_argument(
        "--build-dir", default=None, help="build folder (default: native/build in the checkout)"
    )
    build.add_argument(
        "--build-type",
        default="Release",
        choices=("Release", "RelWithDebInfo", "Debug"),
        help="CMake build type (default: Release)",
    )
    build.add_argument("--jobs", type=int, default=None, help="parallel compile jobs")
    build.add_argument(
        "--test", action="store_true", help="also run the native unit tests with ctest"
    )
    build.add_argument(
        "--verbose", action="store_true", help="show the compiler's output as it runs"
    )
    parser.set_defaults(func=run, native_parser=parser)


def run(args: argparse.Namespace) -> int:
    from harness.errors import UsageError
    from harness.native import build_native

    if getattr(args, "native_command", None) != "build":
        raise UsageError("native: choose an action: build")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {args.jobs}")
    quiet = not args.verbose
    if quiet and sys.stderr.isatty():
        from rich.console import Console

        with Console(stderr=True).status("building the native reader (cmake)"):
            binary = build_native(
                args.build_dir,
                build_type=args.build_type,
                jobs=args.jobs,
                run_tests=args.test,
                quiet=True,
            )
    else:
        binary = build_native(
            args.build_dir,
            build_type=args.build_type,
            jobs=args.jobs,
            run_tests=args.test,
            quiet=quiet,
        )
    print(binary)
    return 0
