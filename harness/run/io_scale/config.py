"""What a ``harness run io-scale`` run is asked to do, and whether it may run.

:class:`IoScaleConfig` is built by the CLI (``harness.commands.run``), by ``harness
recheck`` and the paired worker (from a report's conditions) or by tests;
:func:`check_config` refuses a bad one (UsageError), requires the backend once and
returns its :class:`~harness.run.backends.BackendProfile` (with the ``--devices`` a
sharded cuda load uses). The kind that runs it is :mod:`harness.run.io_scale.kind`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError
from harness.history.backend import HistoryBackend
from harness.history.store import RegistrationRenderer
from harness.run.backends import BackendProfile, profile_for
from harness.run.instrumentation import refuse_instrumentation
from harness.verdict import DEFAULT_RECHECK_LOOKS
from quantem.stem4d.cuda.sharded import device_count, parse_devices
from quantem.stem4d.io.qem import format as qem_format

#: The ``.qem`` format major versions a run can write (quantem.stem4d.io.qem.format).
QEM_VERSIONS = (qem_format.VERSION_MAJOR, qem_format.VERSION_2)


@dataclass
class IoScaleConfig:
    """Everything a run needs; built by the CLI (``harness.commands.run``) or by tests."""

    root: Path
    manifest: Path
    backend: str
    storage_id: str
    output_dir: Path
    reps: int = 5
    load_only: bool = False
    representation: str = "dense"
    #: ``--qem-version``: the format major version of the run's disposable ``.qem``
    #: (quantem.stem4d.io.qem.writer; 1 is the writer's default).
    qem_version: int = 1
    #: the history (a :class:`~harness.history.backend.HistoryBackend`, opened by the
    #: command) the baseline is looked up in and the report registered into; None: none
    history: HistoryBackend | None = None
    baseline: str | None = None
    regression_percent: float = 20.0
    #: calibration SHA-256 prefix (None: the newest matching one in the history)
    calibration: str | None = None
    #: with a baseline: measure each flagged cell this many more rounds, right away
    recheck: int = 0
    #: the most batches of ``recheck`` rounds a sequential recheck measures (it stops when
    #: every rechecked cell is cleared or confirmed; the verdict splits alpha over them)
    recheck_looks: int = DEFAULT_RECHECK_LOOKS
    #: Whether the recheck measures the baseline's code too, alternately (harness.run.paired.coordinator):
    #: True ``--paired`` (required), False ``--no-paired``, None (default) when its code can
    #: be had (harness.run.paired.pairing)
    paired: bool | None = None
    #: ``--baseline-tree``: the baseline's code (default: this checkout when its source
    #: fingerprint is the baseline's, else its git revision, exported)
    baseline_tree: Path | None = None
    lock_dir: Path | None = None  # None: harness.run.host_lock.default_lock_dir()
    lock_timeout: float = 600.0
    fresh_index: bool = False
    #: Check every HDF5 chunk against the frame index's XXH3-64 (part of the comparison key)
    #: and every shard file against the manifest; None (default): on wherever the backend
    #: loads HDF5 in process (cpu, cuda), resolved by check_config; False: --no-verify-source.
    verify_source: bool | None = None
    #: Check every shard file against the manifest's size and SHA-256 before measuring
    #: (False: --no-verify-source).
    check_source_files: bool = True
    #: ``--floors``: measure each cell's floor in the run (harness.run.floors.cells).
    floors: bool = False
    #: ``--fresh-process N``: N fresh processes per acquisition and format (harness.run.fresh.process).
    fresh_processes: int = 0
    cold_reloads: int = 0
    verify: bool = True
    source_hashes: bool = True
    reloads: int = 1
    profile_reload: bool = False
    native_binary: Path | None = None
    threads: int | None = None
    #: ``--devices``: shard every cuda load over these GPUs or ``"all"`` (None: one GPU).
    devices: tuple[int, ...] | str | None = None
    command: Sequence[str] = ()
    #: The report's ``purpose`` (one run of a calibration), or None for an ordinary run.
    purpose: dict | None = None
    progress: bool | None = None  # None: only on a TTY
    #: Called with (event, details) at stage boundaries; tests use it to act mid-run.
    on_event: Callable[[str, dict], None] | None = None
    #: Brings the history's rendered files up to date after registration (the CLI passes
    #: ``registration_renderer()``; the run layer does not import the views). None: no render.
    render: RegistrationRenderer | None = None


def check_config(cfg: IoScaleConfig) -> BackendProfile:
    """Refuse a bad configuration (UsageError); return the backend's profile, required once."""
    profile = profile_for(cfg.backend)
    if cfg.reps < 1:
        raise UsageError("--reps must be at least 1")
    if cfg.qem_version not in QEM_VERSIONS:
        raise UsageError(f"--qem-version must be one of {QEM_VERSIONS}, got {cfg.qem_version}")
    if cfg.cold_reloads < 0 or cfg.reloads < 0:
        raise UsageError("--cold-reloads and --reloads must not be negative")
    if cfg.regression_percent <= 0:
        raise UsageError("--regression-percent must be positive")
    if cfg.fresh_processes < 0:
        raise UsageError("--fresh-process must not be negative")
    if cfg.fresh_processes and not profile.in_process:
        raise UsageError("--fresh-process needs --backend cpu or cuda (a native load is a process)")
    if cfg.recheck < 0:
        raise UsageError("--recheck must not be negative")
    if cfg.recheck_looks < 1:
        raise UsageError("--recheck-looks must be at least 1")
    if cfg.recheck and not cfg.baseline:
        raise UsageError("--recheck needs --baseline (it rechecks the cells the baseline flags)")
    if cfg.paired is not None and not cfg.recheck:
        flag = "--paired" if cfg.paired else "--no-paired"
        raise UsageError(f"{flag} needs --recheck K (it says how the recheck runs)")
    if cfg.baseline_tree is not None and not cfg.recheck:
        raise UsageError("--baseline-tree needs --recheck K (it is the code a paired recheck runs)")
    if cfg.baseline_tree is not None and cfg.paired is False:
        raise UsageError("--baseline-tree cannot go with --no-paired")
    if (cfg.paired or cfg.baseline_tree is not None) and not profile.in_process:
        raise UsageError(
            "--paired needs --backend cpu or cuda (a native load runs this checkout's built "
            "binary, which is not the baseline's code)"
        )
    if cfg.lock_timeout < 0:
        raise UsageError("--lock-timeout must not be negative")
    if cfg.representation not in ("dense", "encoded"):
        raise UsageError(f"unknown representation {cfg.representation!r}")
    if cfg.representation == "encoded" and not profile.device_pool:
        raise UsageError("--representation encoded needs --backend cuda")
    if cfg.verify_source is None:
        cfg.verify_source = profile.in_process
    if cfg.verify_source and not profile.in_process:
        raise UsageError(
            "--verify-source needs --backend cpu or cuda (the native reader reads .qem, "
            "which has block checksums)"
        )
    if profile.name == "native" and cfg.native_binary is None:
        raise UsageError("--backend native needs --native-binary PATH")
    if cfg.native_binary is not None and not os.access(cfg.native_binary, os.X_OK):
        raise UsageError(f"--native-binary {cfg.native_binary} is not an executable file")
    if not cfg.storage_id.strip():
        raise UsageError("--storage-id must not be empty")
    refuse_instrumentation()  # timed loads run without profiling hooks
    profile.require()  # BackendUnavailableError (exit 1) saying why
    if cfg.devices is not None:
        if cfg.backend != "cuda":
            raise UsageError("--devices needs --backend cuda")
        try:
            spec = cfg.devices if isinstance(cfg.devices, str) else list(cfg.devices)
            ids = parse_devices(spec, device_count())
        except ValueError as exc:
            raise UsageError(f"--{exc}") from None  # "--devices: GPU 5 does not exist; ..."
        profile = dataclasses.replace(profile, devices=tuple(ids))
    return profile
