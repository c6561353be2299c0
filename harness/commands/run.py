"""``harness run io-scale``: cold/cached load trials with verified cache state.

``harness run io-scale ROOT --backend {cpu,cuda,native,webgpu} --selection-manifest M.json
--storage-id ID --output-dir DIR [...]`` measures the acquisitions a manifest selects
and writes ``DIR/loading.json``; ``harness run io-scale --demo`` does the same on a
small synthetic suite. Exit codes: 0 passed (and within the baseline threshold),
1 execution, correctness or source-stability failure, 2 slowdown to review or
incomparable baseline, 64 usage error. See docs/io-scale.md.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from harness.commands.run_self import add_self_parser
from harness.safe_text import terminal_text
from harness.verdict import DEFAULT_RECHECK_LOOKS
from harness.views.console import print_line
from harness.views.scripted import add_output_arguments

DEFAULT_DEMO_HISTORY = "harness-history"
#: Where ``--demo`` keeps its reports (one folder per run) unless ``--output-dir`` is given,
#: so that the printed report path, and the path the journal records, exist afterwards.
DEFAULT_DEMO_REPORTS = "harness-demo"


class _RegisteredWorkloads:
    """The names in ``harness.run.compute.workloads.WORKLOADS``, read when first asked
    (parsing ``run compute NAME`` or its ``--help``), so that ``harness --help`` imports no
    workload and a new workload is named in one place only."""

    def _names(self) -> list[str]:
        from harness.run.compute.workloads import WORKLOADS

        return list(WORKLOADS)

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self):
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


COMPUTE_WORKLOADS = _RegisteredWorkloads()


class _WorkloadsHelp(str):
    """A help line naming every workload, filled in only when argparse formats it (its
    ``%`` expansion), so ``harness --help`` still imports no workload."""

    def __mod__(self, params):
        return str.__mod__(self.replace("{workloads}", ", ".join(COMPUTE_WORKLOADS)), params)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("run", help="run a benchmark (io-scale, compute, self)")
    benchmarks = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK")
    io = benchmarks.add_parser(
        "io-scale",
        help="cold and cached load trials of HDF5 and QEM with verified cache state",
        description=(
            "Measure cold and cached loads of the acquisitions a selection manifest names, "
            "in their ARINA HDF5 form and as a disposable .qem, with the cache state of every "
            "trial verified (residency probe, physical reads) and every load's product checked. "
            "Writes OUTPUT_DIR/loading.json. Exit 0 passed, 1 failure, 2 review/incomparable, "
            "64 usage error. `--demo` runs a small synthetic suite end to end."
        ),
    )
    io.add_argument(
        "root", metavar="ROOT", nargs="?", help="folder the manifest's filenames are relative to"
    )
    io.add_argument(
        "--demo", action="store_true", help="run on a small synthetic suite in a temporary folder"
    )
    io.add_argument(
        "--backend",
        choices=("cpu", "cuda", "native", "webgpu"),
        help="load backend (demo: best available)",
    )
    io.add_argument("--load-only", action="store_true", help="skip the timed conversion workflow")
    io.add_argument(
        "--reps", type=int, default=None, help="cold+cached pairs per format (default 5; demo 3)"
    )
    io.add_argument("--selection-manifest", type=Path, metavar="M.json", help="selection manifest")
    io.add_argument(
        "--storage-id", metavar="ID", help="name of the storage holding ROOT (comparison key)"
    )
    io.add_argument(
        "--output-dir",
        type=Path,
        metavar="DIR",
        help="where loading.json is written (must not hold one)",
    )
    io.add_argument(
        "--history-dir", type=Path, metavar="H", help="register the report into this history"
    )
    add_history_url_argument(io)
    io.add_argument(
        "--baseline",
        metavar="SHA_OR_PATH",
        help="baseline report: a path or a record SHA-256 prefix",
    )
    io.add_argument(
        "--regression-percent",
        type=float,
        default=20.0,
        help="median slowdown that triggers review",
    )
    io.add_argument(
        "--calibration",
        metavar="SHA_PREFIX",
        help="calibration to judge the baseline comparison against (default: the most recent "
        "matching one in the run's history, --history-dir or --history-url)",
    )
    io.add_argument(
        "--recheck",
        type=int,
        default=0,
        metavar="K",
        help="with --baseline: measure every flagged cell K more times right away",
    )
    io.add_argument(
        "--recheck-looks",
        type=int,
        default=DEFAULT_RECHECK_LOOKS,
        metavar="L",
        help="with --recheck: measure the cells still undecided K rounds more, up to L "
        f"batches in all (the verdict splits alpha over the L looks; default {DEFAULT_RECHECK_LOOKS})",
    )
    io.add_argument(
        "--paired",
        action="store_true",
        help="with --recheck: require the paired recheck (the baseline's code measured too, "
        "alternately with this code; the default whenever its code can be had), refusing "
        "with exit 2 when it cannot (docs/verdicts.md)",
    )
    io.add_argument(
        "--no-paired",
        action="store_true",
        help="with --recheck: recheck this code alone, against the baseline's original trials",
    )
    io.add_argument(
        "--baseline-tree",
        type=Path,
        metavar="DIR",
        help="with --recheck: a folder holding the baseline's code, for the paired recheck "
        "(default: this checkout when its source fingerprint is the baseline's, else git "
        "archive of its recorded revision)",
    )
    io.add_argument(
        "--lock-dir",
        type=Path,
        metavar="DIR",
        help="host lock folder (default $XDG_RUNTIME_DIR/quantem-harness or "
        "/tmp/quantem-harness-locks; $HARNESS_LOCK_DIR overrides)",
    )
    io.add_argument(
        "--lock-timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="seconds to wait for another run on the same GPU or storage (default 600)",
    )
    io.add_argument(
        "--fresh-index",
        action="store_true",
        help="rebuild the HDF5 frame index in every timed load",
    )
    io.add_argument(
        "--cold-reloads", type=int, default=0, metavar="N", help="extra evicted QEM reloads"
    )
    io.add_argument(
        "--no-verify", action="store_true", help="conversion: do not verify the written QEM"
    )
    io.add_argument(
        "--no-source-hashes", action="store_true", help="conversion: do not hash the source files"
    )
    io.add_argument(
        "--reloads",
        type=int,
        default=1,
        metavar="N",
        help="conversion: verified reopens (default 1)",
    )
    io.add_argument("--profile-reload", action="store_true", help="add one instrumented QEM load")
    io.add_argument(
        "--native-binary", type=Path, metavar="PATH", help="qem-native-load for --backend native"
    )
    io.add_argument(
        "--representation",
        choices=("dense", "encoded"),
        default="dense",
        help="cuda QEM loads: dense array or resident encoded payload (default dense)",
    )
    io.add_argument(
        "--qem-version",
        type=int,
        choices=(1, 2),
        default=1,
        help="format major version of the run's disposable .qem (default 1, the writer's)",
    )
    io.add_argument(
        "--threads", type=int, default=None, help="reader threads (default: the reader's choice)"
    )
    io.add_argument(
        "--devices",
        default=None,
        metavar="IDS",
        help="cuda: shard every load over these GPUs, e.g. 0,1 or 'all' (default: one GPU)",
    )
    add_verify_source_arguments(io)
    io.add_argument(
        "--floors",
        action="store_true",
        help="measure each cell's floor in the run (the path the load takes) and its "
        "ratio_to_floor (docs/io-scale.md, Floors)",
    )
    io.add_argument(
        "--fresh-process",
        type=int,
        default=0,
        metavar="N",
        help="first load as the user feels it: N fresh processes per acquisition and format, "
        "spawn to the first exact BF (docs/io-scale.md)",
    )
    add_output_arguments(io, "the report (loading.json)")
    # set by `harness calibrate` on each of its runs: the report says it is one of them
    io.add_argument("--calibration-run", metavar="I/N", help=argparse.SUPPRESS)
    io.set_defaults(func=run)
    add_compute_parser(benchmarks)
    add_self_parser(benchmarks)
    parser.set_defaults(func=_no_benchmark)


def add_verify_source_arguments(parser: argparse.ArgumentParser) -> None:
    """``--verify-source`` / ``--no-verify-source`` (default: verify)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--verify-source",
        dest="verify_source",
        action="store_const",
        const=True,
        default=None,
        help="the default for cpu and cuda: before measuring, check every shard file against "
        "the manifest's size and SHA-256 (once, untimed), and in every HDF5 load every raw "
        "chunk against the frame index's XXH3-64 (part of the comparison key); recorded in "
        "the report's source_check",
    )
    group.add_argument(
        "--no-verify-source",
        dest="verify_source",
        action="store_const",
        const=False,
        help="check neither the files against the manifest nor the chunks (recorded)",
    )


def add_history_url_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--history-url",
        metavar="URL",
        help="register the report into the history on this PostgreSQL server "
        "(postgresql+psycopg://USER@HOST/DB) instead of a folder",
    )


def check_history_usage(args: argparse.Namespace) -> None:
    """``--history-url`` excludes ``--history-dir``."""
    from harness.errors import UsageError

    if args.history_url and args.history_dir:
        raise UsageError("give --history-dir or --history-url, not both")


def run_history_location(args: argparse.Namespace) -> str | Path | None:
    """Where a run's history is: ``--history-url`` or ``--history-dir`` (one of them),
    else the demo's folder for ``--demo``, else none (the report is only written)."""
    given = args.history_url or args.history_dir
    if given is None and getattr(args, "demo", False):
        return Path(DEFAULT_DEMO_HISTORY)
    return given


def print_registered(console, history, registered: list) -> str | None:
    """Say what registering the run's report did; its SHA-256 (None when not registered)."""
    for result in registered:
        print_line(console, f"history {history.where}: {result.message}")
    if not registered:
        return None
    print_line(console, f"history {history.where}: journal head {registered[-1].journal_head}")
    return registered[-1].sha256


def _no_benchmark(args: argparse.Namespace) -> int:
    from harness.errors import UsageError

    raise UsageError("run: choose a benchmark: io-scale, compute or self")


def _config_from_args(args: argparse.Namespace, history, **overrides):
    from harness.render import registration_renderer
    from harness.run.io_scale.config import IoScaleConfig
    from harness.run.paired.pairing import parse_pairing_flags

    values = dict(
        root=Path(args.root) if args.root else None,
        manifest=args.selection_manifest,
        backend=args.backend,
        storage_id=args.storage_id,
        output_dir=args.output_dir,
        reps=args.reps if args.reps is not None else 5,
        load_only=args.load_only,
        representation=args.representation,
        qem_version=args.qem_version,
        history=history,
        render=registration_renderer(),
        baseline=args.baseline,
        regression_percent=args.regression_percent,
        calibration=args.calibration,
        recheck=args.recheck,
        recheck_looks=args.recheck_looks,
        paired=parse_pairing_flags(args.paired, args.no_paired, args.baseline_tree),
        baseline_tree=args.baseline_tree,
        lock_dir=args.lock_dir,
        lock_timeout=args.lock_timeout,
        fresh_index=args.fresh_index,
        verify_source=args.verify_source,
        floors=args.floors,
        check_source_files=args.verify_source is not False,
        fresh_processes=args.fresh_process,
        cold_reloads=args.cold_reloads,
        verify=not args.no_verify,
        source_hashes=not args.no_source_hashes,
        reloads=args.reloads,
        profile_reload=args.profile_reload,
        native_binary=args.native_binary,
        threads=args.threads,
        devices=_parse_devices_flag(args.devices),
        command=["harness", *sys.argv[1:]],
        purpose=_parse_calibration_run(args.calibration_run),
    )
    values.update(overrides)
    return IoScaleConfig(**values)


def _parse_calibration_run(value: str | None) -> dict | None:
    """``--calibration-run I/N`` (set by ``harness calibrate``) as the report's purpose."""
    from harness.errors import UsageError

    if value is None:
        return None
    try:
        run, runs = (int(part) for part in value.split("/"))
    except ValueError:
        raise UsageError(f"--calibration-run {value!r}: expected I/N, e.g. 3/8") from None
    if not 1 <= run <= runs:
        raise UsageError(f"--calibration-run {value!r}: expected 1 <= I <= N")
    return {"kind": "calibration", "run": run, "runs": runs}


def _parse_devices_flag(value: str | None) -> tuple[int, ...] | str | None:
    """``--devices 0,1`` as GPU ids, ``all`` kept as is (every visible GPU, resolved when
    the run checks its configuration); UsageError otherwise."""
    from harness.errors import UsageError

    if value is None:
        return None
    if value.strip() == "all":
        return "all"
    try:
        ids = tuple(int(part) for part in value.split(","))
    except ValueError:
        raise UsageError(f"--devices {value!r}: give GPU ids such as 0,1 or 'all'") from None
    return ids


def _check_usage(args: argparse.Namespace) -> None:
    from harness.errors import UsageError
    from harness.run.paired.pairing import parse_pairing_flags

    if args.threads is not None and args.threads < 1:
        raise UsageError("--threads must be at least 1")
    if args.reps is not None and args.reps < 1:
        raise UsageError(
            f"--reps must be at least 1, not {args.reps} (cold+cached pairs per format; "
            "default 5, demo 3)"
        )
    if args.backend == "cuda":
        from quantem.stem4d.backends import cuda_unavailable_reason

        reason = cuda_unavailable_reason()
        if reason is not None:
            raise UsageError(
                f"--backend cuda cannot run here: {reason}; use --backend cpu"
                + (
                    " (or leave --backend out: the demo picks the best available)"
                    if args.demo
                    else ""
                )
            )
    parse_pairing_flags(args.paired, args.no_paired, args.baseline_tree)
    if args.demo:
        given = [
            name for name in ("root", "selection_manifest", "storage_id") if getattr(args, name)
        ]
        if given:
            raise UsageError(f"--demo makes its own data; do not pass {', '.join(given)}")
        return
    missing = [
        flag
        for flag, value in (
            ("ROOT", args.root),
            ("--backend", args.backend),
            ("--selection-manifest", args.selection_manifest),
            ("--storage-id", args.storage_id),
            ("--output-dir", args.output_dir),
        )
        if not value
    ]
    if missing:
        raise UsageError(f"io-scale needs {', '.join(missing)} (or --demo)")
    if args.baseline is None and args.regression_percent != 20.0:
        raise UsageError("--regression-percent needs --baseline")
    if args.baseline is None and (args.recheck or args.calibration):
        raise UsageError("--recheck and --calibration need --baseline")


def _demo_report_dir() -> Path:
    """A new ``./harness-demo/<UTC time>[-n]/`` folder name for one demo run's report."""
    import time

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    folder = Path(DEFAULT_DEMO_REPORTS) / stamp
    n = 1
    while folder.exists():
        n += 1
        folder = Path(DEFAULT_DEMO_REPORTS) / f"{stamp}-{n}"
    return folder.absolute()


def run(args: argparse.Namespace) -> int:
    _check_usage(args)
    check_history_usage(args)
    from harness.run.provenance import check_code_origin

    check_code_origin()  # a foreign checkout is refused before the demo writes anything

    from harness.commands.history import opened_optional_history
    from harness.run.io_scale.kind import run_io_scale
    from harness.run.summary import print_summary
    from harness.views.scripted import human_console, output_mode

    console = human_console(args)
    # opened once, before anything is measured: a server that cannot be reached is refused first
    with opened_optional_history(run_history_location(args)) as history:
        if args.demo:
            import dataclasses

            from harness.run.demo import DEMO_REPS, DEMO_STORAGE_ID, demo_folder, write_demo_suite
            from harness.run.io_scale.config import check_config
            from quantem.stem4d.backends import best_backend

            with demo_folder() as folder:
                config = _config_from_args(
                    args,
                    history,
                    root=folder,
                    manifest=folder,
                    backend=args.backend or best_backend(),
                    storage_id=DEMO_STORAGE_ID,
                    output_dir=Path(args.output_dir) if args.output_dir else _demo_report_dir(),
                    reps=args.reps if args.reps is not None else DEMO_REPS,
                )
                check_config(config)  # every option refused before the demo data is written
                suite = write_demo_suite(folder)
                config = dataclasses.replace(config, root=suite.root, manifest=suite.manifest)
                outcome = run_io_scale(config)
        else:
            outcome = run_io_scale(_config_from_args(args, history))
        if output_mode(args) is None:
            print_summary(outcome.report, console)
        print_line(console, f"report: {outcome.report_path}")
        sha256 = print_registered(console, history, outcome.registered)
        print_run_end(args, outcome, sha256, history, console)
    return outcome.exit_code


def print_run_end(args, outcome, sha256: str | None, history, console) -> None:
    """The script outputs, or for people: what to open and what to run next."""
    from harness.history.records import sha256_bytes
    from harness.views.scripted import output_mode, print_json, quiet_line, report_verdict

    mode = output_mode(args)
    if mode == "json":
        print_json(Path(outcome.report_path).read_bytes())
        return
    if sha256 is None:  # not registered: the report file's own SHA-256
        sha256 = sha256_bytes(Path(outcome.report_path).read_bytes())
    if mode == "quiet":
        print(quiet_line(sha256, report_verdict(outcome.report)), flush=True)
        return
    if outcome.registered and history.holds_rendered_files:
        print_line(console, f"open: {Path(history.where) / 'index.html'} (the dashboard)")
    run = "harness run io-scale " + ("--demo" if args.demo else "...")
    if outcome.registered:  # the SHA-256 prefix finds it in the history
        # the demo's own folder goes unnamed: the demo finds it again by itself
        named = getattr(args, "history_url", None) or getattr(args, "history_dir", None)
        where = "" if args.demo and not named else " " + shlex.join(history.location_arguments())
        baseline, compare = sha256[:12], f"--baseline {sha256[:12]}{where} (the newest record)"
    else:
        where, baseline = "", str(outcome.report_path)
        compare = f"--baseline {baseline} NEW_DIR/loading.json"
    print_line(console, f"next: after a change, {run} --baseline {baseline} --recheck 5{where}")
    print_line(console, f"  or: harness compare {compare}")


def add_compute_parser(benchmarks: argparse._SubParsersAction) -> None:
    compute = benchmarks.add_parser(
        "compute",
        help=_WorkloadsHelp("stage timings and output hashes of a compute workload ({workloads})"),
        description=(
            "Run a compute workload on every acquisition of SOURCE (an ARINA master file or a "
            "selection manifest): each stage timed first and warm (--reps), device-synchronised; "
            "the SHA-256 of every output array. Writes OUTPUT_DIR/compute.json. Exit 0 passed, "
            "1 failure (including outputs_changed against a same-backend baseline), "
            "2 review/incomparable, 64 usage error. See docs/compute.md."
        ),
    )
    compute.add_argument(
        "workload",
        choices=COMPUTE_WORKLOADS,
        metavar="WORKLOAD",
        help="one of %(choices)s (harness/run/compute/workloads.py)",
    )
    compute.add_argument(
        "--source", required=True, metavar="PATH_OR_MANIFEST", help="master .h5 or manifest .json"
    )
    compute.add_argument("--root", metavar="ROOT", help="manifest root (default: its folder)")
    compute.add_argument("--backend", choices=("cpu", "cuda"), required=True)
    compute.add_argument("--storage-id", metavar="ID", default="local", help="storage name")
    compute.add_argument("--output-dir", type=Path, required=True, metavar="DIR")
    compute.add_argument("--reps", type=int, default=5, help="warm rounds after the first")
    compute.add_argument("--save-outputs", type=Path, metavar="DIR", help="write the outputs")
    compute.add_argument("--history-dir", type=Path, metavar="H")
    add_history_url_argument(compute)
    compute.add_argument("--baseline", metavar="SHA_OR_PATH")
    compute.add_argument("--regression-percent", type=float, default=20.0)
    compute.add_argument(
        "--no-verify-source",
        action="store_true",
        help="do not check the shard files against the manifest's size and SHA-256 before "
        "measuring (recorded in the report's source_check)",
    )
    compute.add_argument(
        "--accept-output-change",
        action="store_true",
        help="accept output hashes that differ from the baseline (recorded in the report)",
    )
    compute.add_argument(
        "--fresh-process",
        type=int,
        default=0,
        metavar="N",
        help="products: before the rounds, N fresh processes per acquisition, each loading "
        "the file and computing BF then CoM, timed from spawn (imports included); recorded "
        "in the report's first_call cells",
    )
    compute.add_argument(
        "--peer-python",
        metavar="PY",
        help="with --fresh-process: an interpreter with py4DSTEM and/or LiberTEM; each "
        "installed peer's one-shot BF of the same disk is measured the same way, same run",
    )
    compute.add_argument(
        "--format",
        choices=("hdf5", "qem"),
        default="hdf5",
        dest="source_format",
        help="qem: convert each acquisition once, untimed, to a .qem in the run's workspace "
        "(quantem.stem4d.io.save) and load that (default hdf5: the source itself)",
    )
    compute.add_argument(
        "--qem-version",
        type=int,
        choices=(1, 2),
        default=1,
        help="with --format qem: the format written (default 1, the writer's default)",
    )
    compute.add_argument(
        "--representation",
        choices=("dense", "encoded"),
        default="dense",
        help="with --format qem on cuda: encoded keeps the compressed payload resident and "
        "computes the products from it (products and virtual workloads)",
    )
    group = compute.add_argument_group("calibration and parameters")
    group.add_argument("--energy-ev", type=float)
    group.add_argument("--voltage-kv", type=float, help="the beam energy in kV (or --energy-ev)")
    group.add_argument("--convergence-mrad", "--semiangle-mrad", type=float)
    group.add_argument("--mrad-per-pixel", type=float)
    group.add_argument(
        "--inverse-angstrom-per-pixel",
        type=float,
        metavar="INV_A",
        help="the detector sampling in 1/A (with the beam energy; instead of --mrad-per-pixel)",
    )
    group.add_argument(
        "--accept-calibration-mismatch",
        action="store_true",
        help="run although a given calibration grossly disagrees with the data (recorded)",
    )
    group.add_argument("--scan-step", "--scan-step-a", type=float, metavar="ANGSTROM")
    group.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    group.add_argument(
        "--rotation",
        "--rotation-deg",
        type=float,
        metavar="DEG",
        help="dpc, ssb: fixed rotation; parallax: the rotation hint (the alignment's guess "
        "with --c10-guess, and which of the fit's two half-turn solutions is kept)",
    )
    group.add_argument("--transpose", choices=("auto", "yes", "no"), default="auto")
    group.add_argument(
        "--bin-factor", type=int, default=1, help="parallax: BF pixel groups; ssb: detector bin"
    )
    group.add_argument("--max-shift", type=float, help="parallax: peak search radius (px)")
    group.add_argument(
        "--c10-guess",
        type=float,
        metavar="ANGSTROM",
        help="parallax: C10 guess in A (= -defocus, at the entrance surface; e.g. the "
        "microscope's reading): each BF image is searched within --max-shift of the shift it "
        "predicts, coarse to fine in beam angle, so a guess some 30%% off is still corrected; "
        "dpc: the probe's defocus, for the focus check (a warning beyond 2 depths of field)",
    )
    group.add_argument("--upsample", type=int, default=2, help="parallax: reconstruction")
    group.add_argument("--correct-aberrations", action="store_true")
    group.add_argument("--inner", type=float, help="virtual: DF annulus inner radius")
    group.add_argument("--outer", type=float, help="virtual: DF annulus outer radius")
    group.add_argument("--unit", choices=("px", "mrad"), default="px")
    group.add_argument("--trials", type=int, default=200, help="ssb: TPE trials per fit")
    group.add_argument("--seed", type=int, default=0, help="ssb: the search's seed")
    group.add_argument(
        "--refine-evaluations", type=int, help="ssb: most Nelder-Mead evaluations per fit"
    )
    group.add_argument(
        "--regions",
        type=int,
        nargs=2,
        default=(2, 2),
        metavar=("ROWS", "COLS"),
        help="ssb: tiles of the regional fits",
    )
    group.add_argument(
        "--memory-budget",
        type=byte_size,
        metavar="SIZE",
        help="ssb: stream the source in blocks of scan rows, holding at most SIZE (bytes, or "
        "with KiB/MiB/GiB/KB/MB/GB; GPU memory on cuda) while preparing, instead of loading "
        "it whole",
    )
    group.add_argument(
        "--scan-block-rows",
        type=int,
        metavar="N",
        help="ssb: stream the source N scan rows at a time (instead of --memory-budget)",
    )
    compute.set_defaults(func=run_compute_command)


_SIZE_UNITS = {
    "": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}  # fmt: skip


def byte_size(text: str) -> int:
    """``"8GiB"``, ``"512 MB"`` or ``"1000000"`` as a number of bytes (argparse type)."""
    import re

    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size (a number of bytes, optionally with KiB, MiB, GiB, KB, MB "
            "or GB)"
        )
    value = int(float(match.group(1)) * _SIZE_UNITS[unit])
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive size")
    return value


def _single_source_manifest(master: Path, folder: Path) -> tuple[Path, Path]:
    """A one-entry manifest for a master file (written in ``folder``): (manifest, root)."""
    from harness.errors import UsageError
    from harness.run.manifest import dump_manifest, manifest_entry
    from quantem.stem4d.io.arina import open_arina

    if not master.is_file():
        raise UsageError(f"--source {master}: no such file")
    source = open_arina(master)
    name = master.name.removesuffix("_master.h5") or master.stem
    entry = manifest_entry(
        name,
        master,
        master.parent,
        source.scan_shape,
        source.detector_shape,
        source.dtype.name,
        source_shards=False,  # made now: checking the files against it would prove nothing
    )
    manifest = folder / "source-manifest.json"
    manifest.write_bytes(dump_manifest([entry], description=f"--source {master}"))
    return manifest, master.parent


def run_compute_command(args: argparse.Namespace) -> int:
    import tempfile

    from harness.commands.history import opened_optional_history
    from harness.errors import UsageError
    from harness.render import registration_renderer
    from harness.run.compute.config import ComputeConfig
    from harness.run.compute.kind import run_compute
    from harness.run.compute.workloads import ComputeParameters
    from harness.run.provenance import check_code_origin
    from harness.views.console import make_console

    check_history_usage(args)
    if args.reps < 1:
        raise UsageError("--reps must be at least 1")
    check_code_origin()
    if args.energy_ev is not None and args.voltage_kv is not None:
        raise UsageError("give the beam energy once: --energy-ev or --voltage-kv")
    if args.trials < 1 or args.seed < 0:
        raise UsageError("--trials must be at least 1 and --seed at least 0")
    parameters = ComputeParameters(
        energy_ev=args.energy_ev if args.voltage_kv is None else args.voltage_kv * 1e3,
        convergence_mrad=args.convergence_mrad,
        mrad_per_pixel=args.mrad_per_pixel,
        inverse_angstrom_per_pixel=args.inverse_angstrom_per_pixel,
        accept_calibration_mismatch=args.accept_calibration_mismatch,
        scan_step_angstrom=args.scan_step,
        dtype=args.dtype,
        rotation_deg=args.rotation,
        transpose={"auto": None, "yes": True, "no": False}[args.transpose],
        bin_factor=args.bin_factor,
        max_shift=args.max_shift,
        c10_guess_angstrom=args.c10_guess,
        upsample=args.upsample,
        correct_aberrations=args.correct_aberrations,
        inner=args.inner,
        outer=args.outer,
        unit=args.unit,
        trials=args.trials,
        seed=args.seed,
        regions=tuple(args.regions),
        refine_evaluations=args.refine_evaluations,
        memory_budget_bytes=args.memory_budget,
        scan_block_rows=args.scan_block_rows,
    )
    console = make_console()
    source = Path(args.source)
    with (
        opened_optional_history(run_history_location(args)) as history,
        tempfile.TemporaryDirectory(prefix="harness-compute-") as tmp,
    ):
        if source.suffix == ".json":
            manifest, root = source, Path(args.root) if args.root else source.parent
        else:
            manifest, root = _single_source_manifest(source, Path(tmp))
        config = ComputeConfig(
            workload=args.workload,
            root=root,
            manifest=manifest,
            backend=args.backend,
            storage_id=args.storage_id,
            output_dir=args.output_dir,
            reps=args.reps,
            parameters=parameters,
            save_outputs=args.save_outputs,
            accept_output_change=args.accept_output_change,
            history=history,
            render=registration_renderer(),
            baseline=args.baseline,
            regression_percent=args.regression_percent,
            check_source_files=not args.no_verify_source,
            fresh_processes=args.fresh_process,
            peer_python=args.peer_python,
            source_format=args.source_format,
            qem_version=args.qem_version,
            representation=args.representation,
            command=["harness", *sys.argv[1:]],
        )
        outcome = run_compute(config)
        print_compute_summary(outcome.report, console)
        print_line(console, f"report: {outcome.report_path}")
        print_registered(console, history, outcome.registered)
    return outcome.exit_code


def print_compute_summary(doc: dict, console) -> None:
    """Stage medians and output hashes (plain text; user text is never markup, and its
    control characters are escaped)."""
    from harness.run.fresh.first_call import first_call_lines

    status = doc["status"]
    lines = [
        f"{doc['benchmark']} on {doc['conditions']['backend']}: execution {status['execution']}, "
        f"correctness {status['correctness']}, performance {status['performance']}"
    ]
    for summary in doc["summaries"]:
        median = summary["median"]
        lines.append(
            f"  {summary['acquisition']} {summary['stage']:<12} first {summary['first']:.4g} s"
            + (
                ""
                if median is None
                else f"  warm median {median:.4g} s  p90 {summary['p90']:.4g} s"
            )
            + (
                f"  ratio_to_floor {summary['ratio_to_floor']:.2f}x ({summary['floor_method']})"
                if summary.get("ratio_to_floor") is not None
                else ""
            )
        )
    floors = doc.get("floors") or {}
    for acquisition, floor in (floors.get("read_once") or {}).items():
        if floor:
            lines.append(
                f"  {acquisition} floor {floor['method']}: {floor['seconds']:.4g} s over "
                f"{floor['bytes']} bytes"
            )
    for acquisition, stages in (floors.get("mask_lines") or {}).items():
        for stage, floor in stages.items():
            if floor:
                lines.append(
                    f"  {acquisition} {stage} floor {floor['method']}: {floor['seconds']:.4g} s "
                    f"over {floor['bytes']} bytes ({floor['settings']['read']}'s lines)"
                )
    if any(s.get("floor_status") == "too_weak" for s in doc["summaries"]):
        lines.append("  a stage measured below its floor: the floor is too weak (a defect of it)")
    for acquisition in doc["acquisitions"]:
        for finding in (acquisition.get("fitted") or {}).get("calibration_check", []):
            if finding["status"] != "ok":
                lines.append(
                    f"  {acquisition['id']} calibration {finding['status']}: {finding['message']}"
                )
        for note in (acquisition.get("fitted") or {}).get("warnings", []):
            lines.append(f"  {acquisition['id']} warning: {note}")
        for name, digest in sorted(acquisition["outputs"].items()):
            lines.append(
                f"  {acquisition['id']} {name}: {digest['dtype']} {digest['shape']} "
                f"sha256 {digest['sha256'][:16]}"
            )
    lines += first_call_lines(doc)
    for failure in status["failures"]:
        lines.append(f"  failure: {failure}")
    console.print("\n".join(map(terminal_text, lines)), markup=False, highlight=False)
